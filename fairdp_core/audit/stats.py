"""Risk statistics: GPR and Δ with bootstrap CIs, permutation p-values, paired seed comparisons, TPR at low FPR
with Clopper–Pearson intervals, and an empirical ε lower bound (STUDY.md §4).

GPR_k is the mean per-record advantage over group k's audit records; Δ = max_k GPR_k − min_k GPR_k, reported in
percentage points (×100).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pandas as pd
from scipy import stats

from .attacks import pair_folds

__all__ = [
    "bootstrap_gpr",
    "clopper_pearson",
    "delta_pp",
    "epsilon_lb_from_counts",
    "epsilon_lower_bound",
    "gpr",
    "pair_folds",
    "paired_group_difference",
    "paired_seed_comparison",
    "permutation_pvalue",
    "tpr_at_fpr",
]


def gpr(advantage: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """[K]: mean advantage per group (NaN for a group with no audit record)."""
    s = np.bincount(group, weights=advantage, minlength=n_groups)
    c = np.bincount(group, minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(c > 0, s / np.maximum(c, 1), np.nan)


def delta_pp(g: np.ndarray) -> float:
    """Δ in percentage points: 100 · (max − min) over groups with records."""
    g = np.asarray(g, dtype=float)
    g = g[~np.isnan(g)]
    return float(100 * (g.max() - g.min())) if len(g) else float("nan")


def clopper_pearson(k: np.ndarray | int, n: np.ndarray | int, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided exact binomial interval for k successes in n trials (α/2 in each tail)."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    lo = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
    hi = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    return lo, hi


def epsilon_lb_from_counts(tp: int, n_in: int, fp: int, n_out: int, *, alpha: float = 0.05,
                           delta: float = 0.0) -> float:
    """ε_lb = log((TPR_lb − δ) / FPR_ub) with Clopper–Pearson bounds; 0 when the bound is vacuous.

    500/500 true positives and 0/500 false positives at α = 0.01 give 4.54.
    """
    tpr_lb, _ = clopper_pearson(tp, n_in, alpha)
    _, fpr_ub = clopper_pearson(fp, n_out, alpha)
    if tpr_lb - delta <= 0 or fpr_ub <= 0:
        return 0.0
    return max(0.0, float(math.log((tpr_lb - delta) / fpr_ub)))


def tpr_at_fpr(s_in: np.ndarray, s_out: np.ndarray, fpr: float, *, alpha: float = 0.05) -> dict[str, float]:
    """TPR of the threshold at which at most ``fpr`` of the OUT scores are ≥ it, with a CP interval on TPR."""
    s_out = np.sort(np.asarray(s_out, dtype=float))[::-1]
    k_allowed = int(math.floor(fpr * len(s_out)))
    thr = s_out[k_allowed - 1] if k_allowed > 0 else np.inf
    # strictly above the (k_allowed+1)-th largest OUT score keeps FP ≤ k_allowed even with ties
    cut = s_out[k_allowed] if k_allowed < len(s_out) else -np.inf
    tp = int((np.asarray(s_in) > cut).sum())
    fp = int((s_out > cut).sum())
    lo, hi = clopper_pearson(tp, len(s_in), alpha)
    return {"tpr": tp / max(len(s_in), 1), "tpr_lo": float(lo), "tpr_hi": float(hi), "fpr": fp / max(len(s_out), 1),
            "threshold": float(cut if np.isfinite(cut) else thr), "n_in": len(s_in), "n_out": len(s_out)}


def epsilon_lower_bound(scores: np.ndarray, membership: np.ndarray, folds: np.ndarray, *, delta: float,
                        alpha: float = 0.05, n_thresholds: int = 64) -> dict[str, float]:
    """Empirical ε lower bound: threshold chosen on models of fold 0 (maximising the bound there), counts
    evaluated on fold 1's models. ``scores``/``membership`` [M, m] (pooled over the records given)."""
    sel, ev = folds == 0, folds == 1
    s_in, s_out = scores[sel][membership[sel]], scores[sel][~membership[sel]]
    cand = np.unique(np.quantile(np.concatenate([s_in, s_out]), np.linspace(0.5, 1.0, n_thresholds)))
    best_t, best = np.inf, -1.0
    for t in cand:
        e = epsilon_lb_from_counts(int((s_in >= t).sum()), len(s_in), int((s_out >= t).sum()), len(s_out),
                                   alpha=alpha, delta=delta)
        if e > best:
            best, best_t = e, t
    e_in, e_out = scores[ev][membership[ev]], scores[ev][~membership[ev]]
    tp, fp = int((e_in >= best_t).sum()), int((e_out >= best_t).sum())
    return {"eps_lb": epsilon_lb_from_counts(tp, len(e_in), fp, len(e_out), alpha=alpha, delta=delta),
            "threshold": float(best_t), "tp": tp, "n_in": len(e_in), "fp": fp, "n_out": len(e_out)}


