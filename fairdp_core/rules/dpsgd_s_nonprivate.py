"""DP-SGD-S as first described: per-group bounds from an EMA of each group's batch percentile, computed from the
raw norms (:class:`~fairdp_core.engine.policies.GroupEMAPercentileClip`). The gradient is noised, the statistics
are not: its ε is not guaranteed. Settings: ``train.dpsgd_s_nonprivate``, and τ, γ, C_min, Q_init of
``train.dpsgd_s``."""

from __future__ import annotations

from .base import Rule
from .dpsgd_s import quantile_fields


class DPSGDSNonprivate(Rule):
    name = "dpsgd_s_nonprivate"
    order = 50
    label = "DP-SGD-S (non-private stats)"
    color = "#8C564B"
    guaranteed = False
    uses_clip = False
    config = "dpsgd_s_nonprivate"

    def plan_fields(self, train, run, override):
        ns = train.dpsgd_s_nonprivate
        return {**quantile_fields(train, run, override), "ema_momentum": ns.ema_momentum,
                "percentile": ns.percentile}

    def policy(self, spec, M, K, sig, gens, device):
        from ..engine.policies import GroupEMAPercentileClip

        if not isinstance(spec.q_init, (int, float)):
            raise ValueError("dpsgd_s_nonprivate takes one q_init for every group")
        return GroupEMAPercentileClip(M, K, sig.g, tau=spec.tau, c_min=spec.c_min, init=spec.q_init,
                                      momentum=spec.ema_momentum, percentile=spec.percentile, device=device)


RULE = DPSGDSNonprivate()
