"""Clipping policies: the one seam in which SGD, DP-SGD and the DP-SGD-S variants differ.

A policy holds per-model, per-group clipping bounds ``[M, K]`` and, after each step, updates them from that
step's per-sample norms. The trainer calls, every step:

    factors = clip_factors(norms, groups, policy.bounds())      # pure, tested directly
    noise std per model = policy.noise_std()                     # σ_g · max_k C_k (over ALL groups)
    policy.update(norms, groups, weights)                        # after the step; DP-SGD-S releases noised counts

The paper code's rule (:class:`GroupMeanRatioClip`, :class:`GroupMeanRatioClipCode`) also needs the per-group sums
of per-sample gradients: a policy whose ``group_sums`` is "after" (or "before") gets them through
``observe_sums(sums [M, K, P], groups, weights)`` after the step (or before its clipping), weighted by
``sum_factors(norms)``.

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
    "GroupMeanRatioClip",
    "GroupMeanRatioClipCode",
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
    group_sums: str | None = None  # "after" / "before": the trainer passes per-group gradient sums (paper rule)

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


def _group_means(sums: torch.Tensor, counts: torch.Tensor, floor: float) -> torch.Tensor:
    """[M, K, P] / max([M, K], floor): per-group mean vectors."""
    return sums / torch.clamp(counts, min=floor).unsqueeze(-1)


class GroupMeanRatioClip(ClipPolicy):
    """DP-SGD-S with the paper code's rule, DP-correct (STUDY.md §3): C_k = max(C_min, C0 · min(s, ‖ḡ‖ / ‖ḡ_k‖)).

    The group whose mean gradient is larger than the overall mean gets a smaller bound (the quantile rule does the
    opposite). After each step, for each model, it releases from that step's Poisson batch

    - the K per-group sums S_k = Σ_{i in k} g_i · min(1, C0 / ‖g_i‖) (gradients clipped at C0): a record changes
      one of them by a vector of norm ≤ C0; every coordinate gets N(0, (σ_s · C0)²);
    - the K group counts n_k: a record changes one by 1; each gets N(0, σ_b²);

    both from the model's own ``count`` generator. Scaled by their noise the pair has L2 sensitivity
    (σ_s⁻² + σ_b⁻²)^(1/2), and with the step's clipped gradient sum (sensitivity max_k C_k, noise σ_g · max_k C_k)
    one Gaussian mechanism per step with σ_eff = (σ_g⁻² + σ_s⁻² + σ_b⁻²)^(-1/2), which the accountant is charged
    (:func:`~fairdp_core.engine.accounting.combine_sigmas`). From the release alone (post-processing):
    ḡ_k = S̃_k / max(ñ_k, floor), ḡ = Σ_k S̃_k / max(Σ_k ñ_k, floor), and the bounds of the NEXT step. The paper's
    code sets a step's bounds from the same step's batch; taking them from the previous release keeps each step's
    gradient sensitivity fixed before its batch is drawn (the timing of the quantile rule and of Andrew et al.).
    Initial bounds: C0 for every group. ``s`` (``ratio_cap``), C0, σ_s, σ_b, C_min and the floor are public.
    """

    group_sums = "after"

    def __init__(self, M: int, K: int, sigma: float, *, clip: float, ratio_cap: float, sigma_s: float,
                 sigma_b: float, c_min: float, generators: list[torch.Generator | None], floor: float | None = None,
                 device: torch.device | str = "cpu") -> None:
        super().__init__(M, K, sigma, device=device)
        if clip <= 0 or ratio_cap <= 0 or c_min <= 0:
            raise ValueError(f"clip, ratio_cap and c_min must be positive, got {clip}, {ratio_cap}, {c_min}")
        if sigma_s <= 0 or sigma_b <= 0:
            raise ValueError("the paper rule needs σ_s > 0 and σ_b > 0: its group statistics must be noised")
        if len(generators) != M:
            raise ValueError(f"need one count generator per model: got {len(generators)} for M = {M}")
        self.c0, self.s, self.sigma_s, self.sigma_b, self.c_min = float(clip), float(ratio_cap), sigma_s, sigma_b, c_min
        self.floor = float(sigma_b if floor is None else floor)
        self.gens = generators
        self._b = torch.full((M, K), self.c0, device=self.device)
        self.released_counts = torch.zeros(M, K, device=self.device)

    def bounds(self) -> torch.Tensor:
        return self._b

    def sum_factors(self, norms: torch.Tensor) -> torch.Tensor:
        """The statistics use gradients clipped at C0, whatever the group bounds: their sensitivity is C0."""
        return torch.clamp(self.c0 / (norms + 1e-6), max=1.0)

    def _noise(self, shape: tuple[int, ...]) -> torch.Tensor:
        return torch.stack([torch.randn(*shape, generator=g, device=g.device) for g in self.gens]).to(self.device)

    def release(self, sums: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The noised (sums [M, K, P], counts [M, K]): N(0, (σ_s·C0)²) and N(0, σ_b²) per entry, sums first."""
        M, K, P = sums.shape
        return sums + self._noise((K, P)) * (self.sigma_s * self.c0), counts + self._noise((K,)) * self.sigma_b

    def observe_sums(self, sums: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> None:
        counts = torch.zeros(sums.shape[:2], device=sums.device).scatter_add_(1, groups, weights)
        noisy_sums, self.released_counts = self.release(sums, counts)
        self._b = self.bounds_from_release(noisy_sums, self.released_counts)

    def bounds_from_release(self, noisy_sums: torch.Tensor, noisy_counts: torch.Tensor) -> torch.Tensor:
        """[M, K] bounds from the released sums [M, K, P] and counts [M, K] only."""
        g_k = _group_means(noisy_sums, noisy_counts, self.floor)
        g = noisy_sums.sum(1) / torch.clamp(noisy_counts.sum(1), min=self.floor).unsqueeze(-1)
        ratio = g.norm(dim=-1, keepdim=True) / torch.clamp(g_k.norm(dim=-1), min=1e-12)
        return torch.clamp(self.c0 * torch.clamp(ratio, max=self.s), min=self.c_min)

    def state(self) -> dict[str, torch.Tensor]:
        return {"bounds": self.bounds().clone(), "released_counts": self.released_counts.clone()}


class GroupMeanRatioClipCode(ClipPolicy):
    """DP-SGD-S as the paper's public code has it, NOT private: before each step's clipping, ḡ_k is the mean of
    group k's UNCLIPPED per-sample gradients in the batch, nothing is noised, and the "overall mean" is the mean of
    the last group present in the batch (the loop variable left over), so C_k = max(C_min, C0 · min(s,
    ‖ḡ_last‖ / ‖ḡ_k‖)): the last group's bound stays C0 and, for two groups, only group 0's moves. A group absent
    from the batch keeps its previous bound. Its ε is not guaranteed."""

    guaranteed = False
    group_sums = "before"

    def __init__(self, M: int, K: int, sigma: float, *, clip: float, ratio_cap: float, c_min: float,
                 device: torch.device | str = "cpu") -> None:
        super().__init__(M, K, sigma, device=device)
        self.c0, self.s, self.c_min = float(clip), float(ratio_cap), c_min
        self._b = torch.full((M, K), self.c0, device=self.device)

    def bounds(self) -> torch.Tensor:
        return self._b

    def sum_factors(self, norms: torch.Tensor) -> torch.Tensor:
        return torch.ones_like(norms)

    def observe_sums(self, sums: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> None:
        M, K, _ = sums.shape
        counts = torch.zeros(M, K, device=sums.device).scatter_add_(1, groups, weights)
        present = counts > 0
        norm_k = _group_means(sums, counts, 1.0).norm(dim=-1)  # [M, K]
        last = (present * torch.arange(1, K + 1, device=sums.device)).argmax(1)  # the highest group present
        ratio = norm_k.gather(1, last[:, None]) / torch.clamp(norm_k, min=1e-12)
        new = torch.clamp(self.c0 * torch.clamp(ratio, max=self.s), min=self.c_min)
        self._b = torch.where(present, new, self._b)
