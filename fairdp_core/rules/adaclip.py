"""AdaClip (Andrew et al. 2021; Opacus's AdaClipDPOptimizer), a rival: one bound C for every group, tracking the
γ-quantile of the norms from a noised centred count of sensitivity ½ (noise multiplier 2σ_b). Settings:
``train.adaclip``; the initial C is ``train.clip``. η and C's public cap C_max are stored in the TrainSpec as
``eta_q`` and ``q_max`` (``stored_as``)."""

from __future__ import annotations

import torch
from pydantic import model_validator

from ..schema import Fraction, Positive, Strict
from .base import CountRule
from .policy import GlobalQuantile, quantile_update


class Settings(Strict):
    """AdaClip (Andrew et al. 2021; Opacus's AdaClipDPOptimizer), a rival: one bound C for every group, starting at
    ``train.clip`` (or its override), tracking the quantile ``gamma`` of the norms at step ``eta`` (0.5 and 0.2,
    Andrew et al.'s) from a noised centred count of std ``sigma_b`` (None: B/20, theirs), within
    [``c_min``, ``c_max``]."""

    gamma: Fraction = 0.5
    eta: Positive = 0.2
    sigma_b: Positive | None = None
    c_min: Positive = 0.01
    c_max: Positive = 100.0

    @model_validator(mode="after")
    def _ordered(self) -> Settings:
        if self.c_min >= self.c_max:
            raise ValueError(f"c_min ({self.c_min}) must be below c_max ({self.c_max})")
        return self


class AdaClipRule(CountRule):
    name = "adaclip"
    order = 80
    label = "AdaClip"
    color = "#000000"
    config = "adaclip"
    settings = Settings
    fields = ("gamma", "eta", "sigma_b", "c_min", "c_max")
    stored_as = {"eta": "eta_q", "c_max": "q_max"}
    make_private = "make_private_adaclip"
    rival = True
    count_sensitivity = 0.5  # the centred count (Andrew et al., Theorem 1): noise multiplier 2σ_b

    def own_fields(self, train, run, override):
        ac = self.settings_of(train)
        return {"gamma": ac.gamma, "eta": ac.eta, "sigma_b": ac.sigma_b, "c_min": ac.c_min, "c_max": ac.c_max}

    def policy(self, spec, M, K, sig, gens, device):
        return AdaClip(M, K, sig.g, clip=spec.clip, sigma_b=sig.b, gamma=spec.gamma, eta=spec.eta,
                       c_min=spec.c_min, c_max=spec.c_max, batch_size=spec.batch_size,
                       generators=[g["count"] for g in gens], device=device)

    def public_assumptions(self, spec):
        return ("the constants C_init, γ, η, σ_b (the centred count's std; noise multiplier 2σ_b), C_min and C_max, "
                "and the expected batch size B (never the realised one)",)


class AdaClip(GlobalQuantile):
    """AdaClip: one bound C for every group, tracked at quantile γ of the per-sample norms (Andrew, Thakkar,
    McMahan & Ramaswamy 2021, "Differentially private learning with adaptive clipping", arXiv 1905.03871,
    Algorithm 1 and Theorem 1), the rule of Opacus's ``AdaClipDPOptimizer`` (opacus/optimizers/adaclipoptimizer.py).

    After each step, for each model, it releases the CENTRED count s̃ = Σ_i (b_i − ½) + N(0, σ_b²) with
    b_i = 1[C / (‖g_i‖ + 1e-6) ≥ 1] (Opacus's "unclipped": clip factor 1). A record changes it by ±½: L2
    sensitivity ½, noise multiplier 2σ_b, so the step is one Gaussian mechanism with σ_eff = (σ_g⁻² + (2σ_b)⁻²)^(-1/2)
    (Theorem 1; Opacus's ``add_noise`` splits σ the same way). Then, from the release alone,

        b̃ = s̃ / B + ½,      C ← min(C_max, max(C_min, C · exp(−η (b̃ − γ)))),

    B the expected batch size (public). Opacus's ``update_max_grad_norm`` takes b̃ = (Σ_i b_i + noise) / |batch|
    with the REALISED batch size, a private quantity: the two agree when |batch| = B (tested); this policy, and
    :func:`fairdp_core.opacus_compat.make_private_adaclip`, use the public B.
    """

    def __init__(self, M: int, K: int, sigma: float, *, clip: float, sigma_b: float, gamma: float, eta: float,
                 c_min: float, c_max: float, batch_size: int, generators: list[torch.Generator | None],
                 device: torch.device | str = "cpu") -> None:
        super().__init__(M, K, sigma, init=clip, sigma_b=sigma_b, gamma=gamma, eta=eta, batch_size=batch_size,
                         generators=generators, device=device)
        if not 0 < c_min < c_max:
            raise ValueError(f"need 0 < C_min < C_max, got {c_min}, {c_max}")
        self.c_min, self.c_max = float(c_min), float(c_max)
        self.T = torch.clamp(self.T, min=self.c_min, max=self.c_max)

    def bounds(self) -> torch.Tensor:
        return self.T[:, None].expand(self.M, self.K)

    def counts(self, norms: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """[M] exact centred count Σ_i (b_i − ½) over the batch's samples, before noise."""
        unclipped = (self.T[:, None] / (norms + 1e-6) >= 1.0).to(weights.dtype)
        return ((unclipped - 0.5) * weights).sum(1)

    def update_from_release(self, T: torch.Tensor, released: torch.Tensor) -> torch.Tensor:
        """The new C [M] from the old one and the released (noised) centred count [M] only: post-processing."""
        frac = released / self.B + 0.5
        return torch.clamp(quantile_update(T, frac, eta=self.eta, gamma=self.gamma), min=self.c_min, max=self.c_max)

    def state(self) -> dict[str, torch.Tensor]:
        return {"bounds": self.bounds().clone(), "released_counts": self.released.clone()}

RULE = AdaClipRule()
