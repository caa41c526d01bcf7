"""DP-SGD with a fixed bound per group, C_k = C0 · min(s, √K · π_k), from public group shares π_k: the ablation of
docs/frontier.md that separates "clip one group harder" from adaptivity.

The paper rule made DP (:mod:`.dpsgd_s_paper`) ends, on every LR cell, with bounds within its release noise of
C0 · min(s, √K · n_k / n) (docs/frontier.md, "Addendum"): this rule sets those bounds before training, from shares
taken as public (a dataset's published composition, written in params.yaml), and releases nothing else. Each step
is an ordinary Gaussian mechanism: sensitivity max_k C_k, noise σ · max_k C_k, σ = σ_eff (no budget spent on
statistics). Settings: ``train.dpsgd_group_fixed``; C0 is ``train.clip`` (or its override)."""

from __future__ import annotations

import math

from pydantic import Field

from ..schema import Fraction, Positive, Strict
from .base import Rule


class Settings(Strict):
    """``shares``: per dataset, the public share π_k of each group, in the dataset's group order (they need not sum
    to 1 exactly: rounded published figures); ``ratio_cap``: s, the cap on C_k / C0 (the paper rule's, 2)."""

    ratio_cap: Positive = 2.0
    shares: dict[str, list[Fraction]] = Field(default_factory=dict)


def group_bounds(clip: float, shares: tuple[float, ...], ratio_cap: float) -> list[float]:
    """C_k = C0 · min(s, √K · π_k) for K = len(shares)."""
    K = len(shares)
    return [clip * min(ratio_cap, math.sqrt(K) * p) for p in shares]


class DPSGDGroupFixed(Rule):
    name = "dpsgd_group_fixed"
    order = 45
    label = "DP-SGD, fixed group bounds"
    color = "#999933"
    config = "dpsgd_group_fixed"
    settings = Settings
    fields = ("ratio_cap", "shares")

    def own_fields(self, train, run, override):
        from ..config import ConfigError

        s = self.settings_of(train)
        if run.dataset not in s.shares:
            raise ConfigError(f"train.dpsgd_group_fixed.shares: no public group shares for dataset {run.dataset!r} "
                              f"(run {run.name!r}); give them in the dataset's group order")
        return {"ratio_cap": s.ratio_cap, "shares": tuple(s.shares[run.dataset])}

    def policy(self, spec, M, K, sig, gens, device):
        from .policy import GroupFixedClip

        if len(spec.shares) != K or min(spec.shares) <= 0:
            raise ValueError(f"dpsgd_group_fixed: {len(spec.shares)} positive shares needed, one per group; the data "
                             f"has {K} groups (shares {list(spec.shares)})")
        return GroupFixedClip(M, K, sig.g, bounds=group_bounds(spec.clip, spec.shares, spec.ratio_cap), device=device)

    def public_assumptions(self, spec):
        return ("the constants C0 and s, and the group shares π_k (a published composition written in params.yaml, "
                "not the training pool's counts)",)


RULE = DPSGDGroupFixed()
