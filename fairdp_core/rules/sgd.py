"""SGD: no clipping, no noise; the non-private reference."""

from __future__ import annotations

from .base import Rule, Sigmas


class SGD(Rule):
    name = "sgd"
    order = 0
    label = "SGD"
    color = "#7f7f7f"
    private = False
    uses_clip = False

    def sigmas(self, spec, sigma_eff):
        return Sigmas(0.0, None, None, 0.0)

    def policy(self, spec, M, K, sig, gens, device):
        from .policy import NoClip

        return NoClip(M, K, device=device)


RULE = SGD()
