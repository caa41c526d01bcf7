"""Coverage of the audit's intervals and level of its tests, by simulation with a known truth.

A simulated audit has the study's design (2R models in complementary pairs, each audit record IN for one model of
every pair) and score model

    score[j, i] = IN[j, i] · μ_i · (1 + u_j + γ[j, g(i)]) + σ_j · z[j, i],

with record heterogeneity μ_i = μ_{g(i)} · LogNormal (mean 1), a model-level leakage effect u_j, a model × group
interaction γ (a model that leaks more for one group), a model-level noise scale σ_j, and record noise z. So the
intervals face model-level random effects, not only record noise. The truth, GPR_k = the expected cross-fitted
advantage of a group-k record at this R, is computed by a separate Monte Carlo with common random numbers.

``fairdp coverage`` writes the committed table (``reports/coverage/``); the fast test suite reruns a small version.
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .attacks import cross_fit_advantage
from .inference import cross_fit_contributions, group_inference, studentized_permutation_pvalue
from .stats import pool_over_seeds

__all__ = ["SimModel", "attack_coverage_study", "coverage_study", "draw_records", "simulate_audit", "true_gpr",
           "write_attack_coverage", "write_coverage"]

SIZES = {"2:1": (400, 200), "5:1": (500, 100), "10 groups": (60,) * 10}
DELTAS_PP = (0.0, 0.1, 0.5, 2.0)
TWO_R = (16, 400)


@dataclass(frozen=True)
class SimModel:
    """The random effects of a simulated audit (standard deviations)."""

    base_leak: float = 0.5   # μ of the reference group (record signal / noise)
    record_sd: float = 0.5   # log-sd of a record's leakage around its group's
    model_sd: float = 0.3    # u_j
    inter_sd: float = 0.2    # γ[j, k]
    noise_sd: float = 0.2    # log-sd of σ_j


def draw_records(rng: np.random.Generator, leak: np.ndarray, sizes, model: SimModel = SimModel()) -> np.ndarray:
    """The audited records' leakage μ_i [m]: the group's μ times a mean-one log-normal record effect."""
    g = np.repeat(np.arange(len(sizes)), sizes)
    return np.asarray(leak, float)[g] * rng.lognormal(-model.record_sd ** 2 / 2, model.record_sd, len(g))


def simulate_audit(rng: np.random.Generator, leak: np.ndarray, sizes, R: int, model: SimModel = SimModel(),
                   mu: np.ndarray | None = None, mem: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scores [2R, m], membership [2R, m], group [m]) of one simulated audit; ``leak`` [K] the groups' μ; ``mu``
    the records' own μ_i when they are shared with other audits (default: drawn afresh); ``mem`` the membership
    when two banks share one design (default: drawn afresh)."""
    g = np.repeat(np.arange(len(sizes)), sizes)
    m, M = len(g), 2 * R
    if mu is None:
        mu = draw_records(rng, leak, sizes, model)
    if mem is None:
        half = rng.random((R, m)) < 0.5
        mem = np.empty((M, m), dtype=bool)
        mem[0::2], mem[1::2] = half, ~half
    u = rng.normal(0, model.model_sd, M)
    gam = rng.normal(0, model.inter_sd, (M, len(sizes)))
    sig = np.exp(rng.normal(0, model.noise_sd, M))
    scores = mem * mu[None, :] * (1 + u[:, None] + gam[:, g]) + sig[:, None] * rng.standard_normal((M, m))
    return scores, mem, g


def true_gpr(leaks: np.ndarray, R: int, *, model: SimModel = SimModel(), n_banks: int = 100, n_records: int = 1000,
             seed: int = 0) -> np.ndarray:
    """Expected cross-fitted advantage of a record with group leakage μ (each of ``leaks``) at this R: Monte Carlo
    over banks and records, with common random numbers across the μ values (their differences are precise)."""
    out = np.zeros(len(leaks))
    for b in range(n_banks):
        for i, mu in enumerate(leaks):
            rng = np.random.default_rng([seed, b])  # same draws for every μ
            s, mem, _ = simulate_audit(rng, np.array([mu]), (n_records,), R, model)
            out[i] += cross_fit_advantage(s, mem).mean()
    return out / n_banks


