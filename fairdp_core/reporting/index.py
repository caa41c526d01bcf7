"""The study's front page (reports/index.html, :func:`build_index`): the findings box, the main table with each
run's accounting, the outcome-fairness line and the links to every page."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..atomic import write_text as _atomic_write
from ..audit.run import REGISTRY as ATTACK_REGISTRY
from ..config import Params
from .pages import REPORTS, _grid_run_table, _q_range, audit_claims, main_table, provenance
from .results import (
    ALGORITHM_LABELS,
    DATASET_LABELS,
    MODEL_LABELS,
    run_label,
    setting_label,
)

__all__ = ["build_index"]


def _num(x, digits=2, unit=""):
    return "—" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{digits}f}{unit}"


_INDEX_CSS = """body{font-family:system-ui,sans-serif;max-width:1320px;margin:1.5em auto;color:#222;line-height:1.4}
td,th{border-bottom:1px solid #ddd;padding:2px 6px;font-size:13px;vertical-align:top;text-align:left}
table{border-collapse:collapse;margin:0.6em 0 1em}caption{text-align:left;font-size:13px;color:#444;padding:4px 0}
.findings{background:#f5f8fc;border:1px solid #c9d8ea;border-radius:6px;padding:0.4em 1em 0.6em;margin:1em 0}
.findings h2{margin-top:0.3em}.small{font-size:11px;color:#555}tr.ds th{background:#eef1f4;font-size:14px}
tr.acct td{font-size:11px;color:#666;border-bottom:1px solid #ccc;padding-top:0}tr.main td{border-bottom:none}
details{margin:0.8em 0}.nw{white-space:nowrap}summary{font-weight:600;cursor:pointer}.meta{color:#555;font-size:13px}"""


def _accounting_line(r: pd.Series) -> str:
    if r.algorithm == "sgd":
        return "no noise: not private"
    spent = "∞" if not np.isfinite(r.eps_spent) else f"{r.eps_spent:.3f}"
    if not r.guaranteed:
        spent += " (not guaranteed: statistics not privatised)"
    sig = f"σ_g = {r.sigma_g:.4g}"
    sig += "" if pd.isna(r.sigma_b) else f", σ_b = {r.sigma_b:.3g}"
    sig += "" if pd.isna(r.get("sigma_s", np.nan)) else f", σ_s = {r.sigma_s:.3g}"
    clip = "" if not isinstance(r.clipped_fraction, dict) else "; clipped (diagnostic outside ε): " + ", ".join(
        f"{'group ' if str(k).isdigit() else ''}{k}: {100 * v:.0f}%" for k, v in r.clipped_fraction.items())
    return (f"{sig}, q = {_q_range(r.q_min, r.q)}, T = {int(r['T']):,}, Poisson sampling, {r.accountant.upper()} "
            f"accountant, δ = {r.delta:g}, ε spent = {spent} (max over the models){clip}")


CORE_ALGORITHMS = ("sgd", "dpsgd", "dpsgd_s")


MAIN_HEAD = ("<tr><th>model</th><th>ε</th><th>algorithm</th><th>seeds</th><th>accuracy</th><th>accuracy 95% CI</th>"
             "<th>majority class</th><th>degenerate</th><th>Δ pp ± SD</th><th>Δ 95% interval</th><th>null floor pp</th>"
             "<th>contrast pp [95% CI]</th></tr>")


def _main_rows(agg: pd.DataFrame) -> str:
    """The main table's body: a header row per dataset, then per configuration a row of numbers and a compact
    accounting row beneath it."""
    out = []
    agg = agg.assign(_e=agg["epsilon"].fillna(0.0))
    order = list(dict.fromkeys(agg["dataset"]))
    for ds in order:
        g = agg[agg.dataset == ds].sort_values(["model", "_e"], kind="stable")
        out.append(f"<tr class='ds'><th colspan='12'>{html.escape(DATASET_LABELS.get(ds, ds))}</th></tr>")
        for _, r in g.iterrows():
            one = r.seeds == 1
            acc = f"{100 * r.accuracy:.1f}%" + ("" if one else f" ± {100 * r.accuracy_sd:.2f} pp")
            acc_ci = ("— (one seed)" if one or not np.isfinite(r.accuracy_lo) else
                      f"[{100 * r.accuracy_lo:.1f}, {100 * r.accuracy_hi:.1f}]")
            flag = ("<b title='≥ 99% of test predictions in one class, or balanced accuracy below chance + 0.02 (0.52 with two classes, 0.12 with ten)'>⚠ degenerate"
                    "</b>" if r.degenerate else "no")
            sd = "± — (one seed)" if one else f"± {_num(r.delta_sd)}"
            if np.isfinite(r.p_seed_heterogeneity) and r.p_seed_heterogeneity < 0.05:
                sd += (f" <b title='Cochran Q p = {r.p_seed_heterogeneity:.3f}: the seeds disagree beyond their "
                       "within-seed intervals'>⚠ seeds disagree</b>")
            contrast = ("n/a: more than two groups" if not np.isfinite(r.contrast_pp) else
                        f"{r.contrast_pp:+.2f} [{r.contrast_lo:+.2f}, {r.contrast_hi:+.2f}]")
            eps = "no DP" if pd.isna(r.epsilon) else f"{r.epsilon:g}"
            out.append(
                f"<tr class='main'><td>{MODEL_LABELS.get(r.model, r.model)}</td><td class='nw'>{eps}</td><td>{ALGORITHM_LABELS[r.algorithm]}"
                f"</td><td>{int(r.seeds)}</td><td>{acc}</td><td>{acc_ci}</td><td>{_num(100 * r.majority_rate, 1, '%')}"
                f"</td><td>{flag}</td><td>{r.delta_pp:.2f} {sd}</td><td>[{_num(r.delta_lo)}, {_num(r.delta_hi)}]"
                f"</td><td>{_num(r.null_floor_pp)}</td><td>{contrast}</td></tr>"
                f"<tr class='acct'><td></td><td colspan='11'>{html.escape(_accounting_line(r))}</td></tr>")
    return "".join(out)


def report_links() -> str:
    """The index's list of pages: one item per entry of the report registry, with the question it answers."""
    return "".join(f'<li><a href="{r.name}.html">{r.title}</a>: {html.escape(r.question)}</li>' for r in REPORTS.values())


def build_index(params: Params, *, first_screen: str = "", claims: str = "") -> Path:
    """reports/index.html: the findings box (the paper's claims: its value, this study's estimate with CI and seeds,
    a verdict), the reports with what each answers, the main table grouped by dataset with the accounting of every
    row, then the details (verdicts by source, the stored paper-profile run, the power pilots, how to read); plus
    reports/main_table.csv and reports/metrics.json (DVC metrics)."""
    df = _grid_run_table(params)  # read once: the main table and the findings box share it
    agg = main_table(params, df=df)
    evidence: list[dict] = []  # the paper's claims are decided by the claims campaign only (reporting.claims)
    links = report_links()
    design = (f"Audit: PA-ALOOA, cross-fitted estimator, {params.audit.m} audited records, 2R = {2 * params.audit.R} "
              "models per configuration.")
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>fairdp results</title>
<style>{_INDEX_CSS}</style></head><body>
<h1>fairdp: group privacy risk under DP-SGD and DP-SGD-S</h1>
<p class="meta">Δ: the largest gap in group membership risk (pp).
<a href="#how-to-read">How to read these numbers</a>.</p>
{first_screen}
<h2>Reports</h2><ul>{links}</ul>
{claims}
{_findings_box(params, evidence, df, agg, meta=f"{provenance(params, 'index')} {design}")}
<details id="main-results"><summary>Main results of this profile: {len(agg[agg.algorithm.isin(CORE_ALGORITHMS)])} rows
(SGD, DP-SGD, DP-SGD-S; accuracy, Δ with its interval and null floor, the accounting of every row)</summary>
<table><caption>Per dataset, model, ε and algorithm (PA-ALOOA cross-fitted): accuracy (mean ± SD over seeds, the 95% t
interval of the mean) beside the majority-class rate and a degenerate-model flag; Δ (pp, mean ± SD over seeds) with its
simultaneous 95% interval and null floor; the two-group contrast (pp, 95% CI). The grey line under each row is its
privacy accounting. SGD, DP-SGD and DP-SGD-S here; DP-SGD-S's other versions and its rivals in the table below it.
All rows with every column: <a href="main_table.csv">main_table.csv</a>.</caption>
{MAIN_HEAD}{_main_rows(agg[agg.algorithm.isin(CORE_ALGORITHMS)])}</table></details>
<details><summary>DP-SGD-S's other versions (the paper code's rule, made DP and as the code has it; as first described)
and its rivals (DPSGD-F, DPSGD-Global-Adapt, AdaClip): {int((~agg.algorithm.isin(CORE_ALGORITHMS)).sum())} more rows,
same columns</summary><table><caption>As the main table, for the other rules.</caption>
{MAIN_HEAD}{_main_rows(agg[~agg.algorithm.isin(CORE_ALGORITHMS)])}</table></details>
<details id="how-to-read"><summary>How to read these numbers</summary>
<p class="small">GPR is a group's mean per-record advantage (the expected held-out TPR − FPR at this R, a lower
estimate; the paper's in-sample estimator is an upper one). Δ = max − min over groups of GPR, in percentage points
(pp). A max − min is biased upward when groups are close: read it beside its <b>null floor</b>, the mean Δ when the
group labels are permuted among the audited records (same design and estimator). Intervals are 95% and simultaneous
over the pairs of groups (Bonferroni): each pairwise contrast's variance is the crossed records × model pairs one
(model-level effects included), pooled over seeds as the mean of independent audits (a ⚠ marks seeds that disagree
beyond it, Cochran's Q p &lt; 0.05). Their coverage was checked by simulation
(<code>reports/coverage/coverage.md</code>). For two groups the signed contrast GPR(first group) − GPR(second) is given
with its interval. A row is flagged <b>degenerate</b> when ≥ 99% of its test predictions fall in one class or its
balanced accuracy is below chance + 0.02 (0.52 with two classes, 0.12 with MNIST's ten): its Δ describes a model
that has not learned the task. The accounting line ends with
each group's share of per-sample gradients clipped during training (a diagnostic outside ε): a group-specific bound
matters only where clipping binds.</p></details>
</body></html>"""
    out = params.resolve("reports") / "index.html"
    _atomic_write(out, page)
    # The headline DVC metrics (what `dvc exp show` and `fairdp exp show` list): accuracy and Δ with its simultaneous
    # 95% interval per configuration. The whole table, accounting included, goes beside it as main_table.csv.
    metrics = {f"{r.dataset}-{r.model}-{r.algorithm}" + ("" if pd.isna(r.epsilon) else f"-e{r.epsilon:g}"):
               {"accuracy": round(float(r.accuracy), 5), "delta_pp": round(float(r.delta_pp), 4),
                "delta_lo": round(float(r.delta_lo), 4), "delta_hi": round(float(r.delta_hi), 4)}
               for _, r in agg.iterrows()}
    _atomic_write(params.resolve("reports") / "main_table.csv", agg.to_csv(index=False, float_format="%.6g"))
    _atomic_write(params.resolve("reports") / "metrics.json", json.dumps(metrics, indent=1) + "\n")
    return out




def _outcome_line(params: Params) -> str:
    """The largest outcome-fairness change of DP-SGD-S against DP-SGD (from the outcome-fairness report's metrics):
    not one of the paper's claims, but the largest effect the study measures."""
    path = params.resolve("reports/metrics") / "outcome_fairness.json"
    if not path.is_file():
        return ""
    m = json.loads(path.read_text())
    rows = {}
    for k, v in m.items():
        if k.startswith("dpsgd_s_vs_dpsgd.") and k.endswith(".equal_opportunity.change"):
            rows[k.split(".")[1]] = v
    if not rows:
        return ""
    key = max(rows, key=lambda k: abs(rows[k]))
    base = f"dpsgd_s_vs_dpsgd.{key}.equal_opportunity"
    lo, hi = m.get(f"{base}.lo"), m.get(f"{base}.hi")
    drop = {f: m.get(f"tpr_drop.{key}.{f}") for f in ("group", "dpsgd", "dpsgd_s")}
    ds, model, eps = key.split("-")[0], key.split("-")[1], key.split("-e")[-1]
    where = f"{setting_label(ds, model)}, ε = {eps}"
    tpr = ("" if drop["group"] is None else
           f": the true-positive rate of group {html.escape(str(drop['group']))} falls from "
           f"{100 * drop['dpsgd']:.1f}% to {100 * drop['dpsgd_s']:.1f}%")
    return (f"<p><b>Outcome fairness</b> (not a claim of the paper; the largest of {len(rows)} equal-opportunity "
            f"changes, picked after the fact, its interval not adjusted for that): on {where}, "
            f"DP-SGD-S (the study's quantile reading) changes the equal-opportunity gap by {100 * rows[key]:+.1f} pp "
            f"[{100 * lo:+.1f}, {100 * hi:+.1f}] against DP-SGD (mean over every pair of models of the two banks, "
            f"paired bootstrap over test records){tpr}. See <a href='outcome_fairness.html'>outcome fairness</a>.</p>")


def this_run_detections(dp: pd.DataFrame, alpha: float = 0.05) -> tuple[int, int]:
    """(configurations whose Δ > 0 survives Holm's correction over every configuration with a p-value, how many had
    one): each configuration's ``p_delta`` (already Holm-adjusted over its group pairs) adjusted again over the
    configurations, so that 1 of 32 unadjusted exclusions, the chance rate, is not read as a detection."""
    from ..audit.inference import holm

    p = dp["p_delta"].to_numpy(float) if len(dp) and "p_delta" in dp else np.array([])
    p = p[np.isfinite(p)]
    return (int((holm(p) <= alpha).sum()) if len(p) else 0), len(p)


def _correlation_text(v: dict) -> str:
    """Pearson r with its interval, or why it is undefined: fewer than 4 targets with both values, or one of the two
    columns constant over the targets (a small design's PA-LOOA can be 0 for every one)."""
    if np.isfinite(v["r"]):
        return f"r = {v['r']:.2f} [{v['lo']:.2f}, {v['hi']:.2f}]"
    if v.get("n", 0) < 4:
        return f"r not computed ({v.get('n', 0)} targets with both values; it needs 4)"
    return "r undefined (one attack's advantage is the same for every target)"


def _findings_box(params: Params, evidence: list[dict], df: pd.DataFrame, agg: pd.DataFrame, *,
                  meta: str = "") -> str:
    """What this profile's own runs say (the paper's claims are decided by the claims campaign, above it): can its
    audit tell any group's risk apart; the audit claims; the largest outcome-fairness effect."""
    # this run's own answer: can its audit tell any group's risk apart?
    dp = agg[agg.algorithm != "sgd"] if len(agg) else agg
    n_excl = int((dp["delta_lo"] > 0).sum()) if len(dp) else 0
    n_below = int((dp["delta_pp"] < dp["null_floor_pp"]).sum()) if len(dp) else 0
    n_adj, n_tested = this_run_detections(dp)
    adjusted = (f"; after Holm's correction over the {n_tested} with a p-value, <b>{n_adj}</b>" if n_tested else
                "; no configuration has a p-value to correct, so none counts as detected")
    null_line = (f"<p><b>This run</b> ({params.profile} profile, m = {params.audit.m}, 2R = {2 * params.audit.R}): "
                 f"Δ's 95% interval excludes 0 in {n_excl} of {len(dp)} DP configurations (unadjusted: about "
                 f"{0.05 * len(dp):.1f} would by chance alone){adjusted}. {n_below} of the {len(dp)} have a Δ below "
                 f"its null floor (the Δ that permuted group labels give): "
                 + ("<b>no group disparity is detectable at this scale</b>; the verdicts above rest on the claims "
                    "campaign's larger design." if n_adj == 0 else
                    f"group disparities are detectable in {n_adj} configuration{'s' * (n_adj != 1)} (main table, "
                    "column p (Holm)).") + "</p>")
    audit = audit_claims(params, df)
    audit_rows = []
    widest = float(agg["delta_pp"].max()) if len(agg) else float("nan")
    for k, v in audit["looa"].items():
        run = params.runs[k].model_dump()
        covers = v["diff_lo"] is not None and v["diff_lo"] <= 0 <= v["diff_hi"]
        half = (v["diff_hi"] - v["diff_lo"]) / 2 if v["diff_lo"] is not None else float("nan")
        if not covers:
            verdict = "<b>contradicted</b>: the levels differ"
        elif v["lo"] > 0:
            verdict = f"<b>consistent</b>: no level difference beyond ±{half:.1f} pp, and r &gt; 0"
        else:
            verdict = (f"<b>inconclusive</b>: no level difference beyond ±{half:.1f} pp (wider than the largest Δ of "
                       f"this run, {widest:.1f} pp), and the record-level correlation is not distinguishable from 0")
        audit_rows.append(
            f"<tr><td>PA-ALOOA agrees with PA-LOOA</td><td>agrees</td><td>{html.escape(run_label(run))}: "
            f"{v['n']} targets, R' = {v['R_prime']}; {_correlation_text(v)}; LOOA − ALOOA "
            f"{v['mean_diff_pp']:+.2f} pp [{v['diff_lo']:+.2f}, {v['diff_hi']:+.2f}]</td><td>{verdict}</td></tr>")
    for rival, name in ((r, ATTACK_REGISTRY[r].label) for r in ("ga", "gba")):
        ins, cf = audit["strictness"].get(f"alooa_in_sample-{rival}"), audit["strictness"].get(f"alooa_cross_fit-{rival}")
        if not ins or not cf or ins["lo"] is None or cf["lo"] is None:
            continue
        # the in-sample estimator's level carries its own upward bias (it scores the pairs it fits its threshold
        # on): strictness holds for the paper's estimator; the unbiased cross-fitted level is the check
        if ins["lo"] > 0 and cf["hi"] < 0:
            verdict = ("<b>true for the paper's in-sample estimator, explained by its own bias</b> (no leakage gives "
                       "it a high level); <b>reversed</b> once cross-fitted")
        elif cf["lo"] > 0:
            verdict = "<b>reproduced</b>, cross-fitted too"
        else:
            verdict = "<b>inconclusive</b>"
        audit_rows.append(
            f"<tr><td>PA-ALOOA is stricter than {name}</td><td>stricter</td><td>GPR level, PA-ALOOA − {name}, over "
            f"{cf['runs']} DP runs: in-sample (the paper's estimator) {ins['mean_pp']:+.1f} pp "
            f"[{ins['lo']:+.1f}, {ins['hi']:+.1f}] (higher in {ins['higher']}); cross-fitted (unbiased) "
            f"{cf['mean_pp']:+.1f} pp [{cf['lo']:+.1f}, {cf['hi']:+.1f}] (higher in {cf['higher']}). {name} fits its "
            f"thresholds on the audited pairs too; its level under no leakage is not measured here</td>"
            f"<td>{verdict}</td></tr>")
    return (
        f"<div class='findings' id='this-run'><h2>This profile's own runs</h2><p class='meta'>{meta}</p>{null_line}"
        f"{_outcome_line(params)}"
        + ("" if not audit_rows else
           "<table><caption>The paper's audit claims (PA-LOOA: the Fisher-z interval of r with a jackknife SE, the "
           "t interval of the mean difference over targets; GPR levels: mean over this grid's DP runs with the t "
           "interval over runs)</caption><tr><th>claim</th><th>paper</th><th>this study</th><th>verdict</th></tr>"
           f"{''.join(audit_rows)}</table>")
        + "</div>")
