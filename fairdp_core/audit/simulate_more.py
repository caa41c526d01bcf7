"""The further coverage studies beside :mod:`fairdp_core.audit.simulate`'s: the levelling contrast, the low-FPR view,
and Δ under skewed per-record leaks; each with its page under docs/ (:func:`write_extra_coverage`)."""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from .inference import cross_fit_contributions, group_inference
from .simulate import SIZES, SimModel, _first_last, _leaks_for, _md_table, draw_records, simulate_audit, true_gpr

__all__ = ["leveling_coverage_study", "lowfpr_coverage_study", "skew_stress_study", "write_extra_coverage"]


LEVELING_SIZES = {"2:1": (400, 200), "5:1": (500, 100), "10 groups": (60,) * 10}


def leveling_coverage_study(n_studies: int = 1000, *, sizes=None, two_r=(16, 100), gaps=(0.0, 0.5),
                            alpha: float = 0.05, model: SimModel = SimModel(), seed: int = 3, truth_banks: int = 1000,
                            truth_records: int = 200, progress: bool = True) -> pd.DataFrame:
    """Coverage of the leveling interval (:func:`~fairdp_core.audit.stats.leveling_split`) against the records-only
    bootstrap it replaced. Each study: one set of audit records (μ_i) and one design (membership) shared by two
    banks a and b, trained independently (their own model effects and noise); under b, group 0 leaks (1 + gap)×
    as much. The truth per group is E GPR_k(b) − E GPR_k(a) (0 for every group when gap = 0: two identical
    algorithms). Also: how often the riskiest group under a (picked on the other half of the records) shows a
    significant change between two identical algorithms (should be ≤ alpha), and its mean change picked on the
    same records (regression to the mean) and on the other half."""
    from tqdm.auto import tqdm

    from .stats import gpr, leveling_split, paired_group_difference

    sizes = sizes or LEVELING_SIZES
    rows = []
    for two, (size_name, sz), gap in tqdm(list(itertools.product(two_r, sizes.items(), gaps)),
                                          desc="leveling cells", disable=not progress):
        R, K = two // 2, len(sz)
        leak_a = np.full(K, model.base_leak)
        leak_b = leak_a.copy()
        leak_b[0] *= 1 + gap
        t = true_gpr(np.unique(np.r_[leak_a, leak_b]), R, model=model, n_banks=truth_banks,
                     n_records=truth_records, seed=seed + 1)
        truth = np.zeros(K)
        if gap:
            truth[0] = t[1] - t[0]
        rng = np.random.default_rng([seed, two, K, int(round(gap * 100))])
        hit_new, hit_rec = np.zeros(K), np.zeros(K)
        sig_risky, same_pick, split_pick = 0, [], []
        for _ in range(n_studies):
            mu_a = draw_records(rng, leak_a, sz, model)
            g = np.repeat(np.arange(K), sz)
            mu_b = mu_a * (leak_b / leak_a)[g]
            s_a, mem, _ = simulate_audit(rng, leak_a, sz, R, model, mu=mu_a)
            s_b, _, _ = simulate_audit(rng, leak_b, sz, R, model, mu=mu_b, mem=mem)
            c_a, c_b = cross_fit_contributions(s_a, mem), cross_fit_contributions(s_b, mem)
            lv = leveling_split(c_a, c_b, g, K, rng=np.random.default_rng(rng.integers(2 ** 32)), alpha=alpha)
            tr = truth[lv.group.to_numpy()]
            hit_new[lv.group.to_numpy()] += ((lv.lo <= tr) & (tr <= lv.hi)).to_numpy()
            # the records-only bootstrap on the same half of the records
            half = np.zeros(len(g), bool)
            half_rng = np.random.default_rng(rng.integers(2 ** 32))
            for k in range(K):
                idx = half_rng.permutation(np.flatnonzero(g == k))
                half[idx[len(idx) // 2:]] = True
            rec = paired_group_difference(c_a.sum(0)[half], c_b.sum(0)[half], g[half], K, rng=half_rng, n_boot=400,
                                          level=1 - alpha)
            tr = truth[rec.group.to_numpy()]
            hit_rec[rec.group.to_numpy()] += ((rec.lo <= tr) & (tr <= rec.hi)).to_numpy()
            if gap == 0 and (lv.role == "riskiest").any():
                risky = lv[lv.role == "riskiest"].iloc[0]
                sig_risky += int(risky.hi < 0 or risky.lo > 0)
                split_pick.append(risky.change)
                d = c_b.sum(0) - c_a.sum(0)
                k_same = int(np.nanargmax(gpr(c_a.sum(0), g, K)))
                same_pick.append(float(d[g == k_same].mean()))
        rows.append({"two_R": two, "sizes": size_name, "gap": gap, "n_studies": n_studies,
                     "true_change_group0_pp": 100 * truth[0],
                     "cover_models_and_records": float(hit_new.min() / n_studies),
                     "cover_records_only": float(hit_rec.min() / n_studies),
                     "identical_riskiest_significant": sig_risky / max(len(split_pick), 1) if gap == 0
                     else float("nan"),
                     "identical_riskiest_change_same_records_pp": 100 * float(np.mean(same_pick)) if gap == 0
                     else float("nan"),
                     "identical_riskiest_change_other_half_pp": 100 * float(np.mean(split_pick)) if gap == 0
                     else float("nan")})
    return pd.DataFrame(rows)


def _population_rates(rng: np.random.Generator, leak: float, n: int, R: int, model: SimModel, n_banks: int):
    """Sorted IN and OUT scores pooled over ``n_banks`` fresh banks of the cell: the population the low-FPR
    statistics estimate (new models and new records)."""
    ins, outs = [], []
    for _ in range(n_banks):
        s, mem, _ = simulate_audit(rng, np.array([leak]), (n,), R, model)
        ins.append(s[mem])
        outs.append(s[~mem])
    return np.sort(np.concatenate(ins)), np.sort(np.concatenate(outs))


def _rate_above(sorted_scores: np.ndarray, t: float, *, strict: bool) -> float:
    side = "right" if strict else "left"
    return 1.0 - np.searchsorted(sorted_scores, t, side=side) / len(sorted_scores)


def lowfpr_coverage_study(n_studies: int = 1000, *, n_records=(100, 500), two_r=(16, 100), leaks=(1.0, 3.0),
                          models=None, fpr: float = 0.01, delta: float = 1e-5, alpha: float = 0.05,
                          seed: int = 4, pop_banks: int = 200, progress: bool = True) -> pd.DataFrame:
    """Coverage of the low-FPR statistics the attack stage reports per group (one group's audit: ``n`` records,
    2R models): the TPR-at-1%-FPR interval (Clopper–Pearson on the effective number of IN cells,
    :func:`~fairdp_core.audit.stats.tpr_at_fpr_clustered`) and the empirical ε lower bound
    (:func:`~fairdp_core.audit.stats.epsilon_lower_bound`: threshold from fold 0, counts on fold 1, effective
    counts), each beside its naive version that treats the (model, record) cells as independent trials. The truth
    is the population's rate at the chosen threshold (new models and records, ``pop_banks`` banks), and for ε
    log((TPR − δ) / FPR) there: a 95% lower bound must lie below it in ≥ 95% of audits. ``models``: name ->
    :class:`SimModel` (default: the study's, and one with twice the model-level effects)."""
    from tqdm.auto import tqdm

    from .stats import clopper_pearson, epsilon_lb_from_counts, epsilon_lower_bound, pair_folds, tpr_at_fpr_clustered

    models = models or {"base": SimModel(), "strong model effects": SimModel(model_sd=0.6, inter_sd=0.4,
                                                                            noise_sd=0.4)}
    rows = []
    cells = list(itertools.product(models.items(), two_r, n_records, leaks))
    for (mname, model), two, n, leak in tqdm(cells, desc="low-FPR cells", disable=not progress):
        R = two // 2
        rng = np.random.default_rng([seed, two, n, int(leak * 100), len(mname)])
        pop_in, pop_out = _population_rates(rng, leak, n, R, model, max(pop_banks * 16 // two, 20))
        folds = pair_folds(two)
        hit_t = hit_tn = hit_e = hit_en = 0
        eps_vals, truths = [], []
        for _ in range(n_studies):
            s, mem, _ = simulate_audit(rng, np.array([leak]), (n,), R, model)
            r = tpr_at_fpr_clustered(s, mem, fpr, alpha=alpha)
            t_true = _rate_above(pop_in, r["threshold"], strict=True)
            hit_t += int(r["tpr_lo"] <= t_true <= r["tpr_hi"])
            k_in = int(round(r["tpr"] * r["n_in"]))
            lo, hi = clopper_pearson(k_in, r["n_in"], alpha)
            hit_tn += int(lo <= t_true <= hi)
            e = epsilon_lower_bound(s, mem, folds, delta=delta, alpha=alpha)
            tpr_p = _rate_above(pop_in, e["threshold"], strict=False)
            fpr_p = _rate_above(pop_out, e["threshold"], strict=False)
            e_true = math.log((tpr_p - delta) / fpr_p) if fpr_p > 0 and tpr_p > delta else float("inf")
            hit_e += int(e["eps_lb"] <= e_true)
            naive = epsilon_lb_from_counts(e["tp"], e["n_in"], e["fp"], e["n_out"], alpha=alpha, delta=delta)
            hit_en += int(naive <= e_true)
            eps_vals.append(e["eps_lb"])
            truths.append(e_true)
        rows.append({"effects": mname, "two_R": two, "n_records": n, "leak": leak, "n_studies": n_studies,
                     "cover_tpr_at_1pct": hit_t / n_studies, "cover_tpr_at_1pct_naive": hit_tn / n_studies,
                     "mean_eps_lb": float(np.mean(eps_vals)),
                     "median_eps_truth": float(np.median(np.minimum(truths, 1e9))),
                     "cover_eps_lb": hit_e / n_studies, "cover_eps_lb_naive": hit_en / n_studies})
    return pd.DataFrame(rows)


def skew_stress_study(n_studies: int = 500, *, record_sds=(1.0, 1.5), sizes=None, deltas_pp=(0.0, 0.5),
                      two_r=(16, 100), alpha: float = 0.05, seed: int = 5, truth_banks: int = 1000,
                      truth_records: int = 200, progress: bool = True) -> pd.DataFrame:
    """The coverage study's GPR, contrast and Δ intervals when records leak far more unequally than in the main
    table (record log-sd 1.0 and 1.5 against 0.5: at 1.5 the top 1% of records carry about a fifth of a group's
    leakage), the regime in which a t interval of a small group's mean can undercover."""
    from tqdm.auto import tqdm

    sizes = sizes or SIZES
    rows = []
    cells = list(itertools.product(record_sds, two_r, sizes.items(), deltas_pp))
    slopes: dict[tuple, float] = {}
    for rsd, two, (size_name, sz), dpp in tqdm(cells, desc="skew cells", disable=not progress):
        model = SimModel(record_sd=rsd)
        R, K = two // 2, len(sz)
        if (rsd, R) not in slopes:
            t = true_gpr(np.array([model.base_leak, model.base_leak + 0.05]), R, model=model, n_banks=20,
                         n_records=500, seed=seed + 7)
            slopes[(rsd, R)] = (t[1] - t[0]) / 0.05
        leaks = _leaks_for(dpp, K, R, model, slopes[(rsd, R)])
        uniq, inv = np.unique(leaks, return_inverse=True)
        truth = true_gpr(uniq, R, model=model, n_banks=truth_banks, n_records=truth_records, seed=seed + 1)[inv]
        rng = np.random.default_rng([seed, two, K, int(round(dpp * 1000)), int(rsd * 10)])
        hit_g = np.zeros(K)
        hit_c = hit_d = 0
        for _ in range(n_studies):
            s, mem, g = simulate_audit(rng, leaks, sz, R, model)
            res = group_inference(cross_fit_contributions(s, mem), g, K, alpha=alpha)
            hit_g += (res["gpr_lo"] <= truth) & (truth <= res["gpr_hi"])
            r01 = _first_last(res, K)
            hit_c += int(r01["lo"] <= truth[0] - truth[K - 1] <= r01["hi"])
            hit_d += int(res["delta_lo"] <= 100 * (truth.max() - truth.min()) <= res["delta_hi"])
        worst = int(np.argmin(hit_g))
        rows.append({"record_log_sd": rsd, "two_R": two, "sizes": size_name, "delta_target_pp": dpp,
                     "n_studies": n_studies, "cover_gpr": float(hit_g.min() / n_studies),
                     "worst_group_records": int(sz[worst]),
                     "cover_contrast": hit_c / n_studies if K == 2 else float("nan"),
                     "cover_delta_simultaneous": hit_d / n_studies})
    return pd.DataFrame(rows)


EXTRA_NOTES = {
    "leveling": (
        "Coverage of the leveling interval (`fairdp coverage --leveling`)",
        "Two banks per study share the audit records and the design and are trained independently; under b, group "
        "0 leaks (1 + gap)× as much (gap 0: two identical algorithms). cover_models_and_records: the interval the "
        "reports use (stats.leveling_split: crossed records × model pairs on c_b − c_a, t), the worst group's; "
        "cover_records_only: the percentile bootstrap over records that it replaced (conditional on the two banks). "
        "identical_riskiest_significant: how often the riskiest group under a, picked on the other half of the "
        "records, shows a significant change between identical algorithms (nominal ≤ 0.05); the two mean changes "
        "show regression to the mean when the group is picked on the records that measure it. Monte Carlo SE of a "
        "coverage near 0.95: 0.007 at 1,000 studies."),
    "lowfpr": (
        "Coverage of the low-FPR statistics: TPR at 1% FPR and the empirical ε lower bound (`fairdp coverage "
        "--lowfpr`)",
        "One group's audit (n records, 2R models) per study, scored as the score model of coverage.md (φ = the "
        "score). The truth is the population's rate at the threshold the audit chose (fresh models and records), "
        "and for ε, log((TPR − δ)/FPR) there, δ = 1e-5; a valid 95% lower bound lies below it in ≥ 95% of audits. "
        "*_naive: Clopper–Pearson on the raw (model, record) cells, as if independent trials; the reported versions "
        "use the effective numbers of cells (stats.effective_n: models × records crossed). 'strong model effects' "
        "doubles every model-level SD (u 0.6, γ 0.4, log σ 0.4)."),
    "skew": (
        "Coverage under heavy record skew (`fairdp coverage --skew`)",
        "The intervals of coverage.md when records leak far more unequally than there (record log-sd 1.0 and 1.5, "
        "against 0.5): at 1.5 a few records carry much of a group's leakage. cover_gpr is the worst group's, "
        "worst_group_records its size."),
}


def write_extra_coverage(kind: str, df: pd.DataFrame, out: str | os.PathLike, *, summary: str = "") -> Path:
    """<kind>_coverage.csv and .md (atomically) in ``out``: kind is leveling, lowfpr or skew."""
    from ..atomic import write_text

    title, note = EXTRA_NOTES[kind]
    out = Path(out)
    write_text(out / f"{kind}_coverage.csv", df.to_csv(index=False))
    cols = [c for c in df.columns if c != "n_studies"]
    write_text(out / f"{kind}_coverage.md", f"# {title}\n\n{df['n_studies'].iloc[0]} simulated audits per cell. "
               f"{note}\n\n" + (summary + "\n\n" if summary else "") + _md_table(df, cols) + "\n")
    return out
