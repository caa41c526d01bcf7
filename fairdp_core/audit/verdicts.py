"""Verdicts on the paper's claims from the ``claims`` campaign's per-run summaries (docs/claims.md).

A *cell* is dataset × model × ε; a *row* is a cell and one DP-SGD-S rule, compared with DP-SGD over the seeds both
ran (same audit designs and sampling streams: paired). Per row and per estimator of Δ (the cross-fitted PA-ALOOA
and the paper's in-sample one): the mean paired difference Δ(rule) − Δ(DP-SGD) in pp, the paired t test's p,
Holm-adjusted over every row of the table (one family per estimator), and the t interval at the Bonferroni level
1 − α/k for the table's k rows; the exact sign-flip p beside them, unadjusted. A row's category per estimator:
*lowers* or *raises* Δ where the Holm-adjusted p < α and the Bonferroni interval excludes 0 on that side, else
*unchanged* (with the smallest effect 80% power would detect at its seeds). Its verdict:

- **not a like-for-like test** where either arm is degenerate (:func:`degenerate`) or their mean test accuracies
  differ by more than 2 pp: no reproduced/contradicted verdict, whatever Δ does;
- **too few seeds** below 6 paired seeds;
- **depends on the estimator** where the two estimators' categories differ;
- otherwise the shared category, read against the paper's claim (a lower Δ): **reproduced** (lowers),
  **contradicted** (raises), **not detected** (unchanged).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from .stats import holm, paired_seed_comparison

__all__ = ["ESTIMATORS", "LIKE_FOR_LIKE_PP", "MIN_SEEDS", "PAPER_QUOTED", "claims_table", "degenerate",
           "load_summaries", "rule_sentences"]

ESTIMATORS = {"cross_fit": "alooa_cross_fit", "in_sample": "alooa_in_sample"}
LIKE_FOR_LIKE_PP = 2.0
MIN_SEEDS = 6
RULE_ORDER = ("dpsgd_s_paper", "dpsgd_s", "dpsgd_s_paper_code")
# The paper's quoted Δ (pp, DP-SGD → DP-SGD-S, its in-sample estimator, mean over 5 seeds) and DP-SGD accuracy, at
# ε = 10; every other cell of its Tables 4-6 is summarised in its text as "DP-SGD-S lowers Δ".
PAPER_QUOTED = {
    ("adult", "lr", 10.0): {"dpsgd": 0.27, "dpsgd_s": 0.17},
    ("law_paper", "lr", 10.0): {"dpsgd": 0.59, "dpsgd_s": 0.41, "dpsgd_accuracy": 0.8974, "dpsgd_s_accuracy": 0.8956},
    ("mnist", "cnn", 10.0): {"dpsgd": 3.54, "dpsgd_s": 2.91},
}


def degenerate(accuracy: dict) -> bool:
    """A model that has not learned the task: ≥ 99% of its test predictions in one class, or balanced accuracy below
    0.52 (``accuracy``: a train stage's accuracy block, ``largest_predicted_class_share`` and ``balanced``)."""
    top = accuracy.get("largest_predicted_class_share")
    bal = accuracy.get("balanced")
    return bool((top is not None and top >= 0.99) or (bal is not None and bal < 0.52))


def load_summaries(directory: str | Path, *, numerics: int | None = None) -> list[dict]:
    """Every run summary in ``directory`` of one numerics version (``numerics``, default the newest present)."""
    out = [json.loads(p.read_text()) for p in sorted(Path(directory).glob("*.json"))]
    if not out:
        return []
    version = numerics if numerics is not None else max(s["numerics"] for s in out)
    return [s for s in out if s["numerics"] == version]


def _category(p_holm: float | None, lo: float, hi: float, alpha: float) -> str:
    """Lowers (raises) Δ only where the Holm-adjusted p is below ``alpha`` AND the Bonferroni interval printed
    beside it lies below (above) 0: a reader never sees "lowers" next to an interval that holds 0."""
    if p_holm is None or not np.isfinite(p_holm) or p_holm >= alpha or not (np.isfinite(lo) and np.isfinite(hi)):
        return "unchanged"
    if hi < 0:
        return "lowers"
    if lo > 0:
        return "raises"
    return "unchanged"


def _mde(sd: float | None, n: int, alpha: float = 0.05, power: float = 0.8) -> float | None:
    if sd is None or n < 2 or not np.isfinite(sd):
        return None
    return float((stats.t.ppf(1 - alpha / 2, n - 1) + stats.t.ppf(power, n - 1)) * sd / np.sqrt(n))


def claims_table(summaries: list[dict], *, alpha: float = 0.05) -> pd.DataFrame:
    """One row per cell × DP-SGD-S rule: accuracies, Δ of both arms, the paired differences under both estimators
    with Holm-adjusted p and Bonferroni interval, the per-estimator categories and the verdict (module docstring)."""
    dp = [s for s in summaries if s["algorithm"] != "sgd"]
    by = {(s["dataset"], s["model"], float(s["epsilon"]), s["algorithm"], s["seed"]): s for s in dp}
    cells = sorted({k[:3] for k in by}, key=lambda c: (c[0], c[1], -c[2]))
    rows = []
    for cell in cells:
        base = {k[4]: v for k, v in by.items() if k[:4] == (*cell, "dpsgd")}
        for rule in RULE_ORDER:
            arm = {k[4]: v for k, v in by.items() if k[:4] == (*cell, rule)}
            seeds = sorted(set(base) & set(arm))
            if not seeds:
                continue
            acc_b = np.mean([base[s]["accuracy"]["mean"] for s in seeds])
            acc_r = np.mean([arm[s]["accuracy"]["mean"] for s in seeds])
            row = {"dataset": cell[0], "model": cell[1], "epsilon": cell[2], "rule": rule, "seeds": len(seeds),
                   "accuracy_dpsgd": float(acc_b), "accuracy_rule": float(acc_r),
                   "degenerate_dpsgd": any(degenerate(base[s]["accuracy"]) for s in seeds),
                   "degenerate_rule": any(degenerate(arm[s]["accuracy"]) for s in seeds),
                   "clipped_dpsgd": _clipped(base, seeds), "clipped_rule": _clipped(arm, seeds)}
            for est, attack in ESTIMATORS.items():
                a = np.array([arm[s]["attacks"][attack]["delta_pp"] for s in seeds])
                b = np.array([base[s]["attacks"][attack]["delta_pp"] for s in seeds])
                r = paired_seed_comparison(a, b, alpha=alpha)
                d = a - b
                p_t = float(stats.ttest_1samp(d, 0.0).pvalue) if len(d) >= 2 and d.std() > 0 else None
                row.update({f"delta_dpsgd_{est}": float(b.mean()), f"delta_rule_{est}": float(a.mean()),
                            f"diff_{est}": r["mean_diff"], f"sd_{est}": r["sd"], f"p_t_{est}": p_t,
                            f"p_sign_flip_{est}": r["p_sign_flip"], f"mde_{est}": _mde(r["sd"], len(seeds), alpha)})
            rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    k = len(df)
    for est in ESTIMATORS:
        df[f"p_holm_{est}"] = holm(df[f"p_t_{est}"].astype(float).to_numpy())
        lo, hi = [], []
        for _, r in df.iterrows():
            n, sd = r["seeds"], r[f"sd_{est}"]
            if n < 2 or sd is None or not np.isfinite(sd):
                lo.append(np.nan)
                hi.append(np.nan)
                continue
            h = stats.t.ppf(1 - alpha / (2 * k), n - 1) * sd / np.sqrt(n)
            lo.append(r[f"diff_{est}"] - h)
            hi.append(r[f"diff_{est}"] + h)
        df[f"lo_bonf_{est}"], df[f"hi_bonf_{est}"] = lo, hi
        df[f"category_{est}"] = [_category(p, lo_, hi_, alpha) for p, lo_, hi_ in
                                 zip(df[f"p_holm_{est}"], df[f"lo_bonf_{est}"], df[f"hi_bonf_{est}"])]
    df["like_for_like"] = (~df.degenerate_dpsgd & ~df.degenerate_rule
                           & ((df.accuracy_rule - df.accuracy_dpsgd).abs() * 100 <= LIKE_FOR_LIKE_PP))
    df["verdict"] = [_verdict(r) for _, r in df.iterrows()]
    df["category"] = [r.category_cross_fit if r.category_cross_fit == r.category_in_sample else "depends"
                      for _, r in df.iterrows()]
    df["bonferroni_level"] = 1 - alpha / k
    return df


def _clipped(runs: dict, seeds: list) -> dict | None:
    """Per group: the mean over seeds of the fraction of per-sample gradients clipped."""
    got = [runs[s].get("clipping") for s in seeds]
    if not got or any(g is None for g in got):
        return None
    return {name: float(np.mean([g[name]["clipped_fraction"] or 0.0 for g in got])) for name in got[0]}


def _verdict(r: pd.Series) -> str:
    if not r.like_for_like:
        return "not a like-for-like test"
    if r.seeds < MIN_SEEDS:
        return "too few seeds"
    if r.category_cross_fit != r.category_in_sample:
        return "depends on the estimator"
    return {"lowers": "reproduced", "raises": "contradicted", "unchanged": "not detected"}[r.category_cross_fit]


def _n(k: int, noun: str) -> str:
    return f"{k} {noun}" + ("" if k == 1 else "s")


def rule_sentences(df: pd.DataFrame, labels: dict[str, str]) -> list[str]:
    """One sentence per rule: of its cells with a verdict, how many lower, raise or leave Δ unchanged under both
    estimators, how many depend on the estimator, and how many are not like-for-like tests."""
    out = []
    for rule in RULE_ORDER:
        g = df[df.rule == rule]
        if g.empty:
            continue
        v = g.verdict.value_counts()
        tested = int(len(g) - v.get("not a like-for-like test", 0) - v.get("too few seeds", 0))
        out.append(f"{labels.get(rule, rule)}: of {_n(len(g), 'cell')}, {tested} "
                   f"{'is a like-for-like test' if tested == 1 else 'are like-for-like tests'} with at least "
                   f"{MIN_SEEDS} seeds; it lowers Δ in {v.get('reproduced', 0)}, raises it in "
                   f"{v.get('contradicted', 0)}, leaves it unchanged in {v.get('not detected', 0)} and "
                   f"{v.get('depends on the estimator', 0)} depend on the estimator"
                   + (f"; {v.get('not a like-for-like test', 0)} not like-for-like" if v.get(
                       "not a like-for-like test", 0) else "")
                   + (f"; {v.get('too few seeds', 0)} with too few seeds so far" if v.get("too few seeds", 0)
                      else "") + ".")
    return out
