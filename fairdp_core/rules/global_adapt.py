"""DPSGD-Global-Adapt (Esipova et al. 2023), a rival: gradients below Z scaled by C/Z, above clipped to C; Z tracks
a quantile of the norms from one noised count of sensitivity 1 (:class:`~fairdp_core.engine.policies.
GlobalAdaptClip`). Settings: ``train.global_adapt``; C is ``train.clip``. Stored in the TrainSpec as ``q_init``
(Z's initial value), ``tau`` (the threshold), ``gamma`` and ``eta_q`` (Z's update), ``sigma_b``."""

from __future__ import annotations

from .base import CountRule


class GlobalAdapt(CountRule):
    name = "global_adapt"
    order = 70
    label = "DPSGD-Global-Adapt"
    color = "#56B4E9"
    config = "global_adapt"
    make_private = "make_private_global_adapt"

    def plan_fields(self, train, run, override):
        ga = train.global_adapt
        return {"q_init": ga.z_init, "tau": ga.threshold, "gamma": ga.gamma, "eta_q": ga.eta, "sigma_b": ga.sigma_b}

    def policy(self, spec, M, K, sig, gens, device):
        from ..engine.policies import GlobalAdaptClip

        if not isinstance(spec.q_init, (int, float)):
            raise ValueError("global_adapt takes one q_init (Z's initial value)")
        return GlobalAdaptClip(M, K, sig.g, clip=spec.clip, z_init=spec.q_init, threshold=spec.tau,
                               sigma_b=sig.b, gamma=spec.gamma, eta=spec.eta_q, batch_size=spec.batch_size,
                               generators=[g["count"] for g in gens], device=device)

    def public_assumptions(self, spec):
        return ("the constants C, Z_init, τ, γ, η and σ_b, and the expected batch size B (never the realised one)",)


RULE = GlobalAdapt()
