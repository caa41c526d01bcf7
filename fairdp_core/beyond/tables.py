"""The beyond_membership report's tables: membership, attribute inference and model inversion per run,
as success rates and advantages with intervals, from the stage outputs (``results/beyond``) and the audit's.

Success rates, the source's unit: membership 50% + advantage/2 (the balanced membership game, PA-ALOOA
cross-fitted); attribute inference the balanced accuracy (chance 1/K); model inversion the evaluator's accuracy on
the reconstructions (chance 1/C). Advantages: membership TPR − FPR; attribute inference the balanced accuracy
normalised to [0, 1] above chance; model inversion (accuracy − 1/C)·C/(C − 1).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from .attribute import pair_inference

__all__ = ["SOURCE_CLAIMS", "inversion_by_class", "inversion_by_run", "inversion_group_breakdown", "membership_by_run",
           "risk_table", "utility_table"]

# The DP-SGD material's table (image models, ε = 2): attack success without DP -> with DP, and test accuracy.
SOURCE_CLAIMS = {"membership": (78.0, 52.0), "attribute": (65.0, 50.0), "inversion": (90.0, 30.0),
                 "accuracy_mnist": (99.2, 97.8), "accuracy_cifar10": (85.3, 76.1)}


def _t_over_units(values: np.ndarray, alpha: float, *, bounds: tuple[float, float] | None = None
                  ) -> tuple[float, float, float]:
    """Mean of independent units with its t interval (NaN bounds with fewer than two units), cut to ``bounds``
    (a rate's [0, 1]) when given. Units that all agree at a bound of a rate (every reconstruction recognised, or
    none) have no spread for a t interval: the interval is then Clopper–Pearson's with the units as the trials
    (n units all at 1: [(α/2)^(1/n), 1]), which does not pretend to certainty."""
    v = np.asarray(values, float)
    m = float(v.mean())
    if len(v) < 2:
        return m, float("nan"), float("nan")
    sd = float(v.std(ddof=1))
    if sd == 0 and bounds is not None and m in bounds:
        from ..audit.stats import clopper_pearson

        lo, hi = clopper_pearson(int(round(m * len(v))), len(v), alpha)
        return m, float(lo), float(hi)
    h = float(stats.t.ppf(1 - alpha / 2, len(v) - 1)) * sd / math.sqrt(len(v))
    lo, hi = m - h, m + h
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return m, lo, hi


def membership_by_run(train_dir: str | Path, runs: dict[str, dict], names: list[str], *,
                      alpha: float = 0.05) -> pd.DataFrame:
    """Per run: the cross-fitted PA-ALOOA advantage over all audit records (groups weighted by their share of the
    audit set) with its records × model-pairs interval, and the success rate 50% + advantage/2."""
    from ..reporting.results import alooa_contributions

    rows = []
    for name in names:
        c, g = alooa_contributions(train_dir, name)
        present = [k for k in np.unique(g) if (g == k).sum() >= 2]
        w = {int(k): float((g == k).sum() / np.isin(g, present).sum()) for k in present}
        r = pair_inference(c, g, int(g.max()) + 1, w, alpha=alpha)
        rows.append({"run": name, **{k: runs[name][k] for k in ("dataset", "model", "algorithm", "epsilon", "seed")},
                     "advantage": r["estimate"], "advantage_lo": r["lo"], "advantage_hi": r["hi"],
                     "success": 0.5 + r["estimate"] / 2, "success_lo": 0.5 + r["lo"] / 2,
                     "success_hi": 0.5 + r["hi"] / 2})
    return pd.DataFrame(rows)


def inversion_by_class(recon: pd.DataFrame, *, alpha: float = 0.05) -> pd.DataFrame:
    """Per run and class: the evaluator's accuracy on the reconstructions (mean over models and restarts, t interval
    over models, the independent units of an inversion: :func:`_t_over_units`), the RMS distance to the class mean
    and to the other classes' means, and how often the nearest class mean is the class's own."""
    keys = ["run", "dataset", "model", "algorithm", "epsilon", "seed", "class", "class_index"]
    rows = []
    for k, sub in recon.groupby(keys, dropna=False, sort=False):
        per_model = sub.groupby("model_index")["success"].mean().to_numpy()
        m, lo, hi = _t_over_units(per_model, alpha, bounds=(0.0, 1.0))
        rows.append({**dict(zip(keys, k)), "success": m, "success_lo": lo, "success_hi": hi,
                     "dist_own_mean": float(sub["dist_own_mean"].mean()),
                     "dist_other_means": float(sub["dist_other_means"].mean()),
                     "nearest_mean_is_own": float(sub["nearest_mean_is_own"].mean()),
                     "confidence": float(sub["confidence"].mean()), "n": len(sub)})
    return pd.DataFrame(rows)


def inversion_by_run(recon: pd.DataFrame, *, alpha: float = 0.05) -> pd.DataFrame:
    """Per run: the evaluator's accuracy over all classes (interval over models, :func:`_t_over_units`), chance 1/C,
    the advantage (accuracy − 1/C)·C/(C − 1), and the mean RMS distances to the own class mean and to the others'."""
    keys = ["run", "dataset", "model", "algorithm", "epsilon", "seed"]
    rows = []
    for k, sub in recon.groupby(keys, dropna=False, sort=False):
        C = sub["class_index"].nunique()
        m, lo, hi = _t_over_units(sub.groupby("model_index")["success"].mean().to_numpy(), alpha, bounds=(0.0, 1.0))
        scale = C / (C - 1)
        rows.append({**dict(zip(keys, k)), "success": m, "success_lo": lo, "success_hi": hi, "chance": 1 / C,
                     "advantage": (m - 1 / C) * scale, "advantage_lo": (lo - 1 / C) * scale,
                     "advantage_hi": (hi - 1 / C) * scale, "dist_own_mean": float(sub["dist_own_mean"].mean()),
                     "dist_other_means": float(sub["dist_other_means"].mean()),
                     "n_models": int(sub["model_index"].nunique())})
    return pd.DataFrame(rows)


