"""Clipping policies: the one seam in which SGD, DP-SGD and the DP-SGD-S variants differ.

A policy holds per-model, per-group clipping bounds ``[M, K]`` and, after each step, updates them from that
step's per-sample norms. The trainer calls, every step:

    policy.before_step(norms, groups, weights)                   # DPSGD-F: this batch's noised counts set its bounds
    factors = policy.factors(norms, groups, policy.bounds())     # default clip_factors (pure, tested directly)
    noise std per model = policy.noise_std()                     # σ_g · max_k C_k (over ALL groups)
    policy.update(norms, groups, weights)                        # after the step; DP-SGD-S releases noised counts

``bounds()`` is always the per-group L2 sensitivity bound: every factor keeps ‖factor · g_i‖ ≤ C_{g_i}, also for a
policy with its own ``factors`` (DPSGD-Global-Adapt's strict scaling, whose bound is C for every group).

The paper code's rule (:class:`~fairdp_core.rules.dpsgd_s_paper.GroupMeanRatioClip`,
:class:`~fairdp_core.rules.dpsgd_s_paper_code.GroupMeanRatioClipCode`) also needs the per-group sums
of per-sample gradients: a policy whose ``group_sums`` is "after" (or "before") gets them through
``observe_sums(sums [M, K, P], groups, weights)`` after the step (or before its clipping), weighted by
``sum_factors(norms)``. Where the backend says so (``Backend.reads_gram``: the dense backend with more than two
groups) the policy gets instead ``observe_gram(gram [M, K, K], groups, weights, dim=P)``, the Gram matrix of those
sums: the rules read the sums only through norms, and :func:`noised_gram` draws the Gram matrix of the noised sums
exactly from it.

Shapes: ``norms`` [M, W] per-sample gradient norms; ``groups`` [M, W] int64 in 0..K-1; ``weights`` [M, W] in
{0, 1} (0 marks batch padding).
"""

from __future__ import annotations

import math

import torch

__all__ = ["ClipPolicy", "FixedClip", "GlobalQuantile", "GroupFixedClip", "NoClip", "clip_factors", "group_means",
           "model_noise", "noised_gram", "quantile_update"]


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

    def group_counts(self, groups: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """[M, K]: each model's batch size per group (``weights`` 0 marks batch padding)."""
        return torch.zeros(self.M, self.K, device=weights.device).scatter_add_(1, groups, weights)

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


def model_noise(gens: list[torch.Generator | None], shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """[M, *shape] standard normal draws, model m's from its own generator ``gens[m]``, drawn on its device."""
    if any(g is None for g in gens):
        raise RuntimeError("this policy was built without count generators: its caller noises the counts")
    return torch.stack([torch.randn(*shape, generator=g, device=g.device) for g in gens]).to(device)


def noised_gram(gram: torch.Tensor, dim: int, scale: float, generator: torch.Generator | None) -> torch.Tensor:
    """The Gram matrix [K, K] (float64) of S + scale·Z, with Z a [dim, K] matrix of independent N(0, 1) draws, drawn
    EXACTLY in law from S's Gram matrix ``gram`` = SᵀS alone, with K² + K(K+1)/2 draws instead of dim·K.

    Write S = Q R with Q [dim, K] orthonormal columns and R = (SᵀS)^½ (any R with RᵀR = SᵀS will do; the symmetric
    root does not depend on the eigenvectors' signs). Z = Q Z₁ + Z⊥ with Z₁ = QᵀZ [K, K] of independent N(0, 1)
    draws and Z⊥ = (I − QQᵀ) Z independent of it (Z's law is invariant under rotation), so
    (S + scale·Z)ᵀ(S + scale·Z) = (R + scale·Z₁)ᵀ(R + scale·Z₁) + scale²·Z⊥ᵀZ⊥, the cross terms vanishing as
    QᵀZ⊥ = 0, and Z⊥ᵀZ⊥ ~ Wishart_K(dim − K, I). The Wishart matrix is drawn by Bartlett's decomposition
    (L lower-triangular, L_ii² ~ χ²(dim − K − i) for i = 0..K−1, L_ij ~ N(0, 1) below the diagonal, W = LLᵀ),
    or from dim − K Gaussian rows where dim − K < K. Draw order from ``generator``: Z₁, then the off-diagonal
    normals, then the χ² draws (or the rows)."""
    K = gram.shape[-1]
    if gram.shape != (K, K) or dim < K:
        raise ValueError(f"need a [K, K] Gram matrix of K ≤ dim vectors: got {tuple(gram.shape)} with dim = {dim}")
    dev = generator.device if generator is not None else gram.device
    lam, V = torch.linalg.eigh(gram.to(dev, torch.float64))
    R = (V * lam.clamp(min=0).sqrt()) @ V.T
    A = R + scale * torch.randn(K, K, generator=generator, dtype=torch.float64, device=dev)
    n = dim - K
    if n >= K:
        L = torch.zeros(K, K, dtype=torch.float64, device=dev)
        rows, cols = torch.tril_indices(K, K, -1, device=dev)
        L[rows, cols] = torch.randn(len(rows), generator=generator, dtype=torch.float64, device=dev)
        df = n - torch.arange(K, dtype=torch.float64, device=dev)
        L[range(K), range(K)] = (2.0 * torch._standard_gamma(df / 2.0, generator=generator)).sqrt()
        wishart = L @ L.T
    else:
        rest = torch.randn(n, K, generator=generator, dtype=torch.float64, device=dev)
        wishart = rest.T @ rest
    return A.T @ A + scale ** 2 * wishart


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


class GroupFixedClip(ClipPolicy):
    """Fixed bounds, one per group, the same for every model and every step (set before training from public
    constants): the noise is σ · max_k C_k, the sensitivity of the clipped sum."""

    def __init__(self, M: int, K: int, sigma: float, *, bounds: list[float],
                 device: torch.device | str = "cpu") -> None:
        super().__init__(M, K, sigma, device=device)
        if len(bounds) != K or min(bounds) <= 0:
            raise ValueError(f"need {K} positive bounds, one per group; got {bounds}")
        self._b = torch.tensor([float(b) for b in bounds], device=self.device).expand(M, K).contiguous()

    def bounds(self) -> torch.Tensor:
        return self._b


def group_means(sums: torch.Tensor, counts: torch.Tensor, floor: float) -> torch.Tensor:
    """[M, K, P] / max([M, K], floor): per-group mean vectors."""
    return sums / torch.clamp(counts, min=floor).unsqueeze(-1)


class GlobalQuantile(ClipPolicy):
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
        return model_noise(self.gens, (1,), self.device)[:, 0] * self.sigma_b

    def counts(self, norms: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def update(self, norms: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor) -> None:
        self.released = self.counts(norms, groups, weights) + self.count_noise()
        self.T = self.update_from_release(self.T, self.released)

    def update_from_release(self, T: torch.Tensor, released: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
