"""Clipping policies: the one seam in which SGD, DP-SGD and the DP-SGD-S variants differ.

A policy holds per-model, per-group clipping bounds ``[M, K]`` and, after each step, updates them from that
step's per-sample norms. The trainer calls, every step:

    policy.before_step(norms, groups, weights)                   # DPSGD-F: this batch's noised counts set its bounds
    factors = policy.factors(norms, groups, policy.bounds())     # default clip_factors (pure, tested directly)
    noise std per model = policy.noise_std()                     # σ_g · max_k C_k (over ALL groups)
    policy.update(norms, groups, weights)                        # after the step; DP-SGD-S releases noised counts

``bounds()`` is always the per-group L2 sensitivity bound: every factor keeps ‖factor · g_i‖ ≤ C_{g_i}, also for a
policy with its own ``factors`` (DPSGD-Global-Adapt's strict scaling, whose bound is C for every group).

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
    "AdaClip",
    "ClipPolicy",
    "DPSGDFClip",
    "FixedClip",
    "GlobalAdaptClip",
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

    def before_step(self, norms: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> None:
        """Called before the step's clipping (DPSGD-F releases this batch's noised counts and sets its bounds)."""
        return None

    def factors(self, norms: torch.Tensor, groups: torch.Tensor, bounds: torch.Tensor | None = None) -> torch.Tensor:
        """[M, W] per-sample scale factors, each keeping ‖factor · g_i‖ ≤ C_{g_i}: min(1, C/‖g‖) by default."""
        return clip_factors(norms, groups, self.bounds() if bounds is None else bounds)

    def update(self, norms: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> None:
        return None

    def state(self) -> dict[str, torch.Tensor]:
        return {"bounds": self.bounds().clone()}


def _model_noise(gens: list[torch.Generator | None], shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """[M, *shape] standard normal draws, model m's from its own generator ``gens[m]``, drawn on its device."""
    if any(g is None for g in gens):
        raise RuntimeError("this policy was built without count generators: its caller noises the counts")
    return torch.stack([torch.randn(*shape, generator=g, device=g.device) for g in gens]).to(device)


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
    """DP-SGD-S with the paper code's rule, DP-correct (docs/study.md, 'DP-SGD-S, the paper's rule'): C_k = max(C_min,
    C0 · min(s, ‖ḡ‖ / ‖ḡ_k‖)).

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


class DPSGDFClip(ClipPolicy):
    """DPSGD-F (Xu, Du, Wu, KDD 2021, "Removing disparate impact of differentially private stochastic gradient
    descent on model accuracy", arXiv 2003.03699, Algorithm 1): group bounds scaled by each group's noisy share of
    gradients above the base bound C0, set from the batch they clip.

    Before each step's clipping, for each model, it releases the 2K count vector (m_0..m_{K-1}, o_0..o_{K-1}) of
    that step's Poisson batch: the samples of group k with ‖g_i‖ > C0 (m_k) and with ‖g_i‖ ≤ C0 (o_k). Each sample
    is in one cell, so the vector's L2 sensitivity under add/remove is 1; every cell gets N(0, σ_b²) from the
    model's own ``count`` generator. From the release alone (post-processing), for ALL K groups:

        m̃_k = max(trunc(m_k + z_k), 0),  õ_k = max(trunc(o_k + z'_k), 0),  b̃_k = m̃_k + õ_k,
        a_k = m̃_k / b̃_k  (a_k = 1 where b̃_k = 0),      C_k = C0 · (1 + a_k / (mean_j a_j + 1e-8)),

    so C_k ∈ [C0, (K + 1)·C0]: the group with the larger share of clipped gradients gets the larger bound. The
    formula and the post-processing of the noised counts are those of the reference implementation the rivals'
    paper ran (Esipova et al. 2023: layer6ai-labs/fair-dp, trainers/trainer.py,
    ``DpsgdFTrainer.compute_clipping_bound_per_sample``; σ_b = 10 in its configs); this step's bounds clip this
    step's batch, as in Algorithm 1.

    DP-correct where the reference code is not: the gradient noise is σ_g · max over ALL K groups of C_k (the
    reference takes the max over the bounds of the samples in the batch, so the noise scale reveals which groups
    are present). Accounting: the counts are released first; given them the bounds are public and the clipped
    gradient sum (sensitivity max_k C_k, noise σ_g · max_k C_k) is a Gaussian mechanism of multiplier σ_g whatever
    the counts. The step is charged as ONE subsampled Gaussian of multiplier σ_eff = (σ_g⁻² + σ_b⁻²)^(-1/2). Why
    that holds although the second release adapts to the first on the same Poisson batch: for a fixed batch, with
    one record added, the privacy-loss likelihood ratio is L = L1(ỹ)·L2(ỹ, W), where L1 (the counts) is log-normal
    with log-variance ≤ σ_b⁻² and, given the counts ỹ, L2 (the gradient, scaled by its public noise) is log-normal
    with log-variance ≤ σ_g⁻², independent of ỹ under the null. Rényi and hockey-stick divergences are E[f(L)] for
    convex f, and mean-one log-normals grow in convex order with their variance, so E[f(L)] is at most its value
    for N(0, 1) against N(μ, 1) with μ² = σ_b⁻² + σ_g⁻²; this passes to the Poisson mixture over the rest of the
    batch, so the subsampled-Gaussian accountant at σ_eff and q bounds the step (the same pairing as Andrew et al.
    2021, Theorem 1, there across steps). (The reference charges the counts and the gradient as two separately
    composed mechanisms: valid, looser.) ``bounds()`` before the first step: 2·C0
    (every a_k equal), never used to clip.
    """

    def __init__(self, M: int, K: int, sigma: float, *, clip: float, sigma_b: float,
                 generators: list[torch.Generator | None], device: torch.device | str = "cpu") -> None:
        super().__init__(M, K, sigma, device=device)
        if clip <= 0:
            raise ValueError(f"DPSGD-F needs a positive base bound C0, got {clip}")
        if sigma_b <= 0:
            raise ValueError("DPSGD-F needs σ_b > 0: its counts must be noised")
        if len(generators) != M:
            raise ValueError(f"need one count generator per model: got {len(generators)} for M = {M}")
        self.c0, self.sigma_b, self.gens = float(clip), float(sigma_b), generators
        self._b = torch.full((M, K), 2.0 * self.c0, device=self.device)
        self.released = torch.zeros(M, 2 * K, device=self.device)  # the last step's noised counts (public)

    def bounds(self) -> torch.Tensor:
        return self._b

    def counts(self, norms: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """[M, 2K]: exact (m_0..m_{K-1}, o_0..o_{K-1}), samples above / at most C0 per group, before noise."""
        below = (norms <= self.c0).to(groups.dtype)
        cell = groups + self.K * below  # m_k -> k, o_k -> K + k
        return torch.zeros(self.M, 2 * self.K, device=norms.device).scatter_add_(1, cell, weights)

    def count_noise(self) -> torch.Tensor:
        """[M, 2K] N(0, σ_b²), each model's row from its own generator."""
        return _model_noise(self.gens, (2 * self.K,), self.device) * self.sigma_b

    def before_step(self, norms: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> None:
        self.released = self.counts(norms, groups, weights) + self.count_noise()
        self._b = self.bounds_from_release(self.released)

    def bounds_from_release(self, released: torch.Tensor) -> torch.Tensor:
        """[M, K] bounds from the released (noised) counts [M, 2K] only: post-processing."""
        m = torch.clamp(torch.trunc(released[:, : self.K]), min=0.0)
        o = torch.clamp(torch.trunc(released[:, self.K:]), min=0.0)
        b = m + o
        a = torch.where(b > 0, m / torch.clamp(b, min=1.0), torch.ones_like(m))
        return self.c0 * (1.0 + a / (a.mean(dim=1, keepdim=True) + 1e-8))

    def state(self) -> dict[str, torch.Tensor]:
        return {"bounds": self.bounds().clone(), "released_counts": self.released.clone()}


class _GlobalQuantile(ClipPolicy):
    """A bound-like quantity T [M] (one per model) tracked privately with Andrew et al.'s geometric update from one
    noised count per step, divided by the public expected batch size B; the count's noise is drawn from each
    model's own ``count`` generator. Subclasses say what is counted and what T is."""

    def __init__(self, M: int, K: int, sigma: float, *, init: float, sigma_b: float, gamma: float, eta: float,
                 batch_size: int, generators: list[torch.Generator | None],
                 device: torch.device | str = "cpu") -> None:
        super().__init__(M, K, sigma, device=device)
        if sigma_b <= 0:
            raise ValueError(f"{type(self).__name__} needs σ_b > 0: its count must be noised")
        if len(generators) != M:
            raise ValueError(f"need one count generator per model: got {len(generators)} for M = {M}")
        if init <= 0 or batch_size <= 0:
            raise ValueError(f"the initial value and the batch size must be positive, got {init}, {batch_size}")
        self.sigma_b, self.gamma, self.eta, self.B, self.gens = float(sigma_b), gamma, eta, float(batch_size), generators
        self.T = torch.full((M,), float(init), device=self.device)
        self.released = torch.zeros(M, device=self.device)  # the last step's noised count (public)

    def count_noise(self) -> torch.Tensor:
        """[M] N(0, σ_b²), each model's draw from its own generator."""
        return _model_noise(self.gens, (1,), self.device)[:, 0] * self.sigma_b

    def counts(self, norms: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def update(self, norms: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> None:
        self.released = self.counts(norms, groups, weights) + self.count_noise()
        self.T = self.update_from_release(self.T, self.released)

    def update_from_release(self, T: torch.Tensor, released: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class GlobalAdaptClip(_GlobalQuantile):
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


class AdaClip(_GlobalQuantile):
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
