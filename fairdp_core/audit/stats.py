"""Risk statistics: GPR and Δ, permutation p-values, intervals and tests over seeds, leveling, TPR at low FPR and an
empirical ε lower bound with Clopper–Pearson intervals on effective counts (docs/study.md, 'The audit'). The
intervals of GPR, the contrasts and Δ over records × model pairs, and Holm's adjustment, are in
:mod:`fairdp_core.audit.inference`.

GPR_k is the mean per-record advantage over group k's audit records; Δ = max_k GPR_k − min_k GPR_k, reported in
percentage points (×100).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
from scipy import stats

from .attacks import pair_folds
from .inference import group_inference, holm  # holm re-exported: reporting, verdicts and notebooks import it here

__all__ = [
    "clopper_pearson",
    "seeds_for_power",
    "delta_pp",
    "epsilon_lb_from_counts",
    "effective_n",
    "epsilon_lower_bound",
    "gpr",
    "holm",
    "leveling_split",
    "pair_folds",
    "pool_over_seeds",
    "paired_group_difference",
    "paired_seed_comparison",
    "permutation_pvalue",
    "seed_mean_interval",
    "tpr_at_fpr",
    "tpr_at_fpr_clustered",
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


def _low_fpr_cut(s_out: np.ndarray, fpr: float) -> tuple[float, float]:
    """(cut, thr): "IN iff score > cut" keeps at most ``fpr`` of the OUT scores above it even with ties (the cut is
    the (k+1)-th largest OUT score, k = ⌊fpr · n_out⌋); thr is the k-th largest (∞ when k = 0)."""
    s_out = np.sort(np.asarray(s_out, dtype=float))[::-1]
    k_allowed = int(math.floor(fpr * len(s_out)))
    thr = s_out[k_allowed - 1] if k_allowed > 0 else np.inf
    cut = s_out[k_allowed] if k_allowed < len(s_out) else -np.inf
    return cut, thr


def tpr_at_fpr(s_in: np.ndarray, s_out: np.ndarray, fpr: float, *, alpha: float = 0.05) -> dict[str, float]:
    """TPR of the threshold at which at most ``fpr`` of the OUT scores are ≥ it, with a CP interval on TPR."""
    s_out = np.asarray(s_out, dtype=float)
    cut, thr = _low_fpr_cut(s_out, fpr)
    tp = int((np.asarray(s_in) > cut).sum())
    fp = int((s_out > cut).sum())
    lo, hi = clopper_pearson(tp, len(s_in), alpha)
    return {"tpr": tp / max(len(s_in), 1), "tpr_lo": float(lo), "tpr_hi": float(hi), "fpr": fp / max(len(s_out), 1),
            "threshold": float(cut if np.isfinite(cut) else thr), "n_in": len(s_in), "n_out": len(s_out)}


def effective_n(hits: np.ndarray, cells: np.ndarray) -> float:
    """The effective number of independent trials behind the rate of ``hits`` over ``cells`` ([M, m] bool): the
    (model, record) cells of an audit are correlated within a model and within a record, so the rate's variance is
    estimated as a crossed design (models × records, V_models + V_records − V_cells, Owen 2007) and n_eff =
    p(1 − p) / V (Kish's design effect). Equals the number of cells when they behave as independent trials."""
    cells = np.asarray(cells, bool)
    x = np.where(cells, np.asarray(hits, float), 0.0)
    N = int(cells.sum())
    if N == 0:
        return 0.0
    p = x.sum() / N
    if p <= 0 or p >= 1:
        # no hit (or no miss): the design effect cannot be estimated from the cells; count the clusters instead
        # (the smaller of the models and the records that have cells), never the cells
        return float(min(N, int(cells.any(1).sum()), int(cells.any(0).sum())))
    def part(axis):
        n = cells.sum(axis)
        r = x.sum(axis)[n > 0] / n[n > 0]
        return float(r.var(ddof=1) / len(r)) if len(r) > 1 else 0.0
    v_cell = p * (1 - p) / N
    v = max(part(1) + part(0) - v_cell, v_cell)
    return float(min(N, p * (1 - p) / v))


def _cp_eff(hits: np.ndarray, cells: np.ndarray, alpha: float) -> tuple[float, float, float]:
    """(rate, lo, hi): Clopper–Pearson on the effective number of trials (:func:`effective_n`)."""
    N = int(np.asarray(cells, bool).sum())
    k = int(np.asarray(hits, bool)[np.asarray(cells, bool)].sum())
    n_eff = effective_n(hits, cells)
    p = k / max(N, 1)
    lo, hi = clopper_pearson(p * n_eff, n_eff, alpha)
    return p, float(lo), float(hi)


def tpr_at_fpr_clustered(scores: np.ndarray, membership: np.ndarray, fpr: float, *,
                         alpha: float = 0.05) -> dict[str, float]:
    """TPR at the threshold where at most ``fpr`` of the OUT (model, record) cells score above it, [M, m] inputs,
    with a Clopper–Pearson interval on the effective number of IN cells (model and record correlation)."""
    mem = np.asarray(membership, bool)
    cut, _ = _low_fpr_cut(scores[~mem], fpr)
    pred = scores > cut
    tpr, lo, hi = _cp_eff(pred, mem, alpha)
    return {"tpr": tpr, "tpr_lo": lo, "tpr_hi": hi, "fpr": float(pred[~mem].mean()) if (~mem).any() else 0.0,
            "threshold": float(cut), "n_in": int(mem.sum()), "n_in_eff": effective_n(pred, mem),
            "n_out": int((~mem).sum())}


def epsilon_lower_bound(scores: np.ndarray, membership: np.ndarray, folds: np.ndarray, *, delta: float,
                        alpha: float = 0.05, n_thresholds: int = 64) -> dict[str, float]:
    """Empirical ε lower bound: threshold chosen on models of fold 0 (maximising the bound there), counts
    evaluated on fold 1's models. ``scores``/``membership`` [M, m] (pooled over the records given).

    The Clopper–Pearson bounds use the effective numbers of IN and OUT cells (:func:`effective_n`): the cells of
    one model, or of one record, are not independent trials."""
    sel, ev = folds == 0, folds == 1
    s_in, s_out = scores[sel][membership[sel]], scores[sel][~membership[sel]]
    cand = np.unique(np.quantile(np.concatenate([s_in, s_out]), np.linspace(0.5, 1.0, n_thresholds)))
    best_t, best = np.inf, -1.0
    for t in cand:
        e = epsilon_lb_from_counts(int((s_in >= t).sum()), len(s_in), int((s_out >= t).sum()), len(s_out),
                                   alpha=alpha, delta=delta)
        if e > best:
            best, best_t = e, t
    S, mem = scores[ev], np.asarray(membership[ev], bool)
    pred = S >= best_t
    n_in, n_out = effective_n(pred, mem), effective_n(pred, ~mem)
    tpr, fpr = pred[mem].mean(), pred[~mem].mean()
    return {"eps_lb": epsilon_lb_from_counts(tpr * n_in, n_in, fpr * n_out, n_out, alpha=alpha, delta=delta),
            "threshold": float(best_t), "tp": int(pred[mem].sum()), "n_in": int(mem.sum()), "n_in_eff": n_in,
            "fp": int(pred[~mem].sum()), "n_out": int((~mem).sum()), "n_out_eff": n_out}


def pool_over_seeds(estimates, ses, dfs, *, alpha: float = 0.05, v_rec=None, v_cell=None,
                    shared: float = 0.0) -> dict[str, float]:
    """Combine one estimate per seed into their mean with a t interval, from each seed's own crossed variance.

    Seeds redraw the models (their streams) and, through the audit design, the audited records. The model pairs'
    component averages over seeds; the records' component averages only over the records that differ between
    seeds. With ``shared`` the expected fraction of audited records two seeds have in common (m / n for designs
    drawn from a pool of n; 1 when every record is audited, ``audit.m: all``) and each seed's ``v_rec``/``v_cell``
    (its record and cell components), the variance is

        mean_s(v_s) / S + shared · (1 − 1/S) · mean_s(v_rec,s − v_cell,s),

    i.e. Σ v_s / S² when seeds share no record, and the record component undivided when they share all (a
    superpopulation of records; the seeds cannot average it away). With two or three seeds the SD over seeds
    alone gives a t interval too wide to read (t(0.975, 1) = 12.7). Cochran's Q tests whether the seeds disagree
    beyond their intervals (``p_het``). Coverage: reports/coverage/coverage.md."""
    e = np.asarray(estimates, float)
    v = np.asarray(ses, float) ** 2
    d = np.asarray(dfs, float)
    vr = np.zeros_like(v) if v_rec is None else np.asarray(v_rec, float)
    vc = np.zeros_like(v) if v_cell is None else np.asarray(v_cell, float)
    ok = ~(np.isnan(e) | np.isnan(v))
    e, v, d, vr, vc = e[ok], v[ok], d[ok], vr[ok], vc[ok]
    S = len(e)
    if S == 0:
        return {"mean": float("nan"), "se": float("nan"), "df": float("nan"), "lo": float("nan"),
                "hi": float("nan"), "p": float("nan"), "p_het": float("nan"), "n_seeds": 0}
    common = shared * (1 - 1 / S) * float(np.maximum(vr - vc, 0).mean())
    var = v.sum() / S ** 2 + common
    denom = ((v / S ** 2) ** 2 / np.maximum(d, 1)).sum()
    df = max(min(float((v.sum() / S ** 2) ** 2 / denom) if denom > 0 else float("inf"), 1e6), 1.0)
    se = math.sqrt(var)
    h = float(stats.t.ppf(1 - alpha / 2, df)) * se
    m = float(e.mean())
    p = float(2 * stats.t.sf(abs(m) / se, df)) if se > 0 else float("nan")
    p_het = float("nan")
    if S > 1 and (v > 0).all():
        w = 1 / v
        q = float((w * (e - (w * e).sum() / w.sum()) ** 2).sum())
        p_het = float(stats.chi2.sf(q, S - 1))
    return {"mean": m, "se": se, "df": df, "lo": m - h, "hi": m + h, "p": p, "p_het": p_het, "n_seeds": S}


def seed_mean_interval(estimates: np.ndarray, *, alpha: float = 0.05) -> dict[str, float]:
    """Over seeds: the mean of the per-seed estimates with its t interval (S − 1 df; SD over seeds), and the exact
    two-sided sign-flip p-value of "mean 0" with the smallest p attainable with S seeds (2 / 2^S): below S = 6 no
    seed count can reach p < 0.05. One seed: the estimate, no interval, p None."""
    d = np.asarray(estimates, float)
    d = d[~np.isnan(d)]
    S = len(d)
    if S == 0:
        return {"mean": float("nan"), "sd": None, "lo": None, "hi": None, "p_sign_flip": None, "p_min": None,
                "n_seeds": 0}
    if S == 1:
        return {"mean": float(d[0]), "sd": None, "lo": None, "hi": None, "p_sign_flip": None, "p_min": None,
                "n_seeds": 1}
    sd = float(d.std(ddof=1))
    h = float(stats.t.ppf(1 - alpha / 2, S - 1)) * sd / math.sqrt(S)
    if S <= 16:
        flips = np.array(list(itertools.product([1, -1], repeat=S)))
        null = np.abs((flips * d).mean(1))
        p = float((null >= abs(d.mean()) - 1e-12).mean())
    else:
        p = float(stats.ttest_1samp(d, 0.0).pvalue)
    return {"mean": float(d.mean()), "sd": sd, "lo": float(d.mean() - h), "hi": float(d.mean() + h),
            "p_sign_flip": p, "p_min": 2.0 / 2 ** S if S <= 16 else None, "n_seeds": S}


def permutation_pvalue(advantage: np.ndarray, group: np.ndarray, n_groups: int, *, rng: np.random.Generator,
                       n_perm: int = 1000) -> float:
    """p-value of "Δ > 0": the share of group-label shuffles whose Δ is at least the observed one (+1 smoothing)."""
    obs = delta_pp(gpr(advantage, group, n_groups))
    hits = sum(delta_pp(gpr(advantage, rng.permutation(group), n_groups)) >= obs - 1e-12 for _ in range(n_perm))
    return (1 + hits) / (1 + n_perm)


def paired_seed_comparison(a: np.ndarray, b: np.ndarray, *, alpha: float = 0.05) -> dict[str, float]:
    """Compare two algorithms over the same seeds (same designs and streams): the mean of the per-seed differences
    a − b with its t interval over seeds, and the exact sign-flip p-value (two-sided) of "no difference", with the
    smallest p the seed count allows (:func:`seed_mean_interval`)."""
    r = seed_mean_interval(np.asarray(a, float) - np.asarray(b, float), alpha=alpha)
    return {"mean_diff": r["mean"], "sd": r["sd"], "lo": r["lo"], "hi": r["hi"], "p_sign_flip": r["p_sign_flip"],
            "p_min": r["p_min"], "n_seeds": r["n_seeds"]}


def leveling_split(c_a: np.ndarray, c_b: np.ndarray, group: np.ndarray, n_groups: int, *,
                   rng: np.random.Generator, alpha: float = 0.05) -> pd.DataFrame:
    """Leveling up or down, over models and records, without regression to the mean.

    ``c_a``, ``c_b`` [M, m]: two banks' per-(model, record) contributions (:mod:`fairdp_core.audit.inference`;
    ``advantage = c.sum(0)``) on the SAME audit records and design, e.g. DP-SGD (a) and DP-SGD-S (b) at one seed.
    The records are split in two halves (stratified by group, ``rng``); the riskiest and safest groups under a are
    picked on the first half, and every group's change GPR_k(b) − GPR_k(a) is measured on the second with the
    crossed records × model-pairs interval of :func:`~fairdp_core.audit.inference.group_inference` applied to
    c_b − c_a: pair r of bank a and pair r of bank b (the same data split, independent training) form one
    independent unit, so the interval counts each bank's model-level effects, not only the records. Picking and
    measuring on the same records would show the riskiest group "improving" even between two identical algorithms.
    Columns: group, change, lo, hi (level 1 − alpha), p (two-sided t), df, n, gpr_a_pick, role (none when every
    group ties on the first half)."""
    c_a, c_b, group = np.asarray(c_a, float), np.asarray(c_b, float), np.asarray(group)
    if c_a.shape != c_b.shape:
        raise ValueError(f"the two banks must have the same models and records: {c_a.shape} vs {c_b.shape}")
    first = np.zeros(len(group), dtype=bool)
    for k in range(n_groups):
        idx = rng.permutation(np.flatnonzero(group == k))
        first[idx[: len(idx) // 2]] = True
    pick = gpr(c_a[:, first].sum(0), group[first], n_groups)
    res = group_inference(c_b[:, ~first] - c_a[:, ~first], group[~first], n_groups, alpha=alpha)
    rows = []
    for k in range(n_groups):
        n = int(((group == k) & ~first).sum())
        if not n:
            continue
        se, df = res["gpr_se"][k], res["gpr_df"][k]
        p = float(2 * stats.t.sf(abs(res["gpr"][k]) / se, df)) if np.isfinite(se) and se > 0 else float("nan")
        rows.append({"group": k, "change": float(res["gpr"][k]), "lo": float(res["gpr_lo"][k]),
                     "hi": float(res["gpr_hi"][k]), "p": p, "df": float(df), "n": n, "gpr_a_pick": float(pick[k])})
    out = pd.DataFrame(rows)
    valid = out["gpr_a_pick"].notna() if len(out) else pd.Series(dtype=bool)
    out["role"] = ""
    if len(out) and valid.any() and out.loc[valid, "gpr_a_pick"].max() > out.loc[valid, "gpr_a_pick"].min():
        out.loc[out.loc[valid, "gpr_a_pick"].idxmax(), "role"] = "riskiest"
        out.loc[out.loc[valid, "gpr_a_pick"].idxmin(), "role"] = "safest"
    return out


def paired_group_difference(adv_a: np.ndarray, adv_b: np.ndarray, group: np.ndarray, n_groups: int, *,
                            rng: np.random.Generator, n_boot: int = 1000, level: float = 0.95) -> pd.DataFrame:
    """GPR_k(b) − GPR_k(a) per group for two algorithms audited on the SAME audit records (same design), with a
    percentile bootstrap over records within the group (paired: a record's two advantages move together).
    Records only: conditional on the two banks, so it undercovers over models (``fairdp coverage --leveling``);
    the reports use :func:`leveling_split`, which resamples model pairs too.
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


def seeds_for_power(sd_diff: float, effect: float, *, alpha: float = 0.05, power: float = 0.8,
                    max_seeds: int = 10_000) -> int | None:
    """The fewest seeds S for which a paired two-sided t test at ``alpha`` detects ``effect`` with ``power``, given
    the SD of the per-seed differences (noncentral t; at least 6 so the exact sign-flip test can also reach 0.05)."""
    from scipy import stats as st

    if not sd_diff or sd_diff <= 0:
        return 6
    for S in range(6, max_seeds + 1):
        nc = abs(effect) / sd_diff * S ** 0.5
        tc = st.t.ppf(1 - alpha / 2, S - 1)
        lower = st.nct.cdf(-tc, S - 1, nc)  # NaN far in the tail (scipy): it is 0 there
        if st.nct.sf(tc, S - 1, nc) + (0.0 if np.isnan(lower) else lower) >= power:
            return S
    return None