def _leaks_for(delta_pp: float, K: int, R: int, model: SimModel, slope: float) -> np.ndarray:
    """Group leakages spread linearly so that the true Δ is about ``delta_pp``; group 0 riskiest."""
    step = delta_pp / 100 / slope
    return model.base_leak + step * np.linspace(1, 0, K)


def _first_last(res: dict, K: int) -> dict:
    """The contrast GPR_0 − GPR_{K−1} of a :func:`group_inference` result (the cells put the gap there)."""
    return next(r for r in res["contrasts"] if r["k"] == 0 and r["l"] == K - 1)


def coverage_study(n_studies: int = 1000, *, sizes=None, deltas_pp=DELTAS_PP, two_r=TWO_R, alpha: float = 0.05,
                   n_perm: int = 200, seeds_per_mean: int = 5, model: SimModel = SimModel(), seed: int = 0,
                   shared_groups: int = 200,
                   truth_banks: int = 1000, truth_records: int = 200, progress: bool = True) -> pd.DataFrame:
    """One row per cell (sizes × true Δ × 2R): coverage of every interval, rejection rates of the tests.

    ``reject_permutation`` is the studentized permutation test over records (conditional on the bank);
    ``reject_wald_holm`` the crossed-variance test the reports use for "Δ > 0"."""
    from tqdm.auto import tqdm

    sizes = sizes or SIZES
    rows = []
    cells = list(itertools.product(two_r, sizes.items(), deltas_pp))
    bar = tqdm(cells, desc="coverage cells", disable=not progress)
    slopes: dict[int, float] = {}
    for two, (size_name, sz), dpp in bar:
        R = two // 2
        if R not in slopes:  # d E[advantage] / d μ near the base leakage, for placing the cells' true Δ
            t = true_gpr(np.array([model.base_leak, model.base_leak + 0.05]), R, model=model, n_banks=20,
                         n_records=500, seed=seed + 7)
            slopes[R] = (t[1] - t[0]) / 0.05
        K = len(sz)
        leaks = _leaks_for(dpp, K, R, model, slopes[R])
        uniq, inv = np.unique(leaks, return_inverse=True)
        # many small banks: the truth's Monte Carlo error is dominated by the model-level effects, not the records
        truth = true_gpr(uniq, R, model=model, n_banks=truth_banks, n_records=truth_records, seed=seed + 1)[inv]
        true_delta = 100 * (truth.max() - truth.min())
        rng = np.random.default_rng([seed, two, K, int(round(dpp * 1000)), sz[0]])
        hit_g = np.zeros(K)
        cov_c = cov_d = rej_perm = rej_wald = 0
        contrasts, widths, c_se, c_df = [], [], [], []
        for _ in range(n_studies):
            s, mem, g = simulate_audit(rng, leaks, sz, R, model)
            c = cross_fit_contributions(s, mem)
            res = group_inference(c, g, K, alpha=alpha)
            hit_g += (res["gpr_lo"] <= truth) & (truth <= res["gpr_hi"])
            cov_d += int(res["delta_lo"] <= true_delta <= res["delta_hi"])
            widths.append(res["delta_hi"] - res["delta_lo"])
            r01 = _first_last(res, K)
            d_true = truth[0] - truth[K - 1]
            contrasts.append(r01["diff"])
            c_se.append(r01["se"])
            c_df.append(r01["df"])
            if K == 2:
                cov_c += int(r01["lo"] <= d_true <= r01["hi"])  # Bonferroni over one pair: the plain interval
            rej_wald += int(res["p_delta_gt_0"] < alpha)
            p, _ = studentized_permutation_pvalue(c.sum(0), g, K, rng=rng, n_perm=n_perm)
            rej_perm += int(p < alpha)
        # over seeds: t interval of the mean of S independent studies' contrasts (group 0 − group K-1), over 5,000
        # random S-subsets of the studies (a subset's studies are distinct, so each interval is a real one)
        from scipy import stats as _st

        cs = np.asarray(contrasts)
        S = seeds_per_mean
        sub = np.argsort(rng.random((5000, len(cs))), axis=1)[:, :S]
        groups_of_s = cs[sub]
        h = _st.t.ppf(1 - alpha / 2, S - 1) * groups_of_s.std(1, ddof=1) / math.sqrt(S)
        mean = groups_of_s.mean(1)
        cov_seeds = float(np.mean((mean - h <= d_true) & (d_true <= mean + h)))
        # pooled over seeds as the reports do (pool_over_seeds): 2 and 5 seeds
        se_a, df_a = np.asarray(c_se), np.asarray(c_df)
        cov_pooled = {}
        for S2 in (2, 5):
            sub2 = np.argsort(rng.random((2000, len(cs))), axis=1)[:, :S2]
            hits = [(lambda r: r["lo"] <= d_true <= r["hi"])(pool_over_seeds(cs[ix], se_a[ix], df_a[ix], alpha=alpha))
                    for ix in sub2]
            cov_pooled[S2] = float(np.mean(hits))
        # seeds that audit the SAME records (audit.m: all): new models and halves per seed, records drawn once
        hits = []
        for _ in range(shared_groups):
            mu = draw_records(rng, leaks, sz, model)
            rs = []
            for _ in range(seeds_per_mean):
                s, mem, g = simulate_audit(rng, leaks, sz, R, model, mu=mu)
                rs.append(_first_last(group_inference(cross_fit_contributions(s, mem), g, K, alpha=alpha), K))
            pr = pool_over_seeds([r["diff"] for r in rs], [r["se"] for r in rs], [r["df"] for r in rs], alpha=alpha,
                                 v_rec=[r["v_rec"] for r in rs], v_cell=[r["v_cell"] for r in rs], shared=1.0)
            hits.append(pr["lo"] <= d_true <= pr["hi"])
        cov_pooled["shared"] = float(np.mean(hits)) if hits else float("nan")
        rows.append({"two_R": two, "sizes": size_name, "delta_target_pp": dpp, "delta_true_pp": true_delta,
                     "n_studies": n_studies, "cover_gpr": float(hit_g.min() / n_studies),  # the worst group
                     "cover_contrast": cov_c / n_studies if K == 2 else float("nan"),
                     "cover_delta_simultaneous": cov_d / n_studies,
                     "mean_delta_width_pp": float(np.mean(widths)),
                     "cover_mean_over_seeds": cov_seeds, "seeds_per_mean": S,
                     "cover_pooled_2_seeds": cov_pooled[2], "cover_pooled_5_seeds": cov_pooled[5],
                     "cover_pooled_5_seeds_shared_records": cov_pooled["shared"],
                     "reject_wald_holm": rej_wald / n_studies, "reject_permutation": rej_perm / n_studies})
        bar.set_postfix(cov=f"{cov_d / n_studies:.3f}")
    return pd.DataFrame(rows)


