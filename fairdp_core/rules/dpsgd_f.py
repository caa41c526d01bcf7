"""DPSGD-F (Xu et al. 2021), a rival: C_k = C0·(1 + a_k / mean_j a_j), a_k group k's share of the batch's gradients
above C0, from 2K noised counts of sensitivity 1 (:class:`DPSGDFClip`). Settings:
``train.dpsgd_f``; C0 is ``train.clip``."""

from __future__ import annotations

import torch

from ..schema import Positive, Strict
from .base import CountRule
from .policy import ClipPolicy, model_noise


class Settings(Strict):
    """DPSGD-F (Xu et al. 2021), a rival: C_k = C0·(1 + a_k / mean_j a_j), a_k group k's share of the batch's
    gradients above C0 in the noised 2K counts, C0 = ``train.clip`` (or its override). ``sigma_b``: the counts'
    noise (10, the reference code's σ1)."""

    sigma_b: Positive = 10.0


class DPSGDF(CountRule):
    name = "dpsgd_f"
    order = 60
    label = "DPSGD-F"
    color = "#E69F00"
    config = "dpsgd_f"
    settings = Settings
    fields = ("sigma_b",)
    make_private = "make_private_dpsgd_f"
    rival = True

    def own_fields(self, train, run, override):
        return {"sigma_b": self.settings_of(train).sigma_b}

    def policy(self, spec, M, K, sig, gens, device):
        return DPSGDFClip(M, K, sig.g, clip=spec.clip, sigma_b=sig.b, generators=[g["count"] for g in gens],
                          device=device)

    def public_assumptions(self, spec):
        return ("the constants C0 and σ_b (no per-group size n_k)",)


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
        return model_noise(self.gens, (2 * self.K,), self.device) * self.sigma_b

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

RULE = DPSGDF()
