"""DP-SGD-S with the paper code's rule made DP: C_k = max(C_min, C0 · min(s, ‖ḡ‖ / ‖ḡ_k‖)) from noised per-group
gradient sums and counts (:class:`GroupMeanRatioClip`). The arm that decides the
paper's claim. Settings: ``train.dpsgd_s_paper``; C0 is ``train.clip``."""

from __future__ import annotations

import math

import torch

from ..schema import Positive, Strict
from .base import Rule, Sigmas, default_sigma_b, split_sigma
from .policy import ClipPolicy, group_means, noised_gram


class Settings(Strict):
    """DP-SGD-S with the paper code's rule, C_k = max(C_min, C0 · min(s, ‖ḡ‖/‖ḡ_k‖)) with C0 = ``train.clip``
    (or its override): cap ``ratio_cap`` (s); noise multiplier of the released per-group gradient sums
    ``sigma_s`` (None: √10·σ_eff) and of the group counts ``sigma_b`` (None: B/20); public count floor (None: σ_b).
    ``dpsgd_s_paper_code`` (the code as it is, not guaranteed) uses ``ratio_cap`` and ``c_min`` only."""

    ratio_cap: Positive = 2.0
    sigma_s: Positive | None = None
    sigma_b: Positive | None = None
    c_min: Positive = 0.01
    count_floor: Positive | None = None


class DPSGDSPaper(Rule):
    name = "dpsgd_s_paper"
    order = 30
    label = "DP-SGD-S (paper rule)"
    color = "#009E73"
    numerics = 2  # since the per-group sums are one pass over the batch (engine/backends.py, group_sums)
    numerics_gram = 5  # the dense backend with K > 2: the release drawn from the sums' Gram matrix (noised_gram)
    # (4: the first layer's input pairs gathered from a cache of the training inputs, DenseBackend.cache_inputs;
    # 5: the Gram matrix's float64 products through numpy's BLAS, engine/backends.py _f64_bmm)
    config = "dpsgd_s_paper"
    settings = Settings
    make_private = "make_private_dpsgd_s_paper"
    fields = ("ratio_cap", "sigma_s", "sigma_b", "c_min", "count_floor")

    def own_fields(self, train, run, override):
        pr = self.settings_of(train)
        return {"ratio_cap": pr.ratio_cap, "sigma_s": pr.sigma_s, "sigma_b": pr.sigma_b, "c_min": pr.c_min,
                "count_floor": pr.count_floor}

    def sigmas(self, spec, sigma_eff):
        sigma_b = default_sigma_b(spec)
        # None: √10·σ_eff, a public function of public quantities (the sums take a tenth of the σ⁻² budget)
        sigma_s = spec.sigma_s if spec.sigma_s is not None else math.sqrt(10.0) * sigma_eff
        return Sigmas(split_sigma(sigma_eff, sigma_s, sigma_b), sigma_b, sigma_s, sigma_eff)

    def policy(self, spec, M, K, sig, gens, device):
        return GroupMeanRatioClip(M, K, sig.g, clip=spec.clip, ratio_cap=spec.ratio_cap, sigma_s=sig.s,
                                  sigma_b=sig.b, c_min=spec.c_min, floor=spec.count_floor,
                                  generators=[g["count"] for g in gens], device=device)

    def public_assumptions(self, spec):
        return ("the constants C0, s, σ_s, σ_b, C_min and the count floor (no per-group size n_k)",)


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
        counts = self.group_counts(groups, weights)
        noisy_sums, self.released_counts = self.release(sums, counts)
        self._b = self.bounds_from_release(noisy_sums, self.released_counts)

    def observe_gram(self, gram: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor, *, dim: int) -> None:
        """The same release and bounds from the Gram matrix [M, K, K] of the sums (of ``dim`` coordinates): the
        bounds read the noised sums only through the norms of the group means and of their total, that is through
        the Gram matrix of the noised sums, whose exact law :func:`noised_gram` draws from the sums' own."""
        counts = self.group_counts(groups, weights)
        noisy = torch.stack([noised_gram(gram[m], dim, self.sigma_s * self.c0, g) for m, g in enumerate(self.gens)])
        self.released_counts = counts + self._noise((self.K,)) * self.sigma_b
        self._b = self.bounds_from_gram(noisy.to(self.device), self.released_counts)

    def bounds_from_release(self, noisy_sums: torch.Tensor, noisy_counts: torch.Tensor) -> torch.Tensor:
        """[M, K] bounds from the released sums [M, K, P] and counts [M, K] only."""
        g_k = group_means(noisy_sums, noisy_counts, self.floor)
        g = noisy_sums.sum(1) / torch.clamp(noisy_counts.sum(1), min=self.floor).unsqueeze(-1)
        return self._bounds(g.norm(dim=-1, keepdim=True), g_k.norm(dim=-1))

    def bounds_from_gram(self, noisy_gram: torch.Tensor, noisy_counts: torch.Tensor) -> torch.Tensor:
        """[M, K] bounds from the Gram matrix [M, K, K] of the released sums and the released counts [M, K]:
        ‖ḡ_k‖ = √G̃_kk / max(ñ_k, floor), ‖ḡ‖ = √(Σ_kl G̃_kl) / max(Σ_k ñ_k, floor)."""
        counts = noisy_counts.to(noisy_gram.dtype)
        g_k = noisy_gram.diagonal(dim1=1, dim2=2).clamp(min=0).sqrt() / torch.clamp(counts, min=self.floor)
        g = noisy_gram.sum((1, 2)).clamp(min=0).sqrt() / torch.clamp(counts.sum(1), min=self.floor)
        return self._bounds(g.unsqueeze(-1), g_k).to(self._b.dtype)

    def _bounds(self, norm: torch.Tensor, norm_k: torch.Tensor) -> torch.Tensor:
        """C_k = max(C_min, C0 · min(s, ‖ḡ‖ / ‖ḡ_k‖)) from ‖ḡ‖ [M, 1] and ‖ḡ_k‖ [M, K]."""
        ratio = norm / torch.clamp(norm_k, min=1e-12)
        return torch.clamp(self.c0 * torch.clamp(ratio, max=self.s), min=self.c_min)

    def state(self) -> dict[str, torch.Tensor]:
        return {"bounds": self.bounds().clone(), "released_counts": self.released_counts.clone()}

RULE = DPSGDSPaper()