ATTACK_SIZES = {"2:1": (400, 200), "5:1": (500, 100), "5 groups": (200, 100, 100, 50, 50)}


def _attack_contributions(scores: np.ndarray, mem: np.ndarray, g: np.ndarray) -> dict[str, np.ndarray]:
    """[M, m] contributions of the thresholded attacks exactly as the attack stage builds them (φ = the score)."""
    from .attacks import ga_predictions, gba_predictions, lira_scores
    from .inference import prediction_contributions

    return {"ga": prediction_contributions(ga_predictions(scores, mem), mem),
            "gba": prediction_contributions(gba_predictions(scores, mem, g), mem),
            "lira_online": prediction_contributions(lira_scores(scores, mem, mode="online") >= 0, mem),
            "lira_offline": prediction_contributions(lira_scores(scores, mem, mode="offline") >= 0, mem)}


def attack_coverage_study(n_studies: int = 1000, *, n_truth: int = 1000, sizes=None, two_r=TWO_R,
                          gaps=(0.0, 0.5), alpha: float = 0.05, model: SimModel = SimModel(), seed: int = 1,
                          progress: bool = True) -> pd.DataFrame:
    """Coverage of the per-group GPR and first-vs-last contrast intervals of PA-GA, PA-GBA and LiRA (online,
    offline), whose thresholds or Gaussians are fitted on the audit itself. Their estimand is the expected
    advantage of the attack PROCEDURE at this design (its thresholds refitted on every audit), so the truth is the
    mean of the per-group estimates over ``n_truth`` independent audits of the same cell (its Monte Carlo error is
    about 1/√n_truth of an estimate's SD). ``gaps``: the first group's leakage is (1 + gap) × the others'."""
    from tqdm.auto import tqdm

    sizes = sizes or ATTACK_SIZES
    rows = []
    cells = list(itertools.product(two_r, sizes.items(), gaps))
    for two, (size_name, sz), gap in tqdm(cells, desc="attack coverage cells", disable=not progress):
        R, K = two // 2, len(sz)
        leaks = np.full(K, model.base_leak)
        leaks[0] *= 1 + gap
        rng = np.random.default_rng([seed, two, K, int(round(gap * 100)), sz[0]])
        per = {"truth": [], "study": []}
        for phase, n in (("truth", n_truth), ("study", n_studies)):
            for _ in range(n):
                s, mem, g = simulate_audit(rng, leaks, sz, R, model)
                out = {}
                for attack, c in _attack_contributions(s, mem, g).items():
                    if phase == "truth":
                        adv = c.sum(0)
                        out[attack] = np.array([adv[g == k].mean() for k in range(K)])
                    else:
                        res = group_inference(c, g, K, alpha=alpha)
                        out[attack] = (res, _first_last(res, K))
                per[phase].append(out)
        for attack in per["truth"][0]:
            truth = np.mean([t[attack] for t in per["truth"]], axis=0)
            d_true = truth[0] - truth[K - 1]
            hit_g = np.zeros(K)
            hit_c = 0
            for out in per["study"]:
                res, r01 = out[attack]
                hit_g += (res["gpr_lo"] <= truth) & (truth <= res["gpr_hi"])
                hit_c += int(r01["lo"] <= d_true <= r01["hi"])
            rows.append({"attack": attack, "two_R": two, "sizes": size_name, "gap": gap, "n_studies": n_studies,
                         "true_gpr_first_pp": 100 * truth[0], "true_contrast_pp": 100 * d_true,
                         "cover_gpr": float(hit_g.min() / n_studies), "cover_contrast": hit_c / n_studies})
    return pd.DataFrame(rows)


