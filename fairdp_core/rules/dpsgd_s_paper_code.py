"""The paper's released code as it is: the paper rule's bounds from exact (unclipped, un-noised) group statistics
(:class:`~fairdp_core.engine.policies.GroupMeanRatioClipCode`). Not DP: its ε is not guaranteed. It reads the
paper rule's settings (``train.dpsgd_s_paper``: s and C_min)."""

from __future__ import annotations

from .base import Rule


class DPSGDSPaperCode(Rule):
    name = "dpsgd_s_paper_code"
    order = 40
    label = "DP-SGD-S (paper code, not guaranteed)"
    color = "#CC79A7"
    guaranteed = False
    config = "dpsgd_s_paper"

    def plan_fields(self, train, run, override):
        pr = train.dpsgd_s_paper
        return {"ratio_cap": pr.ratio_cap, "c_min": pr.c_min}

    def policy(self, spec, M, K, sig, gens, device):
        from ..engine.policies import GroupMeanRatioClipCode

        return GroupMeanRatioClipCode(M, K, sig.g, clip=spec.clip, ratio_cap=spec.ratio_cap, c_min=spec.c_min,
                                      device=device)


RULE = DPSGDSPaperCode()
