"""The paper's released code as it is: the paper rule's bounds from exact (unclipped, un-noised) group statistics
(:class:`GroupMeanRatioClipCode`). Not DP: its ε is not guaranteed. It reads the
paper rule's settings (``train.dpsgd_s_paper``: s and C_min)."""

from __future__ import annotations

import torch

from .base import Rule
from .dpsgd_s_paper import Settings
from .policy import ClipPolicy, group_means


class DPSGDSPaperCode(Rule):
    name = "dpsgd_s_paper_code"
    order = 40
    label = "DP-SGD-S (paper code, not guaranteed)"
    color = "#CC79A7"
    numerics = 2  # since the per-group sums are one pass over the batch (engine/backends.py, group_sums)
    numerics_gram = 5  # the dense backend with K > 2: the sums' norms from their Gram matrix (as dpsgd_s_paper's)
    # (4: the first layer's input pairs gathered from a cache of the training inputs, DenseBackend.cache_inputs)
    guaranteed = False
    config = "dpsgd_s_paper"  # the paper rule's section and schema
    settings = Settings
    fields = ("ratio_cap", "c_min")

    def own_fields(self, train, run, override):
        pr = self.settings_of(train)
        return {"ratio_cap": pr.ratio_cap, "c_min": pr.c_min}

    def policy(self, spec, M, K, sig, gens, device):
        return GroupMeanRatioClipCode(M, K, sig.g, clip=spec.clip, ratio_cap=spec.ratio_cap, c_min=spec.c_min,
                                      device=device)


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
        counts = self.group_counts(groups, weights)
        self._set(group_means(sums, counts, 1.0).norm(dim=-1), counts)

    def observe_gram(self, gram: torch.Tensor, groups: torch.Tensor, weights: torch.Tensor, *, dim: int) -> None:
        """The same bounds from the Gram matrix [M, K, K] of the sums: ‖S_k‖ = √G_kk."""
        counts = self.group_counts(groups, weights)
        norms = gram.diagonal(dim1=1, dim2=2).clamp(min=0).sqrt() / torch.clamp(counts.to(gram.dtype), min=1.0)
        self._set(norms.to(self._b.dtype), counts)

    def _set(self, norm_k: torch.Tensor, counts: torch.Tensor) -> None:
        """The bounds from the groups' mean-gradient norms [M, K]; a group absent from the batch keeps its bound."""
        K = norm_k.shape[1]
        present = counts > 0
        last = (present * torch.arange(1, K + 1, device=counts.device)).argmax(1)  # the highest group present
        ratio = norm_k.gather(1, last[:, None]) / torch.clamp(norm_k, min=1e-12)
        new = torch.clamp(self.c0 * torch.clamp(ratio, max=self.s), min=self.c_min)
        self._b = torch.where(present, new, self._b)

RULE = DPSGDSPaperCode()
