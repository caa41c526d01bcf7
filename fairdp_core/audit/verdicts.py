"""Verdicts on the paper's claims from the ``claims`` campaign's per-run summaries (docs/claims.md).

A *cell* is dataset × model × ε; a *row* is a cell and one DP-SGD-S rule, compared with DP-SGD over the seeds both
ran (same audit designs and sampling streams: paired). Per row and per estimator of Δ (the cross-fitted PA-ALOOA
and the paper's in-sample one): the mean paired difference Δ(rule) − Δ(DP-SGD) in pp and the paired t test. The
family is fixed in advance: every cell of the claims profile × the three rules (``family``, default: the rows
present), so that adding a cell never changes a finished cell's verdict for that reason. What decides is the
Bonferroni test over that family: the t interval at level 1 − α/k and p_Bonferroni = min(1, k·p); the Holm-adjusted
p is reported beside it (it rejects wherever Bonferroni does, sometimes more) but decides nothing, so that a
reader never sees a direction beside an interval that holds 0. The exact sign-flip p is kept, unadjusted.

A row's category per estimator: *lowers* or *raises* Δ where its Bonferroni interval excludes 0 on that side, else
*no change detected* (with the smallest change 80% power would detect at α/k). Its verdict:

- **not a like-for-like test** where either arm is degenerate (:func:`degenerate`) or the arms' mean test
  accuracies, or their mean balanced accuracies, differ by more than 2 pp: no reproduced/contradicted verdict;
- **too few seeds** below 6 paired seeds with a finite Δ;
- **depends on the estimator** where the two estimators' categories differ (the row says which found what);
- otherwise the shared category, read against the paper's claim (a lower Δ): **reproduced** (lowers),
  **contradicted** (raises), **not detected** (no change detected: not evidence of no effect), except that a cell
  with no change detected where DP-SGD's own Δ (cross-fitted) is within its null floor, or below the smallest change
  its seeds could detect, reads **no disparity to remove**: there was nothing for a rule to lower there, and the
  headline counts it apart. ``detects_18pct`` / ``detects_37pct``: whether the seeds could detect a paper-sized
  reduction (the paper's quoted effects are 18-37% of DP-SGD's Δ) at 80% power.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from .stats import holm, paired_seed_comparison, seeds_for_power

__all__ = ["ESTIMATORS", "LIKE_FOR_LIKE_PP", "MIN_SEEDS", "PAPER_QUOTED", "POWER_RULES", "RULE_ORDER", "claims_table",
           "degenerate", "is_degenerate", "load_summaries", "no_disparity", "seeds_needed"]

ESTIMATORS = {"cross_fit": "alooa_cross_fit", "in_sample": "alooa_in_sample"}
LIKE_FOR_LIKE_PP = 2.0
MIN_SEEDS = 6
RULE_ORDER = ("dpsgd_s_paper", "dpsgd_s", "dpsgd_s_paper_code")
# The rule whose spread sets a cell's seed count in the claims campaign: the one that decides the paper's claim
POWER_RULES = ("dpsgd_s_paper",)
CATEGORY_WORDS = {"lowers": "lowers Δ", "raises": "raises Δ", "unchanged": "no change detected"}
# The paper's quoted Δ (pp, DP-SGD → DP-SGD-S, its in-sample estimator, mean over 5 seeds) and DP-SGD accuracy, at
# ε = 10; every other cell of its Tables 4-6 is summarised in its text as "DP-SGD-S lowers Δ".
PAPER_QUOTED = {
    ("adult", "lr", 10.0): {"dpsgd": 0.27, "dpsgd_s": 0.17},
    ("law_paper", "lr", 10.0): {"dpsgd": 0.59, "dpsgd_s": 0.41, "dpsgd_accuracy": 0.8974, "dpsgd_s_accuracy": 0.8956},
    ("mnist", "cnn", 10.0): {"dpsgd": 3.54, "dpsgd_s": 2.91},
}


def is_degenerate(top_share: float, balanced: float | None = None, n_classes: int = 2, *,
                  accuracy: float | None = None, majority: float | None = None) -> bool:
    """The one definition of a model that has not learned the task: ≥ 99% of its test predictions in one class
    (``top_share``), or balanced accuracy below chance + 0.02 (1/K + 0.02 for K = ``n_classes`` classes). Where the
    balanced accuracy is unknown (None or NaN), test accuracy no better than the majority-class rate + 0.005."""
    if top_share is not None and np.isfinite(top_share) and top_share >= 0.99:
        return True
    if balanced is not None and np.isfinite(balanced):
        return bool(balanced < 1 / n_classes + 0.02)
    if accuracy is not None and majority is not None and np.isfinite(accuracy) and np.isfinite(majority):
        return bool(accuracy <= majority + 0.005)
    return False


def degenerate(accuracy: dict, n_classes: int = 2) -> bool:
    """:func:`is_degenerate` of a train stage's accuracy block; a block without ``largest_predicted_class_share``
    or ``balanced`` is an error, not "not degenerate"."""
    missing = [k for k in ("largest_predicted_class_share", "balanced") if accuracy.get(k) is None]
    if missing:
        raise ValueError(f"accuracy block without {', '.join(missing)}: cannot tell whether the model is degenerate")
    return is_degenerate(accuracy["largest_predicted_class_share"], accuracy["balanced"], n_classes)


def load_summaries(directory: str | Path, *, numerics: int | None = None, files: list[Path] | None = None
                   ) -> list[dict]:
    """Every run summary in ``directory`` (or the given ``files``) of one numerics version per arm and cell
    (``numerics``, default the newest present for that dataset, model, ε and algorithm)."""
    paths = files if files is not None else sorted(Path(directory).glob("*.json"))
    return one_version([json.loads(Path(p).read_text()) for p in paths], numerics)


def one_version(summaries: list[dict], numerics: int | None = None) -> list[dict]:
    """The summaries of one numerics version per arm and cell (dataset, model, ε, algorithm): ``numerics``, or the
    newest present there. A rule whose arithmetic changed (Rule.numerics) is pooled at one version, beside arms
    whose bits did not change."""
    def key(s: dict) -> tuple:
        return s["dataset"], s["model"], s.get("epsilon"), s["algorithm"]

    newest: dict[tuple, int] = {}
    for s in summaries:
        newest[key(s)] = max(newest.get(key(s), s["numerics"]), s["numerics"])
    return [s for s in summaries if s["numerics"] == (numerics if numerics is not None else newest[key(s)])]


def _category(lo: float, hi: float) -> str:
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "unchanged"
    return "lowers" if hi < 0 else "raises" if lo > 0 else "unchanged"


def _mde(sd: float | None, n: int, alpha: float, power: float = 0.8) -> float | None:
    """The smallest |change| a paired two-sided t test at ``alpha`` detects with ``power`` from ``n`` seeds."""
    if sd is None or n < 2 or not np.isfinite(sd):
        return None
    return float((stats.t.ppf(1 - alpha / 2, n - 1) + stats.t.ppf(power, n - 1)) * sd / np.sqrt(n))


def _delta(s: dict, attack: str) -> float:
    v = s["attacks"][attack]["delta_pp"]
    return float("nan") if v is None else float(v)


def _lr(runs: dict, seeds: list) -> float:
    """The arm's learning rate over ``seeds`` (NaN when the summaries hold no plan, or it varies)."""
    lrs = {((runs[s].get("plan") or {}).get("train") or {}).get("spec", {}).get("lr") for s in seeds}
    return float(lrs.pop()) if len(lrs) == 1 and None not in lrs else float("nan")