def inversion_group_breakdown(recon: pd.DataFrame, group_share: dict[str, float]) -> pd.DataFrame:
    """Per run, class and group (UTKFace: the race the race evaluator assigns a gender's reconstruction): the share of
    reconstructions assigned to the group, beside the group's share of the training pool."""
    if "evaluator_group" not in recon or recon["evaluator_group"].isna().all():
        return pd.DataFrame()
    sub = recon[recon["evaluator_group"].notna()]
    rows = []
    for (run, cls), s in sub.groupby(["run", "class"], sort=False):
        counts = s["evaluator_group"].value_counts(normalize=True)
        for gname, share in group_share.items():
            rows.append({"run": run, "algorithm": s["algorithm"].iloc[0], "epsilon": s["epsilon"].iloc[0],
                         "class": cls, "group": gname, "assigned_share": float(counts.get(gname, 0.0)),
                         "training_share": float(share), "n": len(s)})
    return pd.DataFrame(rows)


def risk_table(membership: pd.DataFrame, attribute: pd.DataFrame, inversion: pd.DataFrame) -> pd.DataFrame:
    """Long table: one row per (risk, dataset, model, algorithm, ε, seed) with success and advantage (each with its
    interval), from :func:`membership_by_run`, the attribute stage's ``overall.csv`` and :func:`inversion_by_run`."""
    keep = ["dataset", "model", "algorithm", "epsilon", "seed", "success", "success_lo", "success_hi", "advantage",
            "advantage_lo", "advantage_hi"]
    parts = []
    if len(membership):
        parts.append(membership[keep].assign(risk="membership", chance=0.5))
    if len(attribute):
        a = attribute.rename(columns={"success": "raw_success"}).assign(
            success=attribute["balanced"], success_lo=attribute["balanced_lo"], success_hi=attribute["balanced_hi"])
        parts.append(a[keep + ["chance", "method"]].assign(risk="attribute inference"))
    if len(inversion):
        parts.append(inversion[keep + ["chance"]].assign(risk="model inversion"))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=keep + ["risk", "chance"])


def utility_table(utility: dict, *, alpha: float = 0.05) -> pd.DataFrame:
    """Per algorithm: test accuracy over the seeds (mean, t interval, each seed) and the accounting (σ, q, T, the
    sampling scheme, the accountant, ε). Wall times are in results/timings, outside every tracked output."""
    rows = []
    for alg, a in utility["algorithms"].items():
        m, lo, hi = _t_over_units(np.asarray(a["accuracy"]), alpha, bounds=(0.0, 1.0))
        acc = a.get("accounting") or {}
        rows.append({"algorithm": alg, "accuracy": m, "accuracy_lo": lo, "accuracy_hi": hi,
                     "per_seed": ", ".join(f"{100 * v:.2f}" for v in a["accuracy"]), "n_seeds": len(a["accuracy"]),
                     "epsilon": acc.get("epsilon"), "sigma": acc.get("sigma_g"), "q": acc.get("sample_rate"),
                     "T": acc.get("steps"), "sampling": acc.get("sampling"), "accountant": acc.get("accountant"),
                     "delta": acc.get("delta")})
    return pd.DataFrame(rows)