def write_attack_coverage(df: pd.DataFrame, out: str | os.PathLike) -> Path:
    """attack_coverage.csv and attack_coverage.md (atomically) in ``out``."""
    from ..atomic import write_text

    out = Path(out)
    write_text(out / "attack_coverage.csv", df.to_csv(index=False))
    cols = list(df.columns.drop("n_studies"))
    low = df.groupby("attack")[["cover_gpr", "cover_contrast"]].min()
    worst = "; ".join(f"{a} GPR {r.cover_gpr:.3f}, contrast {r.cover_contrast:.3f}" for a, r in low.iterrows())
    md = _md_table(df, cols)
    write_text(out / "attack_coverage.md", "# Coverage of PA-GA, PA-GBA and LiRA's 95% intervals\n\n"
               f"{df['n_studies'].iloc[0]} simulated audits per cell (`fairdp coverage --attacks`; the score model "
               "of coverage.md, φ = the score). These attacks fit thresholds (GA: one per model; GBA: one per model "
               "and group) or Gaussians (LiRA, on the other fold's models) on the audit itself, so the estimand is "
               "the expected advantage of the procedure at this design: the truth is the mean estimate over as many "
               "independent audits of the cell. cover_gpr: the worst group's GPR interval; cover_contrast: GPR_first "
               "− GPR_last (Bonferroni over the pairs when there are more than two groups). Monte Carlo SE of a "
               "coverage near 0.95: 0.007 at 1,000 audits.\n\n"
               f"Worst cell per attack: {worst}. Online LiRA's per-group GPR intervals undercover (down to 0.86): "
               "its Gaussians, fitted on the other fold's models, are an error shared by every record of a fold, "
               "which cancels in a contrast (those cover) but not in a group's level. The reports therefore show "
               "per-group GPR intervals for PA-ALOOA only; for PA-GA, PA-GBA and LiRA they show the contrast-based "
               "test of 'some group differs', whose intervals cover.\n\n" + md + "\n")
    return out


