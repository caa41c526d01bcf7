"""Clipping policies: the one seam in which SGD, DP-SGD and the DP-SGD-S variants differ.

A policy holds per-model, per-group clipping bounds ``[M, K]`` and, after each step, updates them from that
step's per-sample norms. The trainer calls, every step:

    factors = clip_factors(norms, groups, policy.bounds())      # pure, tested directly
    noise std per model = policy.noise_std()                     # σ_g · max_k C_k (over ALL groups)
    policy.update(norms, groups, weights)                        # after the step; DP-SGD-S releases noised counts

Shapes: ``norms`` [M, W] per-sample gradient norms; ``groups`` [M, W] int64 in 0..K-1; ``weights`` [M, W] in
{0, 1} (0 marks batch padding).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = [
    "ClipPolicy",
    "FixedClip",
    "GroupEMAPercentileClip",
    "GroupQuantileClip",
    "NoClip",
    "clip_factors",
    "quantile_update",
]


def clip_factors(norms: torch.Tensor, groups: torch.Tensor, bounds: torch.Tensor) -> torch.Tensor:
    """min(1, C_{m, g_i} / ‖g_i‖) per sample: norms [M, W], groups [M, W], bounds [M, K] -> [M, W].

    An infinite bound gives factor 1 (no clipping). The 1e-6 guard matches Opacus's ``clip_and_accumulate``.
    """
    C = bounds.gather(1, groups)
    return torch.clamp(C / (norms + 1e-6), max=1.0)


def quantile_update(Q: torch.Tensor, frac_below: torch.Tensor, *, eta: float, gamma: float) -> torch.Tensor:
    """Geometric quantile tracking, Q ← Q · exp(−η (b̃ − γ)) (Andrew et al. 2021, arXiv 1905.03871, Eq. 2)."""
    return Q * torch.exp(-eta * (frac_below - gamma))


class ClipPolicy:
    """Base: no state. ``M`` models, ``K`` groups, noise multiplier ``sigma`` applied to the max bound."""

    guaranteed = True

    def __init__(self, M: int, K: int, sigma: float, *, device: torch.device | str = "cpu") -> None:
        self.M, self.K, self.sigma, self.device = M, K, sigma, torch.device(device)

    def bounds(self) -> torch.Tensor:
        raise NotImplementedError

    def noise_std(self) -> torch.Tensor:
        """[M]: σ_g · max over all K groups of C_k (never over the groups present in the batch); 0 when σ_g = 0."""
        if self.sigma == 0:
            return torch.zeros(self.M, device=self.device)
        return self.sigma * self.bounds().amax(dim=1)

    def update(self, norms: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> None:
        return None

    def state(self) -> dict[str, torch.Tensor]:
        return {"bounds": self.bounds().clone()}


class NoClip(ClipPolicy):
    """Plain SGD: every factor 1, no noise."""

    def __init__(self, M: int, K: int, *, device: torch.device | str = "cpu") -> None:
        super().__init__(M, K, 0.0, device=device)
        self._b = torch.full((M, K), math.inf, device=self.device)

    def bounds(self) -> torch.Tensor:
        return self._b


class FixedClip(ClipPolicy):
    """DP-SGD: one bound C for every group."""

    def __init__(self, M: int, K: int, sigma: float, *, clip: float, device: torch.device | str = "cpu") -> None:
        super().__init__(M, K, sigma, device=device)
        if clip <= 0:
            raise ValueError(f"clipping bound must be positive, got {clip}")
        self._b = torch.full((M, K), float(clip), device=self.device)

    def bounds(self) -> torch.Tensor:
        return self._b


class GroupQuantileClip(ClipPolicy):
    """DP-SGD-S (STUDY.md §3): C_k = max(τ·Q_k, C_min), Q_k tracked privately from noised counts alone.

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


class GroupEMAPercentileClip(ClipPolicy):
    """DP-SGD-S as first described, NOT private: C_k = max(τ · EMA_k, C_min), EMA over batches of the raw
    ``percentile``-th percentile of group-k norms (momentum ``momentum``). Its ε is not guaranteed."""

    guaranteed = False

    def __init__(self, M: int, K: int, sigma: float, *, tau: float, c_min: float, init: float,
                 momentum: float = 0.9, percentile: float = 75.0, device: torch.device | str = "cpu") -> None:
        super().__init__(M, K, sigma, device=device)
        self.tau, self.c_min, self.momentum, self.p = tau, c_min, momentum, percentile / 100.0
        self.ema = torch.full((M, K), float(init), device=self.device)

    def bounds(self) -> torch.Tensor:
        return torch.clamp(self.tau * self.ema, min=self.c_min)

    def update(self, norms: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> None:
        for k in range(self.K):
            sel = (groups == k) & (weights > 0)
            masked = torch.where(sel, norms, torch.nan)
            present = sel.any(dim=1)
            if present.any():
                pct = torch.nanquantile(masked[present], self.p, dim=1)
                self.ema[present, k] = self.momentum * self.ema[present, k] + (1 - self.momentum) * pct
