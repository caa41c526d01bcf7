"""The audit's typed results: one :class:`GroupRisk` per attack and group, one :class:`LowFprRow` per group of the
low-FPR view, one :class:`AttackSummary` per attack (as fairlearn's ``MetricFrame`` or TF Privacy's typed attack
results: named fields, not dicts of dicts).

Each is a frozen dataclass that also reads as a mapping (``row["gpr"]``, ``dict(row)``, equal to the dict it writes,
unhashable like it) with exactly the keys, in the order, that the pipeline writes (``as_dict``):
results/audit/<run>/summary.json and groups.csv are the bytes they were when these were dicts. Frozen is shallow:
the lists and arrays a row holds are its own, not copies. ``json.dumps`` needs ``as_dict()`` first.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["AttackSummary", "GroupRisk", "LowFprRow"]


class _Row(Mapping):
    """A frozen dataclass read as a mapping of its ``as_dict()``."""

    _KEYS: dict[str, str] = {}  # field name -> the key it is written under, where they differ
    _OPTIONAL: tuple[str, ...] = ()  # fields left out of as_dict() when None

    def as_dict(self) -> dict[str, Any]:
        return {self._KEYS.get(f.name, f.name): getattr(self, f.name) for f in fields(self)
                if not (f.name in self._OPTIONAL and getattr(self, f.name) is None)}

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.as_dict())


@dataclass(frozen=True, eq=False)
class GroupRisk(_Row):
    """One attack's group privacy risk (GPR) on one group, with its interval (None where the attack reports none)."""

    attack: str
    group: int
    group_name: str
    n_records: int
    gpr: float
    gpr_lo: float | None
    gpr_hi: float | None


@dataclass(frozen=True, eq=False)
class LowFprRow(_Row):
    """One group of the low-FPR view (attack ``<attack>_lowfpr``): TPR at 0.1% and 1% FPR with their intervals, and
    the empirical ε lower bound."""

    _KEYS = {"tpr_at_01pct": "tpr_at_0.1pct", "tpr_at_01pct_lo": "tpr_at_0.1pct_lo",
             "tpr_at_01pct_hi": "tpr_at_0.1pct_hi"}

    attack: str
    group: int
    group_name: str
    n_records: int
    tpr_at_01pct: float
    tpr_at_01pct_lo: float
    tpr_at_01pct_hi: float
    tpr_at_1pct: float
    tpr_at_1pct_lo: float
    tpr_at_1pct_hi: float
    eps_lb: float


@dataclass(frozen=True, eq=False)
class AttackSummary(_Row):
    """One attack on one bank. ``gpr``: per group; ``delta_pp``: Δ (pp) with its simultaneous interval
    (``delta_lo``/``delta_hi``, pp) and the one-sided p-value of Δ > 0; ``null_floor_pp`` and ``p_perm``: the
    permutation floor and p-value; ``interval``: how the intervals were made (None for a point estimate);
    ``contrast``: the signed two-group contrast; ``contrasts``: every pairwise contrast (only where intervals are
    made); ``note``: why a statistic is not reported."""

    _OPTIONAL = ("contrasts", "note")

    gpr: Any
    delta_pp: float
    null_floor_pp: float
    p_perm: float | None
    interval: str | None
    gpr_lo: list
    gpr_hi: list
    delta_lo: float | None
    delta_hi: float | None
    p_delta_gt_0: float | None
    contrast: dict | None
    contrasts: list[dict] | None = None
    note: str | None = None