def write_coverage(df: pd.DataFrame, out: str | os.PathLike) -> Path:
    """coverage.csv and coverage.md (atomically) in ``out``."""
    from ..atomic import write_text

    out = Path(out)
    write_text(out / "coverage.csv", df.to_csv(index=False))
    cols = ["two_R", "sizes", "delta_target_pp", "delta_true_pp", "cover_gpr", "cover_contrast",
            "cover_delta_simultaneous", "mean_delta_width_pp", "cover_mean_over_seeds", "cover_pooled_2_seeds",
            "cover_pooled_5_seeds", "cover_pooled_5_seeds_shared_records", "reject_wald_holm", "reject_permutation"]
    md = _md_table(df, cols)
    write_text(out / "coverage.md", "# Coverage of the audit's 95% intervals and level of its tests\n\n"
               f"{df['n_studies'].iloc[0]} simulated audits per cell (fairdp_core/audit/simulate.py; `fairdp coverage`). "
               "Score model: IN shift μ_i·(1 + u_j + γ_jk) + σ_j·z with record heterogeneity (log-sd 0.5), a model "
               "effect u (sd 0.3), a model × group interaction γ (sd 0.2) and a model noise scale (log-sd 0.2); the "
               "truth is the expected cross-fitted advantage at this 2R, by a separate Monte Carlo (1,000 banks). "
               "Monte Carlo SE of a coverage near 0.95: 0.007. cover_gpr: the per-group GPR intervals (t, df ≤ R − 1), "
               "the worst group's; cover_contrast: GPR_0 − GPR_last (two groups); cover_delta_simultaneous: Δ = "
               "max − min (Bonferroni over pairs); cover_mean_over_seeds: the t interval of the mean contrast over "
               "5 seeds (5,000 subsets of the audits); cover_pooled_2/5_seeds: the contrast pooled over 2 or 5 seeds as "
               "the reports pool it (stats.pool_over_seeds; 2,000 subsets of independent audits; MC SE about "
               "0.015), and over 5 seeds that audit the same records (200 groups of 5 audits sharing their "
               "records, as audit.m: all makes them; MC SE 0.015). Rejection rates at true Δ = 0 are the "
               "tests' levels (nominal "
               "0.05): reject_wald_holm is the test the reports use (crossed variance, Holm over pairs); "
               "reject_permutation the studentized permutation test over records, which conditions on the trained "
               "models and so exceeds its level when models leak unequally across groups (2R = 16: up to 0.075); "
               "the reports show it only as that conditional test.\n\n" + md + "\n")
    return out


def _md_table(df: pd.DataFrame, cols: list[str]) -> str:
    return "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols),
                      *("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row) + " |"
                        for row in df[cols].itertuples(index=False))])


