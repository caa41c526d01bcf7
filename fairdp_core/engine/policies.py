"""Clipping policies: the one seam in which SGD, DP-SGD and the DP-SGD-S variants differ.

A policy holds per-model, per-group clipping bounds ``[M, K]`` and, after each step, updates them from that
step's per-sample norms. The trainer calls, every step:

    factors = clip_factors(norms, groups, policy.bounds())      # pure, tested directly
    noise std per model = policy.noise_std()                     # σ_g · max_k C_k (over ALL groups)
    policy.update(norms, groups, weights)                        # after the step; may release noisy counts

Shapes: ``norms`` [M, W] per-sample gradient norms; ``groups`` [M, W] int64 in 0..K-1; ``weights`` [M, W] in
{0, 1} (0 marks batch padding).
"""

from __future__ import annotations

import math

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

    def __init__(self, M: int, K: int, sigma: float) -> None:
        self.M, self.K, self.sigma = M, K, sigma

    def bounds(self) -> torch.Tensor:
        raise NotImplementedError

    def noise_std(self) -> torch.Tensor:
        """[M]: σ_g · max over all K groups of C_k (never over the groups present in the batch); 0 when σ_g = 0."""
        if self.sigma == 0:
            return torch.zeros(self.M)
        return self.sigma * self.bounds().amax(dim=1)

    def update(self, norms: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> None:
        return None

    def state(self) -> dict[str, torch.Tensor]:
        return {"bounds": self.bounds().clone()}


class NoClip(ClipPolicy):
    """Plain SGD: every factor 1, no noise."""

    def __init__(self, M: int, K: int) -> None:
        super().__init__(M, K, 0.0)
        self._b = torch.full((M, K), math.inf)

    def bounds(self) -> torch.Tensor:
        return self._b


class FixedClip(ClipPolicy):
    """DP-SGD: one bound C for every group."""

    def __init__(self, M: int, K: int, sigma: float, *, clip: float) -> None:
        super().__init__(M, K, sigma)
        if clip <= 0:
            raise ValueError(f"clipping bound must be positive, got {clip}")
        self._b = torch.full((M, K), float(clip))

    def bounds(self) -> torch.Tensor:
        return self._b


class GroupQuantileClip(ClipPolicy):
    """DP-SGD-S (STUDY.md §3): C_k = max(τ·Q_k, C_min), Q_k tracked privately.

    After each step, for each model and group k: b̃_k = (#{i in batch, group k, ‖g_i‖ ≤ Q_k} + N(0, σ_b²)) /
    (q·n_k), then Q_k ← Q_k · exp(−η_Q (b̃_k − γ)). The counts are noised with each model's own generator.
    ``group_sizes`` [M, K]: n_k of each model's pool, treated as public exactly as n is in q = B/n.
    """

    def __init__(self, M: int, K: int, sigma: float, *, sigma_b: float, tau: float, gamma: float, eta: float,
                 c_min: float, q_init: float, sample_rate: torch.Tensor, group_sizes: torch.Tensor,
                 generators: list[torch.Generator]) -> None:
        super().__init__(M, K, sigma)
        if sigma_b <= 0:
            raise ValueError("DP-SGD-S needs σ_b > 0: its counts must be noised")
        self.sigma_b, self.tau, self.gamma, self.eta, self.c_min = sigma_b, tau, gamma, eta, c_min
        self.Q = torch.full((M, K), float(q_init))
        self.expected = (sample_rate[:, None] * group_sizes).clamp(min=1e-12)  # q·n_k, [M, K]
        self.gens = generators

    def bounds(self) -> torch.Tensor:
        return torch.clamp(self.tau * self.Q, min=self.c_min)

    def count_below(self, norms: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """[M, K]: exact counts #{i: group k, ‖g_i‖ ≤ Q_k} in each model's batch (before noise)."""
        below = (norms <= self.Q.gather(1, groups)).to(weights.dtype) * weights
        return torch.zeros(self.M, self.K).scatter_add_(1, groups, below)

    def update(self, norms: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> None:
        counts = self.count_below(norms, groups, weights)
        noise = torch.stack([torch.randn(self.K, generator=g) for g in self.gens]) * self.sigma_b
        self.Q = quantile_update(self.Q, (counts + noise) / self.expected, eta=self.eta, gamma=self.gamma)

    def state(self) -> dict[str, torch.Tensor]:
        return {"bounds": self.bounds().clone(), "quantiles": self.Q.clone()}


class GroupEMAPercentileClip(ClipPolicy):
    """DP-SGD-S as first described, NOT private: C_k = max(τ · EMA_k, C_min), EMA over batches of the raw
    ``percentile``-th percentile of group-k norms (momentum ``momentum``). Its ε is not guaranteed."""

    guaranteed = False

    def __init__(self, M: int, K: int, sigma: float, *, tau: float, c_min: float, init: float,
                 momentum: float = 0.9, percentile: float = 75.0) -> None:
        super().__init__(M, K, sigma)
        self.tau, self.c_min, self.momentum, self.p = tau, c_min, momentum, percentile / 100.0
        self.ema = torch.full((M, K), float(init))

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
