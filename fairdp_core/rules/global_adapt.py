"""DPSGD-Global-Adapt (Esipova et al. 2023), a rival: gradients below Z scaled by C/Z, above clipped to C; Z tracks
a quantile of the norms from one noised count of sensitivity 1 (:class:`GlobalAdaptClip`). Settings:
``train.global_adapt``; C is ``train.clip``. Z's initial value, the threshold and η are stored in the TrainSpec as
``q_init``, ``tau`` and ``eta_q`` (``stored_as``)."""

from __future__ import annotations

import torch

from ..schema import Fraction, Positive, Strict
from .base import CountRule
from .policy import GlobalQuantile, quantile_update


class Settings(Strict):
    """DPSGD-Global-Adapt (Esipova et al. 2023), a rival: gradients below Z scaled by C/Z, above clipped to C, with
    C = ``train.clip`` (or its override). Z starts at ``z_init`` (100, the reference code's) and tracks the
    quantile ``gamma`` of the norms at step ``eta`` from a noised count (σ_b = 10, the code's) of norms above
    ``threshold``·Z; γ = 0.9, η = 1 is the code's update Z ← Z·exp(ã/B − 0.1)."""

    z_init: Positive = 100.0
    threshold: Positive = 1.0
    gamma: Fraction = 0.9
    eta: Positive = 1.0
    sigma_b: Positive = 10.0


class GlobalAdapt(CountRule):
    name = "global_adapt"
    order = 70
    label = "DPSGD-Global-Adapt"
    color = "#56B4E9"
    config = "global_adapt"
    settings = Settings
    fields = ("z_init", "threshold", "gamma", "eta", "sigma_b")
    stored_as = {"z_init": "q_init", "threshold": "tau", "eta": "eta_q"}
    make_private = "make_private_global_adapt"
    rival = True

    def own_fields(self, train, run, override):
        ga = self.settings_of(train)
        return {"z_init": ga.z_init, "threshold": ga.threshold, "gamma": ga.gamma, "eta": ga.eta, "sigma_b": ga.sigma_b}

    def policy(self, spec, M, K, sig, gens, device):
        if not isinstance(spec.z_init, (int, float)):
            raise ValueError("global_adapt takes one z_init (Z's initial value)")
        return GlobalAdaptClip(M, K, sig.g, clip=spec.clip, z_init=spec.z_init, threshold=spec.threshold,
                               sigma_b=sig.b, gamma=spec.gamma, eta=spec.eta, batch_size=spec.batch_size,
                               generators=[g["count"] for g in gens], device=device)

    def public_assumptions(self, spec):
        return ("the constants C, Z_init, τ, γ, η and σ_b, and the expected batch size B (never the realised one)",)


class GlobalAdaptClip(GlobalQuantile):
    """DPSGD-Global-Adapt (Esipova, Ashari Ghomi, Luo, Cresswell, ICLR 2023, "Disparate impact in differential
    privacy from gradient misalignment", §5): strict scaling of every per-sample gradient under an upper bound Z,
    with Z tracked by a private quantile.

    Factor, exactly the authors' code (layer6ai-labs/fair-dp, optimizers/dpsgd_global_adaptive_optimizer.py,
    ``clip_and_accumulate``), with c_i = min(1, C / (‖g_i‖ + 1e-6)):

        f_i = C / Z   if c_i ≥ C / Z,   else c_i,

    i.e. f_i = C / max(Z, ‖g_i‖ + 1e-6) while Z ≥ C (every gradient below Z scaled by the same C/Z, so their
    relative sizes, hence the direction of their sum, are kept; those above Z clipped to C), and plain clipping at
    C when Z < C. Always ‖f_i g_i‖ ≤ C: ``bounds()`` is C for every group, the gradient noise σ_g · C.

    Z after each step (authors' code, trainers/trainer.py, ``DpsgdGlobalAdaptiveTrainer._update_Z``): the released
    count ã = #{i : ‖g_i‖ > τ·Z} + N(0, σ_b²) (L2 sensitivity 1, the model's own ``count`` generator), then
    Z ← Z · exp(ã/B − η_Z), which is Andrew et al.'s geometric update Z ← Z·exp(−η(b̃ − γ)) with b̃ = 1 − ã/B,
    η = 1 and γ = 1 − η_Z: the code's η_Z = 0.1 tracks the 90th percentile (γ = 0.9, η = 1, the defaults here).

    DP-correct where the reference code is not: the code divides the noised count by the REALISED batch size, a
    private quantity it does not release; here by the expected batch size B (public), as Andrew et al. (2021,
    Algorithm 1) divide by the public m. The count and the gradient sum form one Gaussian mechanism per step,
    σ_eff = (σ_g⁻² + σ_b⁻²)^(-1/2), which the accountant is charged (the code composes them separately: valid,
    looser). Z is floored at 1e-6 only so that the geometric update can always move it. ``clip_stats`` counts
    samples with ‖g_i‖ > C (all gradients are scaled, not only those).
    """

    def __init__(self, M: int, K: int, sigma: float, *, clip: float, z_init: float, threshold: float,
                 sigma_b: float, gamma: float, eta: float, batch_size: int,
                 generators: list[torch.Generator | None], device: torch.device | str = "cpu") -> None:
        super().__init__(M, K, sigma, init=z_init, sigma_b=sigma_b, gamma=gamma, eta=eta, batch_size=batch_size,
                         generators=generators, device=device)
        if clip <= 0 or threshold <= 0:
            raise ValueError(f"C and the threshold τ must be positive, got {clip}, {threshold}")
        self.clip, self.threshold = float(clip), float(threshold)
        self._b = torch.full((M, K), self.clip, device=self.device)

    @property
    def Z(self) -> torch.Tensor:
        """[M] the tracked upper bounds."""
        return self.T

    def bounds(self) -> torch.Tensor:
        return self._b

    def factors(self, norms: torch.Tensor, groups: torch.Tensor, bounds: torch.Tensor | None = None) -> torch.Tensor:
        c = torch.clamp(self.clip / (norms + 1e-6), max=1.0)
        scale = (self.clip / self.T)[:, None]
        return torch.where(c >= scale, scale, c)

    def counts(self, norms: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """[M] exact number of the batch's samples with ‖g_i‖ > τ·Z, before noise."""
        return ((norms > self.threshold * self.T[:, None]) * weights).sum(1)

    def update_from_release(self, T: torch.Tensor, released: torch.Tensor) -> torch.Tensor:
        """The new Z [M] from the old one and the released (noised) count [M] only: post-processing."""
        return torch.clamp(quantile_update(T, 1.0 - released / self.B, eta=self.eta, gamma=self.gamma), min=1e-6)

    def state(self) -> dict[str, torch.Tensor]:
        return {"bounds": self.bounds().clone(), "upper_bounds": self.T.clone(), "released_counts": self.released.clone()}

RULE = GlobalAdapt()
