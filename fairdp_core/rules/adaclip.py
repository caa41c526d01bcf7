"""AdaClip (Andrew et al. 2021; Opacus's AdaClipDPOptimizer), a rival: one bound C for every group, tracking the
γ-quantile of the norms from a noised centred count of sensitivity ½ (noise multiplier 2σ_b). Settings:
``train.adaclip``; the initial C is ``train.clip``. Stored in the TrainSpec as ``gamma``, ``eta_q``, ``sigma_b``,
``c_min`` and ``q_max`` (C's public cap)."""

from __future__ import annotations

from .base import CountRule


class AdaClipRule(CountRule):
    name = "adaclip"
    order = 80
    label = "AdaClip"
    color = "#000000"
    config = "adaclip"
    make_private = "make_private_adaclip"
    count_sensitivity = 0.5  # the centred count (Andrew et al., Theorem 1): noise multiplier 2σ_b

    def plan_fields(self, train, run, override):
        ac = train.adaclip
        return {"gamma": ac.gamma, "eta_q": ac.eta, "sigma_b": ac.sigma_b, "c_min": ac.c_min, "q_max": ac.c_max}

    def policy(self, spec, M, K, sig, gens, device):
        from ..engine.policies import AdaClip

        return AdaClip(M, K, sig.g, clip=spec.clip, sigma_b=sig.b, gamma=spec.gamma, eta=spec.eta_q,
                       c_min=spec.c_min, c_max=spec.q_max, batch_size=spec.batch_size,
                       generators=[g["count"] for g in gens], device=device)

    def public_assumptions(self, spec):
        return ("the constants C_init, γ, η, σ_b (the centred count's std; noise multiplier 2σ_b), C_min and C_max, "
                "and the expected batch size B (never the realised one)",)


RULE = AdaClipRule()
