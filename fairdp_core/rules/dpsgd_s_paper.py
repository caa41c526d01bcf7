"""DP-SGD-S with the paper code's rule made DP: C_k = max(C_min, C0 · min(s, ‖ḡ‖ / ‖ḡ_k‖)) from noised per-group
gradient sums and counts (:class:`~fairdp_core.engine.policies.GroupMeanRatioClip`). The arm that decides the
paper's claim. Settings: ``train.dpsgd_s_paper``; C0 is ``train.clip``."""

from __future__ import annotations

import math

from .base import Rule, Sigmas, default_sigma_b


class DPSGDSPaper(Rule):
    name = "dpsgd_s_paper"
    order = 30
    label = "DP-SGD-S (paper rule)"
    color = "#009E73"
    config = "dpsgd_s_paper"

    def plan_fields(self, train, run, override):
        pr = train.dpsgd_s_paper
        return {"ratio_cap": pr.ratio_cap, "sigma_s": pr.sigma_s, "sigma_b": pr.sigma_b, "c_min": pr.c_min,
                "count_floor": pr.count_floor}

    def sigmas(self, spec, sigma_eff):
        from ..engine.accounting import split_sigma

        sigma_b = default_sigma_b(spec)
        # None: √10·σ_eff, a public function of public quantities (the sums take a tenth of the σ⁻² budget)
        sigma_s = spec.sigma_s if spec.sigma_s is not None else math.sqrt(10.0) * sigma_eff
        return Sigmas(split_sigma(sigma_eff, sigma_s, sigma_b), sigma_b, sigma_s, sigma_eff)

    def policy(self, spec, M, K, sig, gens, device):
        from ..engine.policies import GroupMeanRatioClip

        return GroupMeanRatioClip(M, K, sig.g, clip=spec.clip, ratio_cap=spec.ratio_cap, sigma_s=sig.s,
                                  sigma_b=sig.b, c_min=spec.c_min, floor=spec.count_floor,
                                  generators=[g["count"] for g in gens], device=device)

    def public_assumptions(self, spec):
        return ("the constants C0, s, σ_s, σ_b, C_min and the count floor (no per-group size n_k)",)


RULE = DPSGDSPaper()
