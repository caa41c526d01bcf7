"""DP-SGD-S, the study's reading of the paper's text: per-group bounds C_k = max(τ·Q_k, C_min), Q_k tracking the
γ-quantile of group k's norms from noised counts alone (:class:`~fairdp_core.engine.policies.GroupQuantileClip`).
Settings: ``train.dpsgd_s`` (τ and γ may also come per run, γ per dataset override)."""

from __future__ import annotations

from .base import Rule, Sigmas, default_sigma_b


def quantile_fields(train, run, override) -> dict[str, object]:
    """τ (the run's, else train.dpsgd_s's), γ (the run's, else the override's, else train.dpsgd_s's), C_min, Q_init:
    the bounds' settings both DP-SGD-S variants share."""
    s = train.dpsgd_s
    gamma = run.gamma if run.gamma is not None else override("gamma", s.gamma)
    return {"tau": run.tau if run.tau is not None else s.tau, "gamma": gamma, "c_min": s.c_min, "q_init": s.q_init}


class DPSGDS(Rule):
    name = "dpsgd_s"
    order = 20
    label = "DP-SGD-S"
    color = "#D55E00"
    uses_clip = False
    config = "dpsgd_s"
    make_private = "make_private_dpsgd_s"

    def plan_fields(self, train, run, override):
        s = train.dpsgd_s
        return {**quantile_fields(train, run, override), "eta_q": s.eta_q, "sigma_b": s.sigma_b, "q_max": s.q_max,
                "count_floor": s.count_floor}

    def sigmas(self, spec, sigma_eff):
        from ..engine.accounting import split_sigma

        sigma_b = default_sigma_b(spec)
        return Sigmas(split_sigma(sigma_eff, sigma_b), sigma_b, None, sigma_eff)

    def policy(self, spec, M, K, sig, gens, device):
        from ..engine.policies import GroupQuantileClip

        return GroupQuantileClip(M, K, sig.g, sigma_b=sig.b, tau=spec.tau, gamma=spec.gamma, eta=spec.eta_q,
                                 c_min=spec.c_min, q_init=spec.q_init, q_max=spec.q_max, floor=spec.count_floor,
                                 generators=[g["count"] for g in gens], device=device)

    def public_assumptions(self, spec):
        return ("the constants τ, γ, η_Q, σ_b, C_min, Q_init, Q_max and the count floor (no per-group size n_k)",)


RULE = DPSGDS()
