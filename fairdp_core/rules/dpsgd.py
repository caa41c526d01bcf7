"""DP-SGD (Abadi et al. 2016): one fixed bound C for every record, the gradient noised at σ·C."""

from __future__ import annotations

from .base import Rule


class DPSGD(Rule):
    name = "dpsgd"
    order = 10
    label = "DP-SGD"
    color = "#0072B2"

    def policy(self, spec, M, K, sig, gens, device):
        from .policy import FixedClip

        return FixedClip(M, K, sig.g, clip=spec.clip, device=device)


RULE = DPSGD()
