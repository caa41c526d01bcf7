"""DP-SGD-S, the study's reading of the paper's text: per-group bounds C_k = max(τ·Q_k, C_min), Q_k tracking the
γ-quantile of group k's norms from noised counts alone (:class:`GroupQuantileClip`).
Settings: ``train.dpsgd_s`` (τ and γ may also come per run, γ per dataset override)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..schema import Fraction, Positive, Strict
from .base import Rule, Sigmas, default_sigma_b, split_sigma
from .policy import ClipPolicy, quantile_update


def quantile_fields(train, run, override) -> dict[str, object]:
    """τ (the run's, else train.dpsgd_s's), γ (the run's, else the override's, else train.dpsgd_s's), C_min, Q_init:
    the bounds' settings both DP-SGD-S variants share."""
    s = RULE.settings_of(train)  # DP-SGD-S's section, for both variants
    gamma = run.gamma if run.gamma is not None else override("gamma", s.gamma)
    return {"tau": run.tau if run.tau is not None else s.tau, "gamma": gamma, "c_min": s.c_min, "q_init": s.q_init}



class Settings(Strict):
    """DP-SGD-S (docs/study.md, 'DP-SGD-S, the quantile rule'): C_k = max(τ·Q_k, C_min); target quantile γ; step η_Q;
    count noise σ_b (None: B/20, Andrew et al.); initial Q_k; public cap Q_max; public floor of the noised count
    denominator (None: σ_b)."""

    tau: Positive = 1.0
    gamma: Fraction = 0.75
    eta_q: Positive = 0.2
    sigma_b: Positive | None = None
    c_min: Positive = 0.01
    q_init: Positive = 1.0
    q_max: Positive = 100.0
    count_floor: Positive | None = None


class DPSGDS(Rule):
    name = "dpsgd_s"
    order = 20
    label = "DP-SGD-S"
    color = "#D55E00"
    uses_clip = False
    config = "dpsgd_s"
    settings = Settings
    fields = ("tau", "gamma", "c_min", "q_init", "eta_q", "sigma_b", "q_max", "count_floor")
    make_private = "make_private_dpsgd_s"

    def own_fields(self, train, run, override):
        s = self.settings_of(train)
        return {**quantile_fields(train, run, override), "eta_q": s.eta_q, "sigma_b": s.sigma_b, "q_max": s.q_max,
                "count_floor": s.count_floor}

    def sigmas(self, spec, sigma_eff):
        sigma_b = default_sigma_b(spec)
        return Sigmas(split_sigma(sigma_eff, sigma_b), sigma_b, None, sigma_eff)

    def policy(self, spec, M, K, sig, gens, device):
        return GroupQuantileClip(M, K, sig.g, sigma_b=sig.b, tau=spec.tau, gamma=spec.gamma, eta=spec.eta_q,
                                 c_min=spec.c_min, q_init=spec.q_init, q_max=spec.q_max, floor=spec.count_floor,
                                 generators=[g["count"] for g in gens], device=device)

    def public_assumptions(self, spec):
        return ("the constants τ, γ, η_Q, σ_b, C_min, Q_init, Q_max and the count floor (no per-group size n_k)",)


class GroupQuantileClip(ClipPolicy):
    """DP-SGD-S (docs/study.md, 'DP-SGD-S, the quantile rule'): C_k = max(τ·Q_k, C_min), Q_k tracked privately from
    noised counts alone.

    After each step, for each model it releases the 2K count vector (below_k, above_k): the batch's samples of
    group k with ‖g_i‖ ≤ Q_k and with ‖g_i‖ > Q_k. Each sample is in exactly one cell, so the vector's L2
    sensitivity under add/remove is 1; every cell gets N(0, σ_b²) from the model's own ``count`` generator. Then

        b̃_k = clip(below̃_k / max(below̃_k + abovẽ_k, floor), 0, 1),   Q_k ← min(Q_max, Q_k · exp(−η (b̃_k − γ)))

    (geometric quantile tracking, Andrew et al. 2021, arXiv 1905.03871, Eq. 2, with the denominator estimated
    from the same noised release instead of the private group size n_k). Nothing else about the batch reaches Q:
    no realised group size, no n_k. ``floor`` (default σ_b) and ``q_max`` are public constants; a group with no
    records in a model gets pure-noise counts and a finite, capped Q (never NaN). ``q_init``: a float or one
    value per group [K]. Tensors live on ``device`` (the trainer's), and so must the generators.
    """

    def __init__(self, M: int, K: int, sigma: float, *, sigma_b: float, tau: float, gamma: float, eta: float,
                 c_min: float, q_init: float | Sequence[float], generators: list[torch.Generator | None],
                 q_max: float = 100.0, floor: float | None = None, device: torch.device | str = "cpu") -> None:
        super().__init__(M, K, sigma, device=device)
        if sigma_b <= 0:
            raise ValueError("DP-SGD-S needs σ_b > 0: its counts must be noised")
        if len(generators) != M:
            raise ValueError(f"need one count generator per model: got {len(generators)} for M = {M}")
        self.sigma_b, self.tau, self.gamma, self.eta, self.c_min = sigma_b, tau, gamma, eta, c_min
        self.q_max = float(q_max)
        self.floor = float(sigma_b if floor is None else floor)
        if self.floor <= 0 or self.q_max <= 0:
            raise ValueError(f"floor and q_max must be positive, got {self.floor}, {self.q_max}")
        init = torch.as_tensor(q_init, dtype=torch.float32, device=self.device)
        if init.dim() == 1 and len(init) != K:
            raise ValueError(f"q_init has {len(init)} values for K = {K} groups")
        self.Q = torch.clamp(init.expand(M, K).clone(), max=self.q_max)
        self.gens = generators
        self.released = torch.zeros(M, 2 * K, device=self.device)  # the last step's noised counts (public)

    def bounds(self) -> torch.Tensor:
        return torch.clamp(self.tau * self.Q, min=self.c_min)

    def counts(self, norms: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """[M, 2K]: exact (below_0..below_{K-1}, above_0..above_{K-1}) in each model's batch, before noise."""
        below = (norms <= self.Q.gather(1, groups)).to(weights.dtype)
        cell = groups + self.K * (1 - below).to(groups.dtype)  # below_k -> k, above_k -> K + k
        return torch.zeros(self.M, 2 * self.K, device=norms.device).scatter_add_(1, cell, weights)

    def count_noise(self) -> torch.Tensor:
        """[M, 2K] N(0, σ_b²), each model's row from its own generator, drawn on that generator's device."""
        if any(g is None for g in self.gens):
            raise RuntimeError("this policy was built without count generators: its caller noises the counts")
        return torch.stack([torch.randn(2 * self.K, generator=g, device=g.device) for g in self.gens]
                           ).to(self.device) * self.sigma_b

    def update(self, norms: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> None:
        self.released = self.counts(norms, groups, weights) + self.count_noise()
        self.Q = self.update_from_release(self.Q, self.released)

    def update_from_release(self, Q: torch.Tensor, released: torch.Tensor) -> torch.Tensor:
        """The new Q from the old one and the released (noised) counts [M, 2K] only: post-processing."""
        below, above = released[:, : self.K], released[:, self.K:]
        frac = torch.clamp(below / torch.clamp(below + above, min=self.floor), 0.0, 1.0)
        # the 1e-6 floor only keeps Q from underflowing to 0, where the geometric update could never move it
        return torch.clamp(quantile_update(Q, frac, eta=self.eta, gamma=self.gamma), min=1e-6, max=self.q_max)

    def state(self) -> dict[str, torch.Tensor]:
        return {"bounds": self.bounds().clone(), "quantiles": self.Q.clone(), "released_counts": self.released.clone()}

RULE = DPSGDS()