def claims_table(summaries: list[dict], *, alpha: float = 0.05, family: int | None = None) -> pd.DataFrame:
    """One row per cell × DP-SGD-S rule: accuracies, Δ of both arms, the paired differences under both estimators
    with the Bonferroni interval and p over a family of ``family`` rows (default: the rows present), the Holm p, the
    per-estimator categories and the verdict (module docstring). A seed whose Δ is missing in either arm is left out
    of that estimator's pairs (``n_<estimator>`` says how many were used)."""
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
            n_classes = len(base[seeds[0]].get("class_names") or [0, 1])
            row = {"dataset": cell[0], "model": cell[1], "epsilon": cell[2], "rule": rule, "seeds": len(seeds),
                   "accuracy_dpsgd": float(np.mean([base[s]["accuracy"]["mean"] for s in seeds])),
                   "accuracy_rule": float(np.mean([arm[s]["accuracy"]["mean"] for s in seeds])),
                   "balanced_dpsgd": float(np.mean([base[s]["accuracy"]["balanced"] for s in seeds])),
                   "balanced_rule": float(np.mean([arm[s]["accuracy"]["balanced"] for s in seeds])),
                   "degenerate_dpsgd": any(degenerate(base[s]["accuracy"], n_classes) for s in seeds),
                   "degenerate_rule": any(degenerate(arm[s]["accuracy"], n_classes) for s in seeds),
                   "clipped_dpsgd": _clipped(base, seeds), "clipped_rule": _clipped(arm, seeds),
                   "lr_dpsgd": _lr(base, seeds), "lr_rule": _lr(arm, seeds)}
            for est, attack in ESTIMATORS.items():
                a = np.array([_delta(arm[s], attack) for s in seeds])
                b = np.array([_delta(base[s], attack) for s in seeds])
                ok = np.isfinite(a) & np.isfinite(b)
                a, b = a[ok], b[ok]
                d = a - b
                r = paired_seed_comparison(a, b, alpha=alpha) if len(d) else {"mean_diff": float("nan"), "sd": None,
                                                                              "p_sign_flip": None}
                sd = r["sd"]
                if len(d) < 2 or sd is None:
                    p_t = None
                elif sd == 0:  # every seed the same difference: p 0 unless that difference is 0
                    p_t = 1.0 if d[0] == 0 else 0.0
                else:
                    p_t = float(stats.ttest_1samp(d, 0.0).pvalue)
                floors = [base[s]["attacks"][attack].get("null_floor_pp") for s in seeds]
                floors = np.array([np.nan if f is None else f for f in floors], dtype=float)
                row[f"null_floor_dpsgd_{est}"] = float(np.nanmean(floors)) if np.isfinite(floors).any() else np.nan
                row.update({f"n_{est}": int(len(d)), f"delta_dpsgd_{est}": float(b.mean()) if len(b) else np.nan,
                            f"delta_rule_{est}": float(a.mean()) if len(a) else np.nan,
                            f"diff_{est}": r["mean_diff"], f"sd_{est}": sd, f"p_t_{est}": p_t,
                            f"p_sign_flip_{est}": r["p_sign_flip"]})
            rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    k = max(family or 0, len(df))
    for est in ESTIMATORS:
        p = df[f"p_t_{est}"].astype(float).to_numpy()
        df[f"p_bonf_{est}"] = np.minimum(1.0, k * p)
        # Holm over the family: the rows not yet run enter with p = 1 (they cannot be rejected)
        df[f"p_holm_{est}"] = holm(np.concatenate([p, np.ones(k - len(p))]))[:len(p)]
        lo, hi, mde = [], [], []
        for _, r in df.iterrows():
            n, sd = r[f"n_{est}"], r[f"sd_{est}"]
            if n < 2 or sd is None or not np.isfinite(sd):
                lo.append(np.nan)
                hi.append(np.nan)
                mde.append(None)
                continue
            h = stats.t.ppf(1 - alpha / (2 * k), n - 1) * sd / np.sqrt(n)
            lo.append(r[f"diff_{est}"] - h)
            hi.append(r[f"diff_{est}"] + h)
            mde.append(_mde(sd, n, alpha / k))
        df[f"lo_bonf_{est}"], df[f"hi_bonf_{est}"], df[f"mde_{est}"] = lo, hi, mde
        df[f"category_{est}"] = [_category(a, b) for a, b in zip(df[f"lo_bonf_{est}"], df[f"hi_bonf_{est}"])]
    df["mde"] = [max((m for m in (a, b) if m is not None), default=None)
                 for a, b in zip(df.mde_cross_fit, df.mde_in_sample)]
    for share in (18, 37):  # could the seeds detect a paper-sized reduction (18-37% of DP-SGD's Δ)?
        df[f"detects_{share}pct"] = [None if m is None or not np.isfinite(b) else bool(m <= share / 100 * b)
                                     for m, b in zip(df.mde, df.delta_dpsgd_cross_fit)]
    gap = 100 * np.maximum((df.accuracy_rule - df.accuracy_dpsgd).abs(), (df.balanced_rule - df.balanced_dpsgd).abs())
    df["like_for_like"] = ~df.degenerate_dpsgd & ~df.degenerate_rule & (gap <= LIKE_FOR_LIKE_PP + 1e-9)
    df["verdict"] = [_verdict(r) for _, r in df.iterrows()]
    df["category"] = [r.category_cross_fit if r.category_cross_fit == r.category_in_sample else "depends"
                      for _, r in df.iterrows()]
    df["family"] = k
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
    if min(r.n_cross_fit, r.n_in_sample) < MIN_SEEDS:
        return "too few seeds"
    if r.category_cross_fit != r.category_in_sample:
        return "depends on the estimator"
    if r.category_cross_fit == "unchanged" and no_disparity(r):
        return "no disparity to remove"
    return {"lowers": "reproduced", "raises": "contradicted", "unchanged": "not detected"}[r.category_cross_fit]