PerRecord = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def bootstrap_gpr(scores: np.ndarray, membership: np.ndarray, group: np.ndarray, n_groups: int,
                  per_record: PerRecord, *, rng: np.random.Generator, n_boot: int = 1000,
                  resample_models: bool = True, level: float = 0.95) -> dict[str, np.ndarray]:
    """Percentile bootstrap of GPR [K] and Δ (pp): records resampled within groups × model pairs resampled.

    Model pairs (2r, 2r+1) are resampled within their fold (:func:`pair_folds`), so a cross-fitted estimator
    never sees one pair in both folds. ``per_record(scores, membership, folds) -> advantage [m]`` recomputes the
    advantages on each resample. With ``resample_models=False`` the advantages are fixed and only records are
    resampled (cheap; ignores the model-bank variability).
    """
    M, m = scores.shape
    folds = pair_folds(M)
    pairs = [np.flatnonzero(folds[::2] == f) for f in (0, 1)]  # pair r is rows 2r, 2r+1
    base = per_record(scores, membership, folds)
    by_group = [np.flatnonzero(group == k) for k in range(n_groups)]
    g_boot = np.empty((n_boot, n_groups))
    for b in range(n_boot):
        if resample_models:
            chosen = np.concatenate([rng.choice(p, size=len(p), replace=True) for p in pairs if len(p)])
            rows = np.stack([2 * chosen, 2 * chosen + 1], 1).ravel()
            f = np.repeat(np.concatenate([np.full(len(p), i) for i, p in enumerate(pairs) if len(p)]), 2)
            adv = per_record(scores[rows], membership[rows], f)
        else:
            adv = base
        for k, idx in enumerate(by_group):
            g_boot[b, k] = adv[rng.choice(idx, size=len(idx), replace=True)].mean() if len(idx) else np.nan
    a = (1 - level) / 2
    d_boot = 100 * (np.nanmax(g_boot, 1) - np.nanmin(g_boot, 1))
    d_obs = delta_pp(gpr(base, group, n_groups))
    # Δ is a max − min: biased upward when groups are close, and its bootstrap distribution more so (the plug-in
    # Δ can fall below the whole percentile interval). So Δ's interval is the basic (reverse-percentile) one,
    # [2Δ − q_hi, 2Δ − q_lo] clipped at 0, centred on the bias-corrected estimate 2Δ − mean(Δ*); the percentile
    # interval is kept for reference. Read Δ with its permutation p-value.
    q_lo, q_hi = np.quantile(d_boot, a), np.quantile(d_boot, 1 - a)
    return {"gpr": gpr(base, group, n_groups), "gpr_lo": np.quantile(g_boot, a, axis=0),
            "gpr_hi": np.quantile(g_boot, 1 - a, axis=0), "delta_pp": d_obs,
            "delta_bias_corrected": float(max(0.0, 2 * d_obs - d_boot.mean())),
            "delta_lo": float(max(0.0, 2 * d_obs - q_hi)), "delta_hi": float(max(0.0, 2 * d_obs - q_lo)),
            "delta_pct_lo": float(q_lo), "delta_pct_hi": float(q_hi), "advantage": base}


def permutation_pvalue(advantage: np.ndarray, group: np.ndarray, n_groups: int, *, rng: np.random.Generator,
                       n_perm: int = 1000) -> float:
    """p-value of "Δ > 0": the share of group-label shuffles whose Δ is at least the observed one (+1 smoothing)."""
    obs = delta_pp(gpr(advantage, group, n_groups))
    hits = sum(delta_pp(gpr(advantage, rng.permutation(group), n_groups)) >= obs - 1e-12 for _ in range(n_perm))
    return (1 + hits) / (1 + n_perm)


def paired_seed_comparison(a: np.ndarray, b: np.ndarray, *, rng: np.random.Generator, n_boot: int = 10000,
                           level: float = 0.95) -> dict[str, float]:
    """Compare two algorithms' Δ over the same seeds: mean of a − b, paired bootstrap CI over seeds, and the
    exact sign-flip p-value (two-sided) of "no difference"."""
    d = np.asarray(a, float) - np.asarray(b, float)
    S = len(d)
    boots = d[rng.integers(0, S, size=(n_boot, S))].mean(1)
    if S <= 16:
        flips = np.array(list(itertools.product([1, -1], repeat=S)))
    else:
        flips = rng.choice([1, -1], size=(20000, S))
    null = np.abs((flips * d).mean(1))
    p = float((null >= abs(d.mean()) - 1e-12).mean())
    q = (1 - level) / 2
    return {"mean_diff": float(d.mean()), "lo": float(np.quantile(boots, q)), "hi": float(np.quantile(boots, 1 - q)),
            "p_sign_flip": p, "n_seeds": S}


def paired_group_difference(adv_a: np.ndarray, adv_b: np.ndarray, group: np.ndarray, n_groups: int, *,
                            rng: np.random.Generator, n_boot: int = 1000, level: float = 0.95) -> pd.DataFrame:
    """GPR_k(b) − GPR_k(a) per group for two algorithms audited on the SAME audit records (same design), with a
    percentile bootstrap over records within the group (paired: a record's two advantages move together).
    A positive change means group k got riskier under b (leveling down when k was the safer group)."""
    d = np.asarray(adv_b, float) - np.asarray(adv_a, float)
    q = (1 - level) / 2
    rows = []
    for k in range(n_groups):
        dk = d[group == k]
        if not len(dk):
            continue
        boots = dk[rng.integers(0, len(dk), size=(n_boot, len(dk)))].mean(1)
        rows.append({"group": k, "change": float(dk.mean()), "lo": float(np.quantile(boots, q)),
                     "hi": float(np.quantile(boots, 1 - q)), "n": len(dk)})
    return pd.DataFrame(rows)
