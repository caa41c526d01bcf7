"""Checking committed campaign summaries: rerun one here and compare it field by field (:func:`verify_run`), and
measure what a numerics version bump moves, paired over seeds (:func:`numerics_shift`)."""

from __future__ import annotations

from pathlib import Path

from ..config import ConfigError, Params
from . import claims
from .claims import _as_stored, effective_plan, numerics_of, plan_hash

__all__ = ["numerics_shift"]


# What a rerun of the same plan may change in a summary: where and when it was made, and how long it took.
NOT_REPRODUCED = ("commit", "wall_s")


def check_verifiable(params: Params, stored: dict) -> None:
    """A ConfigError unless summary ``stored`` is of a run of this profile with this checkout's plan and numerics."""
    name = stored.get("run")
    if name not in params.runs:
        raise ConfigError(f"{name}: not a run of profile {params.profile!r}")
    r = params.runs[name]
    groups = stored.get("group_names")
    plan_sha = plan_hash(effective_plan(params, name))
    version = numerics_of(r.algorithm, r.model, len(groups) if groups else None)
    if stored.get("plan_sha256") != plan_sha or stored.get("numerics") != version:
        raise ConfigError(f"{name}: the summary's plan {stored.get('plan_sha256')} (numerics {stored.get('numerics')}) "
                          f"is not this checkout's {plan_sha} (numerics {version})")


def verify_run(params: Params, stored: dict, work: Path, *, progress: bool = False) -> list[str]:
    """Rerun the run of summary ``stored`` in this checkout (its summary written under ``work``) and return the
    fields, other than :data:`NOT_REPRODUCED`, in which the rerun differs from ``stored`` (empty: it reproduces).
    The summary's plan must be this checkout's plan for the run, numerics version included."""
    check_verifiable(params, stored)
    name = stored["run"]

    again = _as_stored(claims.run_one(params, name, stored["part"], work, commit=stored["commit"], progress=progress))
    keys = (set(stored) | set(again)) - set(NOT_REPRODUCED)

    def same(k: str) -> bool:
        if k == "execution":  # the shard count moves no bit (tests/test_shard.py); threads and MKL_CBWR can
            return ({**(stored.get(k) or {}), "workers": None} == {**(again.get(k) or {}), "workers": None})
        return stored.get(k) == again.get(k)

    return sorted(k for k in keys if not same(k))


def numerics_shift(old: list[dict], new: list[dict], *, alpha: float = 0.05) -> list[dict]:
    """What a numerics version bump moves: per cell and algorithm of ``new`` (dataset, model, ε, algorithm), the
    per-seed difference new − old (the same run name and plan in both) of each estimator's Δ and of accuracy, with
    its mean and two-sided t interval at ``alpha`` over the paired seeds. A bump that moves no result beyond chance
    has intervals that hold 0; with fewer than 2 pairs there is no interval (``holds_zero`` None). A run of
    ``new`` without its old twin is counted in ``unpaired``."""
    import numpy as np
    from scipy import stats

    from ..audit.verdicts import ESTIMATORS

    by_run = {s["run"]: s for s in old}
    quantities = {f"Δ {est.replace('_', '-')} (pp)": (lambda s, a=attack: s["attacks"][a]["delta_pp"])
                  for est, attack in ESTIMATORS.items()}
    quantities["accuracy (pp)"] = lambda s: 100 * s["accuracy"]["mean"]

    def arm(s: dict) -> tuple:
        return s["dataset"], s["model"], float(s["epsilon"]), s["algorithm"]

    rows = []
    for key in sorted({arm(s) for s in new}):
        runs = sorted((s for s in new if arm(s) == key), key=lambda s: s["seed"])
        pairs = [(by_run[s["run"]], s) for s in runs if s["run"] in by_run]
        for o, n in pairs:
            if o["plan_sha256"] != n["plan_sha256"]:
                raise ValueError(f"{n['run']}: not the same plan in both directories")
        for label, get in quantities.items():
            d = np.array([get(n) - get(o) for o, n in pairs], dtype=float)
            k = len(d)
            mean = float(d.mean()) if k else float("nan")
            half = float(stats.t.ppf(1 - alpha / 2, k - 1) * d.std(ddof=1) / np.sqrt(k)) if k > 1 else float("nan")
            rows.append({"dataset": key[0], "model": key[1], "epsilon": key[2], "algorithm": key[3],
                         "quantity": label, "seeds": k, "unpaired": len(runs) - k,
                         "versions": " / ".join(sorted({f"{o['numerics']} → {n['numerics']}" for o, n in pairs})),
                         "mean": mean, "lo": mean - half, "hi": mean + half,
                         "holds_zero": bool(mean - half <= 0 <= mean + half) if k > 1 else None})
    return rows