def no_disparity(r: pd.Series) -> bool:
    """DP-SGD's Δ (cross-fitted) is within its null floor, or below the smallest change the seeds could detect."""
    base, floor, mde = r.delta_dpsgd_cross_fit, r.get("null_floor_dpsgd_cross_fit", np.nan), r.get("mde")
    return bool((np.isfinite(floor) and base <= floor) or (mde is not None and np.isfinite(mde) and mde > base))


def depends_detail(r: pd.Series) -> str:
    """What each estimator found, for a row whose estimators disagree."""
    return (f"cross-fitted: {CATEGORY_WORDS[r.category_cross_fit]}; in-sample: "
            f"{CATEGORY_WORDS[r.category_in_sample]}")


def _n(k: int, noun: str) -> str:
    return f"{k} {noun}" + ("" if k == 1 else "s")


def seeds_needed(summaries: list[dict], *, effect_share: float = 0.2, min_seeds: int = 6, max_seeds: int = 16,
                 rules: tuple[str, ...] = POWER_RULES) -> dict[str, object]:
    """The seeds a part needs, estimated blind to which arm is which (so that the re-estimation does not inflate
    the type I error of the paired test): per rule and estimator, the uncentred second moment of the per-seed
    differences Δ(rule) − Δ(DP-SGD), sqrt(mean d²), against ``effect_share`` × the mean Δ of both arms pooled; the
    seeds a paired t test needs for 80% power there (at α = 0.05), the largest over rules and estimators, capped."""
    by = {(s["algorithm"], s["seed"]): s for s in summaries}
    seeds = sorted({s for a, s in by if a == "dpsgd"})
    need, detail = min_seeds, {}
    for est, attack in ESTIMATORS.items():
        for rule in rules:
            paired = [s for s in seeds if (rule, s) in by]
            if len(paired) < 2:
                continue
            a = np.array([by[(rule, s)]["attacks"][attack]["delta_pp"] for s in paired], dtype=float)
            b = np.array([by[("dpsgd", s)]["attacks"][attack]["delta_pp"] for s in paired], dtype=float)
            ok = np.isfinite(a) & np.isfinite(b)
            if ok.sum() < 2:
                continue
            d = a[ok] - b[ok]
            sd = float(np.sqrt(np.mean(d ** 2)))
            target = effect_share * abs(float(np.mean((a[ok] + b[ok]) / 2)))
            if target <= 0:
                continue
            n = seeds_for_power(sd, target, max_seeds=max_seeds)
            detail[f"{rule}/{est}"] = {"sd_pp": sd, "target_pp": target, "seeds": n}
            need = max(need, max_seeds if n is None else n)
    return {"seeds": min(need, max_seeds), "detail": detail}
