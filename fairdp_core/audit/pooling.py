"""Statistics over seeds: what the reports state about a configuration run at several seeds.

:func:`seed_stats` summarises one configuration (dataset × model × ε × algorithm) over its seeds: accuracy with its
t interval, the degenerate-model check, Δ's simultaneous interval and the two-group contrast pooled over the seeds
(:func:`pooled_delta`), the null floor, per-group clipped fractions (:func:`mean_clipped`) and the accounting.
:func:`minimal_detectable_effect` is the paired design's power statement and :func:`correlation_interval` the
jackknife interval of a correlation (PA-LOOA against PA-ALOOA). The report modules only render these.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .stats import holm, pool_over_seeds, seed_mean_interval
from .verdicts import is_degenerate

__all__ = ["correlation_interval", "group_gpr_over_seeds", "mean_clipped", "minimal_detectable_effect", "pooled_delta",
           "seed_stats"]


def minimal_detectable_effect(sd_diff: float, seeds: int, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest |effect| a paired two-sided t test at ``alpha`` detects with ``power`` from ``seeds`` seeds
    (the normal-approximation form with t quantiles: (t_{1-α/2} + t_{power}) · SD / √S)."""
    from scipy import stats as st

    if seeds < 2:
        return float("inf")
    return float((st.t.ppf(1 - alpha / 2, seeds - 1) + st.t.ppf(power, seeds - 1)) * sd_diff / seeds ** 0.5)


def pooled_delta(g: pd.DataFrame, alpha: float) -> dict[str, float]:
    """Δ over seeds: every pairwise contrast pooled over the seeds (:func:`pool_over_seeds`), then the simultaneous
    interval of Δ = max |contrast| (Bonferroni over the pairs), in pp; and the two-group contrast itself."""
    per_pair: dict[tuple[int, int], list[dict]] = {}
    for cs in g["contrasts"]:
        for c in cs or []:
            per_pair.setdefault((c["k"], c["l"]), []).append(c)
    if not per_pair:
        return {}
    a_adj = alpha / len(per_pair)
    # the expected share of audited records two seeds' designs have in common: m / n (1 when every record is audited)
    shared = float(np.clip((g["m"] / g["n_train"]).mean(), 0, 1)) if g["n_train"].notna().all() else 1.0

    def pool(cs, a):
        return pool_over_seeds([c["diff"] for c in cs], [c["se"] for c in cs], [c["df"] for c in cs], alpha=a,
                               v_rec=[c.get("v_rec", 0.0) for c in cs], v_cell=[c.get("v_cell", 0.0) for c in cs],
                               shared=shared)

    pooled = {kl: pool(cs, a_adj) for kl, cs in per_pair.items()}
    lo = max((0.0 if r["lo"] <= 0 <= r["hi"] else min(abs(r["lo"]), abs(r["hi"]))) for r in pooled.values())
    hi = max(max(abs(r["lo"]), abs(r["hi"])) for r in pooled.values())
    p = holm([r["p"] for r in pooled.values()])
    het = [r["p_het"] for r in pooled.values() if np.isfinite(r["p_het"])]
    out = {"delta_lo": 100 * lo, "delta_hi": 100 * hi, "p_delta": float(np.nanmin(p)),
           "p_seed_heterogeneity": float(min(het)) if het else float("nan")}
    if len(pooled) == 1:
        r = pool(next(iter(per_pair.values())), alpha)
        out.update(contrast_pp=100 * r["mean"], contrast_lo=100 * r["lo"], contrast_hi=100 * r["hi"])
    gprs = np.array([x for x in g["gpr"] if x is not None], dtype=float)
    if gprs.ndim == 2 and len(gprs):
        mean_gpr = np.nanmean(gprs, 0)  # Δ of the seed-averaged GPRs: the quantity the interval is for
        out["delta_pooled_pp"] = float(100 * (np.nanmax(mean_gpr) - np.nanmin(mean_gpr)))
    return out


