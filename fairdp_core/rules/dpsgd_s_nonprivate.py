"""DP-SGD-S as first described: per-group bounds from an EMA of each group's batch percentile, computed from the
raw norms (:class:`GroupEMAPercentileClip`). The gradient is noised, the statistics
are not: its ε is not guaranteed. Settings: ``train.dpsgd_s_nonprivate``, and τ, γ, C_min, Q_init of
``train.dpsgd_s``."""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import Field

from ..schema import Fraction, Strict
from .base import Rule
from .dpsgd_s import quantile_fields
from .policy import ClipPolicy


class Settings(Strict):
    """DP-SGD-S as first described (non-private statistics): EMA momentum and the batch percentile."""

    ema_momentum: Fraction = 0.9
    percentile: Annotated[float, Field(gt=0.0, lt=100.0)] = 75.0


class DPSGDSNonprivate(Rule):
    name = "dpsgd_s_nonprivate"
    order = 50
    label = "DP-SGD-S (non-private stats)"
    color = "#8C564B"
    guaranteed = False
    uses_clip = False
    config = "dpsgd_s_nonprivate"
    settings = Settings
    fields = ("tau", "gamma", "c_min", "q_init", "ema_momentum", "percentile")  # γ stored, not read

    def own_fields(self, train, run, override):
        ns = self.settings_of(train)
        return {**quantile_fields(train, run, override), "ema_momentum": ns.ema_momentum,
                "percentile": ns.percentile}

    def policy(self, spec, M, K, sig, gens, device):
        if not isinstance(spec.q_init, (int, float)):
            raise ValueError("dpsgd_s_nonprivate takes one q_init for every group")
        return GroupEMAPercentileClip(M, K, sig.g, tau=spec.tau, c_min=spec.c_min, init=spec.q_init,
                                      momentum=spec.ema_momentum, percentile=spec.percentile, device=device)


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

RULE = DPSGDSNonprivate()
