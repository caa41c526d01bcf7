"""Tables and verdicts of the synthetic-data report (pure pandas/scipy, no I/O): utility means with t intervals over
seeds, and the three claims of the synthetic-data route (docs/study.md, 'Synthetic data') as verdicts that state
their estimate and interval."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["METHOD_LABELS", "audit_tables", "claim_verdicts", "t_interval", "utility_summary", "verdict_counts"]

# the labels the report prints; SGD on the real pool and DP-SGD keep the study's names (and colours)
METHOD_LABELS = {"real": "SGD", "dpsgd": "DP-SGD", "dpdsyn": "DPDSyn", "dpdsyn_nonprivate": "DPDSyn (no noise)",
                 "mst": "MST", "dpcgan": "DP-CGAN", "patectgan": "PATE-CTGAN (nominal ε)",
                 "dpctgan": "DP-CTGAN (nominal ε)"}
# the baselines the claims are tested against: DP at the stated (ε, δ). smartnoise's PATE-CTGAN and DP-CTGAN are not
# (fairdp_core/synth/dpgan.py, "Why not smartnoise's GANs"), so they never enter a verdict
BASELINES = ("mst", "dpcgan")


def t_interval(values, alpha: float = 0.05) -> tuple[float, float | None, float | None]:
    """(mean, lo, hi) of the values with a t interval over them (seeds); lo/hi None with fewer than two."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=np.float64)
    if len(v) == 0:
        return float("nan"), None, None
    if len(v) < 2:
        return float(v.mean()), None, None
    h = stats.t.ppf(1 - alpha / 2, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
    return float(v.mean()), float(v.mean() - h), float(v.mean() + h)


def utility_summary(util: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Per dataset, method, ε and group: seeds, accuracy / AUC / F1 means (%) with t intervals over seeds."""
    rows = []
    for (ds, m, e, g), sub in util.groupby(["dataset", "method", "epsilon", "group"], dropna=False, sort=False):
        row = {"dataset": ds, "method": m, "label": METHOD_LABELS.get(m, m), "epsilon": e, "group": g,
               "seeds": sub["seed"].nunique()}
        for k in ("accuracy", "auc", "f1"):
            mean, lo, hi = t_interval(100 * sub[k].astype(float), alpha)
            row.update({f"{k}_pct": mean, f"{k}_lo": lo, f"{k}_hi": hi})
        rows.append(row)
    return pd.DataFrame(rows)


def _diff(util: pd.DataFrame, ds: str, a: str, b: str, eps: float, alpha: float):
    """Mean accuracy difference a − b (pp) at ε with a Welch t interval over seeds (None with < 2 seeds each)."""
    sel = util[(util.dataset == ds) & (util.group == "all") & (util.epsilon == eps)]
    xa, xb = 100 * sel[sel.method == a]["accuracy"].to_numpy(float), 100 * sel[sel.method == b]["accuracy"].to_numpy(float)
    if len(xa) == 0 or len(xb) == 0:
        return None
    d = float(xa.mean() - xb.mean())
    if len(xa) < 2 or len(xb) < 2:
        return d, None, None, len(xa), len(xb)
    va, vb = xa.var(ddof=1) / len(xa), xb.var(ddof=1) / len(xb)
    se = np.sqrt(va + vb)
    if se == 0:
        return d, d, d, len(xa), len(xb)
    df = (va + vb) ** 2 / (va ** 2 / (len(xa) - 1) + vb ** 2 / (len(xb) - 1))
    h = stats.t.ppf(1 - alpha / 2, df) * se
    return d, d - h, d + h, len(xa), len(xb)


def _verdict(lo, hi, *, margin: float = 0.0) -> str:
    if lo is None:
        return "one seed: direction only, no interval"
    if lo > margin:
        return "supported"
    if hi < margin:
        return "contradicted"
    return "inconclusive"


def claim_verdicts(util: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """The synthetic-data route's claims per dataset and ε, each an accuracy difference (pp) with its interval and a verdict:

    1. DPDSyn beats each marginal / GAN baseline at the same ε (difference > 0);
    2. DPDSyn approaches DP-SGD: within 2 pp of its accuracy (difference > −2 pp), the claim being clearest at ε > 1;
    3. the advantage over the baselines fades at ε < 0.1: the best-baseline difference at the smallest ε against
       at the largest (reported as both differences; "supported" when the small-ε one is below the large-ε one
       with non-overlapping intervals).

    Claims 1 and 2: Welch t intervals over seeds, Bonferroni-adjusted over each claim's family of comparisons."""
    # many comparisons, few seeds: each claim's intervals are Bonferroni-simultaneous over its family (every dataset,
    # ε and baseline it is tested on), so "supported" holds for the family at level alpha, not for one cell
    n1 = n2 = 0
    for ds in util.dataset.unique():
        present = set(util[util.dataset == ds].method)
        n_eps = util[(util.dataset == ds) & util.epsilon.notna()].epsilon.nunique()
        n1 += n_eps * sum(b in present for b in BASELINES)
        n2 += n_eps * ("dpsgd" in present)
    a1, a2 = alpha / max(n1, 1), alpha / max(n2, 1)
    rows = []
    for ds in util.dataset.unique():
        eps_all = sorted(util[(util.dataset == ds) & util.epsilon.notna()].epsilon.unique())
        present = set(util[util.dataset == ds].method)
        for e in eps_all:
            for b in BASELINES:
                if b in present:
                    r = _diff(util, ds, "dpdsyn", b, e, a1)
                    if r:
                        rows.append({"claim": f"1. DPDSyn beats {METHOD_LABELS[b]}", "dataset": ds, "epsilon": e,
                                     "diff_pp": r[0], "lo": r[1], "hi": r[2], "seeds": min(r[3], r[4]),
                                     "verdict": _verdict(r[1], r[2])})
            if "dpsgd" in present:
                r = _diff(util, ds, "dpdsyn", "dpsgd", e, a2)
                if r:
                    v = _verdict(r[1], r[2], margin=-2.0)
                    v = {"supported": "within 2 pp (supported)", "contradicted": "more than 2 pp below (contradicted)"
                         }.get(v, v)
                    rows.append({"claim": "2. DPDSyn within 2 pp of DP-SGD", "dataset": ds, "epsilon": e,
                                 "diff_pp": r[0], "lo": r[1], "hi": r[2], "seeds": min(r[3], r[4]), "verdict": v})
        base = [b for b in BASELINES if b in present]
        if len(eps_all) >= 2 and base and min(eps_all) < 0.1:
            lo_e, hi_e = min(eps_all), max(eps_all)
            small = [r for b in base if (r := _diff(util, ds, "dpdsyn", b, lo_e, alpha))]
            large = [r for b in base if (r := _diff(util, ds, "dpdsyn", b, hi_e, alpha))]
            if not small or not large:
                continue
            s = max(small, key=lambda r: -r[0])  # against the strongest baseline (the smallest advantage)
            lg = max(large, key=lambda r: -r[0])
            fades = (s[2] is not None and lg[1] is not None and s[2] < lg[1])
            grows = (s[1] is not None and lg[2] is not None and s[1] > lg[2])
            rows.append({"claim": f"3. advantage at ε = {lo_e:g} vs ε = {hi_e:g} (strongest baseline)", "dataset": ds,
                         "epsilon": lo_e, "diff_pp": s[0], "lo": s[1], "hi": s[2], "seeds": min(s[3], s[4]),
                         "verdict": ("supported" if fades else "contradicted" if grows else "inconclusive")
                         + f" (at ε = {hi_e:g}: {lg[0]:+.1f} pp)"})
    return pd.DataFrame(rows)


def audit_tables(audits: dict[str, dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The synth_audit summaries (dataset → summary.json) as two tables: per arm and ε (GPR per group, Δ and the
    two-group contrast with intervals, MDE, accuracy, ε spent), and the paired DPDSyn − DP-SGD change per ε (per
    group GPR change and the contrast change, each with its paired interval, p and MDE)."""
    rows, paired = [], []
    for d, s in audits.items():
        names = s["group_names"]
        for key, st in s["arms"].items():
            arm, e = key.split("@")
            c = st.get("contrast") or {}
            rows.append({"dataset": d, "arm": METHOD_LABELS[arm], "epsilon": float(e), "2R": s["n_models_per_arm"],
                         "m": s["m"], "accuracy_pct": 100 * st["accuracy_mean"],
                         **{f"GPR {g} (pp)": v for g, v in zip(names, st["gpr_pp"])},
                         "delta_pp": st["delta_pp"], "delta_lo": st["delta_lo"], "delta_hi": st["delta_hi"],
                         "contrast_pp": c.get("diff_pp"), "contrast_lo": c.get("lo_pp"), "contrast_hi": c.get("hi_pp"),
                         "mde80_pp": c.get("mde80_pp"), "eps_spent": st["epsilon_spent"]})
        for key, pr in s.get("paired", {}).items():
            e = float(key.split("@")[1])
            row = {"dataset": d, "epsilon": e, "2R": s["n_models_per_arm"], "m": s["m"]}
            for g, v, lo, hi in zip(names, pr["gpr_diff_pp"], pr["gpr_diff_lo_pp"], pr["gpr_diff_hi_pp"]):
                row.update({f"ΔGPR {g} (pp)": v, f"{g} low": lo, f"{g} high": hi})
            c = pr.get("contrast_change") or {}
            row.update({"contrast change (pp)": c.get("diff_pp"), "low": c.get("lo_pp"), "high": c.get("hi_pp"),
                        "p": c.get("p"), "MDE80 (pp)": c.get("mde80_pp")})
            paired.append(row)
    return pd.DataFrame(rows), pd.DataFrame(paired)


def verdict_counts(cv: pd.DataFrame) -> str:
    """The verdicts of :func:`claim_verdicts` counted per claim, as one line: "claim 1: inconclusive: 15; …"."""
    counts = cv.assign(kind=cv.claim.str[:2]).groupby("kind")["verdict"].agg(lambda v: "; ".join(
        f"{k}: {n}" for k, n in v.str.split(" \\(").str[0].value_counts().items()))
    return " · ".join(f"claim {k.strip('. ')}: {v}" for k, v in counts.items())