def mean_clipped(g: pd.DataFrame) -> dict[str, float] | None:
    """Per group, the fraction of per-sample gradients clipped during training, averaged over the seeds."""
    if "clipped_fraction" not in g:
        return None
    parts = [c for c in g["clipped_fraction"] if isinstance(c, dict)]
    if not parts:
        return None
    return {k: float(np.mean([c[k] for c in parts if c.get(k) is not None])) for k in parts[0]}


def seed_stats(g: pd.DataFrame, alpha: float = 0.05, n_classes: int = 2) -> pd.Series:
    """One configuration over its seeds: means and SDs, Δ's interval and the two-group contrast pooled over the
    seeds (each seed's crossed variance; Cochran's Q flags seeds that disagree), the null floor, and the
    models-that-learn check (:func:`~fairdp_core.audit.verdicts.is_degenerate`, chance 1/``n_classes``)."""
    one = len(g) == 1
    acc = float(g["accuracy"].mean())
    majority = float(g["majority_rate"].mean()) if g["majority_rate"].notna().any() else float("nan")
    top = float(g["top_pred_share"].max()) if g["top_pred_share"].notna().any() else float("nan")
    bal = g["balanced_accuracy"] if "balanced_accuracy" in g else pd.Series(dtype=float)
    balanced = float(bal.mean()) if bal.notna().all() and len(bal) else float("nan")
    clipped = mean_clipped(g)
    pooled = pooled_delta(g, alpha) if "contrasts" in g else {}
    if not pooled and one:  # one seed and no per-pair contrasts in its summary: the bank's own interval
        pooled = {"delta_lo": g["delta_lo"].iloc[0], "delta_hi": g["delta_hi"].iloc[0], "p_delta": g["p_delta"].iloc[0]}
    if not pooled:  # no per-pair contrasts stored: the t interval of the mean plug-in Δ over seeds, clipped at 0
        over = seed_mean_interval(g["delta_pp"].to_numpy(float), alpha=alpha)
        pooled = {"delta_lo": max(0.0, over["lo"]), "delta_hi": over["hi"], "p_delta": float("nan")}
    acc_ci = seed_mean_interval(g["accuracy"].to_numpy(float), alpha=alpha)
    return pd.Series({
        "seeds": int(g["seed"].nunique()), "accuracy": acc,
        "accuracy_sd": float(g["accuracy"].std(ddof=1)) if not one else float("nan"),
        "accuracy_lo": float("nan") if acc_ci["lo"] is None else acc_ci["lo"],
        "accuracy_hi": float("nan") if acc_ci["hi"] is None else acc_ci["hi"],
        "majority_rate": majority, "top_pred_share": top, "balanced_accuracy": balanced,
        "degenerate": is_degenerate(top, balanced, n_classes, accuracy=acc, majority=majority),
        "clipped_fraction": clipped,
        # Δ of the seed-averaged GPRs (what the interval covers); the mean of the per-seed plug-in Δs beside it
        "delta_pp": float(pooled.get("delta_pooled_pp", g["delta_pp"].mean())),
        "delta_mean_per_seed_pp": float(g["delta_pp"].mean()),
        "delta_sd": float(g["delta_pp"].std(ddof=1)) if not one else float("nan"),
        "delta_lo": pooled["delta_lo"], "delta_hi": pooled["delta_hi"], "p_delta": pooled["p_delta"],
        "p_seed_heterogeneity": pooled.get("p_seed_heterogeneity", float("nan")),
        "null_floor_pp": float(g["null_floor_pp"].mean()) if g["null_floor_pp"].notna().any() else float("nan"),
        "contrast_pp": pooled.get("contrast_pp", float("nan")), "contrast_lo": pooled.get("contrast_lo", float("nan")),
        "contrast_hi": pooled.get("contrast_hi", float("nan")),
        "sigma_g": g["sigma_g"].max(), "sigma_b": g["sigma_b"].max(),
        "sigma_s": g["sigma_s"].max() if "sigma_s" in g and g["sigma_s"].notna().any() else float("nan"),
        "q": g["q"].max(), "q_min": g["q_min"].min(),
        "T": int(g["T"].max()), "delta": g["delta"].iloc[0], "accountant": g["accountant"].iloc[0],
        "eps_spent": g["eps_spent"].max(), "guaranteed": bool(g["guaranteed"].all())})


