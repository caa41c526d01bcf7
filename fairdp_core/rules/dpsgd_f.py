"""DPSGD-F (Xu et al. 2021), a rival: C_k = C0·(1 + a_k / mean_j a_j), a_k group k's share of the batch's gradients
above C0, from 2K noised counts of sensitivity 1 (:class:`~fairdp_core.engine.policies.DPSGDFClip`). Settings:
``train.dpsgd_f``; C0 is ``train.clip``."""

from __future__ import annotations

from .base import CountRule


class DPSGDF(CountRule):
    name = "dpsgd_f"
    order = 60
    label = "DPSGD-F"
    color = "#E69F00"
    config = "dpsgd_f"
    make_private = "make_private_dpsgd_f"

    def plan_fields(self, train, run, override):
        return {"sigma_b": train.dpsgd_f.sigma_b}

    def policy(self, spec, M, K, sig, gens, device):
        from ..engine.policies import DPSGDFClip

        return DPSGDFClip(M, K, sig.g, clip=spec.clip, sigma_b=sig.b, generators=[g["count"] for g in gens],
                          device=device)

    def public_assumptions(self, spec):
        return ("the constants C0 and σ_b (no per-group size n_k)",)


RULE = DPSGDF()