def correlation_interval(x, y, *, alpha: float = 0.05, normal_theory: bool = False) -> dict[str, float]:
    """Pearson r with a 95% interval on Fisher's z = atanh(r), and Spearman's ρ. The interval is the jackknife's
    (leave one target out: bias-corrected z, its jackknife standard error, a t quantile with n − 1 df), not
    z ± 1.96/√(n − 3): per-record advantages are bounded, skewed and of unequal noise, and the normal-theory interval
    then undercovers (0.91 at n = 50, r ≈ 0.5, in tests/test_reports.py's simulation, where the jackknife's holds
    0.94–0.95 over 4,000 studies). ``normal_theory``: the 1/√(n − 3) interval, kept for that test."""
    from scipy import stats as st

    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    n = len(x)
    if n < 4 or x.std() == 0 or y.std() == 0:
        return {"n": n, "r": float("nan"), "lo": float("nan"), "hi": float("nan"), "spearman": float("nan")}

    def z_of(a, b):
        ac, bc = a - a.mean(-1, keepdims=True), b - b.mean(-1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            r = (ac * bc).sum(-1) / np.sqrt((ac ** 2).sum(-1) * (bc ** 2).sum(-1))
        return np.arctanh(np.clip(r, -0.999999, 0.999999))

    z = float(z_of(x, y))
    if normal_theory:
        centre, h = z, st.norm.ppf(1 - alpha / 2) / np.sqrt(n - 3)
    else:  # jackknife: bias-corrected centre, its standard error, t quantile with n − 1 df
        keep = ~np.eye(n, dtype=bool)
        zj = z_of(np.broadcast_to(x, (n, n))[keep].reshape(n, n - 1), np.broadcast_to(y, (n, n))[keep].reshape(n, n - 1))
        centre = n * z - (n - 1) * float(np.nanmean(zj))
        h = st.t.ppf(1 - alpha / 2, n - 1) * float(np.sqrt((n - 1) / n * np.nansum((zj - np.nanmean(zj)) ** 2)))
    return {"n": n, "r": float(np.tanh(z)), "lo": float(np.tanh(centre - h)), "hi": float(np.tanh(centre + h)),
            "spearman": float(st.spearmanr(x, y).statistic)}


def group_gpr_over_seeds(rows: pd.DataFrame, keys: list[str], *, alpha: float = 0.05) -> pd.DataFrame:
    """Per group (one row per ``keys``), the GPR averaged over the seeds with a normal (1 − ``alpha``) interval whose
    variance pools the seeds as independent audits: each seed's standard error read off its own (1 − ``alpha``)
    interval (``gpr_lo``, ``gpr_hi``: half-width / z), Var(mean) = Σ SE² / S². ``rows``: one row per seed and group
    (GPR as a fraction). Returns ``keys``, ``gpr``, ``se2``, ``seeds`` and ``gpr_pp``, ``lo_pp``, ``hi_pp`` in pp; with
    one seed the interval is that seed's own."""
    from scipy import stats as st

    z = float(st.norm.ppf(1 - alpha / 2))
    r = rows.assign(se=(pd.to_numeric(rows["gpr_hi"]) - pd.to_numeric(rows["gpr_lo"])) / (2 * z))
    out = r.groupby(keys, sort=False, dropna=False).agg(
        gpr=("gpr", "mean"), se2=("se", lambda s: float((s ** 2).sum()) / len(s) ** 2), seeds=("seed", "nunique")
    ).reset_index()
    out["gpr_pp"] = 100 * out["gpr"]
    half = 100 * z * np.sqrt(out["se2"])
    out["lo_pp"], out["hi_pp"] = out["gpr_pp"] - half, out["gpr_pp"] + half
    return out
