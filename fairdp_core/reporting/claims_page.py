"""The claims section of the index as a reader sees it: the verdict table with its figure, the robustness notes, the
bound and accounting checks, each cell's cost, and the claims CSV (:func:`claims_section`, :func:`write_claims_csv`)."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

from ..audit.verdicts import (
    LIKE_FOR_LIKE_PP,
    MIN_SEEDS,
    PAPER_QUOTED,
    RULE_ORDER,
    claims_table,
    load_summaries,
)
from .claims import DESIGN, SHORT, _baseline, _diff, _dpsgd_runs, _label, _pp, _verdict_text, claims_frame, expected_cells
from .results import DATASET_LABELS

__all__ = ["ROBUSTNESS", "claims_figure", "claims_section", "robustness_notes", "write_claims_csv"]


FIGURE_TITLES = {"dpsgd_s_paper": "Paper's rule made DP (decides the claim)",
                 "dpsgd_s_paper_code": "Paper's algorithm as published (not DP)",
                 "dpsgd_s": "This study's quantile reading"}


def claims_figure(frame: tuple, figures_dir: Path) -> str:
    """The claims table as a forest plot (one panel per rule, one row per cell, both estimators), written to
    ``figures_dir``/claims.png with its colour mapping beside it; the HTML that shows it ("" with no run stored)."""
    import json

    from ..atomic import atomic_path, write_text
    from . import plots

    df, _ = frame
    if df.empty:
        return ""
    fig = plots.claims_forest(df, rules={r: FIGURE_TITLES[r] for r in RULE_ORDER},
                              cell_label=lambda ds, model, eps: f"{_label(ds, model)}, ε = {eps:g}")
    png = Path(figures_dir) / "claims.png"
    with atomic_path(png, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=150, bbox_inches="tight", metadata={"Software": None})
    write_text(png.with_name("claims.colors.json"), json.dumps(fig.fairdp_colors, indent=1, sort_keys=True) + "\n")
    plots.plt.close(fig)
    rel = f"figures/{Path(figures_dir).name}/claims.png"
    return (f"<figure style='margin:0.5em 0'><img src='{rel}' alt='the claims table as a forest plot' "
            "style='width:100%;max-width:1320px'><figcaption class='small'>Every cell run so far: Δ(rule) − Δ(DP-SGD) "
            "in pp with its Bonferroni 95% interval, left of 0 = the rule lowers the disparity. The numbers are in "
            "the <a href='#claims'>claims table</a>.</figcaption></figure>")


def claims_section(summaries_dir: Path, profile: Path, frame: tuple | None = None,
                   robust_dir: Path | None = None) -> str:
    """The paper's Tables 4-6 side by side: every cell × rule with both estimators, the verdict, per-group clipped
    fractions, accounting and the campaign's cost."""
    df, summaries = frame or claims_frame(summaries_dir, profile)
    cells = expected_cells(profile)
    if df.empty:
        return "<h2 id='claims'>The paper's claims, cell by cell</h2><p>No claims run stored yet.</p>"
    rows = []
    for cell in cells:
        g = df[(df.dataset == cell[0]) & (df.model == cell[1]) & (df.epsilon == cell[2])]
        if g.empty:
            rows.append(f"<tr><td>{_label(*cell[:2])}</td><td>{cell[2]:g}</td><td colspan='8'>not run yet</td></tr>")
            continue
        base = _baseline(summaries, cell)
        ref = PAPER_QUOTED.get(cell)
        acct = _accounting(summaries, cell)
        for r in g.itertuples():
            row = pd.Series(r._asdict())
            paper = ("lower" if ref is None else f"{ref['dpsgd']:.2f} → {ref['dpsgd_s']:.2f}") if r.rule in (
                "dpsgd_s_paper", "dpsgd_s_paper_code") else "—"
            clip = ("" if r.clipped_rule is None else
                    ", ".join(f"{html.escape(k)} {100 * x:.0f}%" for k, x in r.clipped_rule.items()))
            rows.append(
                f"<tr data-key='{r.dataset}|{r.model}|{r.epsilon:g}|{r.rule}'><td>{_label(r.dataset, r.model)}</td>"
                f"<td>{r.epsilon:g}</td><td>{SHORT[r.rule]}</td><td>{paper}</td>"
                f"<td>{r.delta_dpsgd_cross_fit:.2f} / {r.delta_rule_cross_fit:.2f}</td>"
                f"<td>{_diff(row, 'cross_fit')}</td><td>{_diff(row, 'in_sample')}</td>"
                f"<td>{100 * r.accuracy_dpsgd:.1f} / {100 * r.accuracy_rule:.1f}</td><td>{r.seeds}</td>"
                f"<td class='verdict'><b>{html.escape(_verdict_text(row, base))}</b>"
                f"<div class='small'>clipped (rule): {clip or '—'}{_own_lr(r)}</div></td></tr>")
        rows.append(f"<tr class='acct'><td colspan='10'>{_baseline_line(summaries, cell, base)} {acct}</td></tr>")
    k = int(df.family.iloc[0])
    cost = _cost(summaries)
    return (
        "<h2 id='claims'>The paper's claims, cell by cell (its Tables 4-6 side by side)</h2>"
        f"<p>Each row compares a DP-SGD-S rule with DP-SGD over the same seeds (same audit designs and sampling "
        f"streams). Design: {DESIGN}. Both estimators of Δ are shown: the paper's in-sample PA-ALOOA (biased upward "
        "under no leakage, by the same amount for every group) and the cross-fitted one. Intervals are paired t "
        f"intervals over seeds at the Bonferroni level 1 − 0.05/{k}, and p-values paired t tests times {k}: the "
        f"family is every (cell, rule) the campaign's profiles plan ({k} rows), not the rows run so far; the "
        f"Holm-adjusted p is in the CSV. A verdict needs ≥ {MIN_SEEDS} seeds, no degenerate arm, and mean "
        f"accuracies and balanced accuracies within {LIKE_FOR_LIKE_PP:g} pp; <b>reproduced</b> (Δ lower) or "
        "<b>contradicted</b> (Δ higher) needs both estimators' intervals to exclude 0 on the same side, else "
        "<b>depends on the estimator</b>; <b>not detected</b> gives the smallest change 80% power would detect at "
        "this level (the larger of the two estimators') and whether a paper-sized change (18-37% of DP-SGD's Δ) was "
        "detectable, and is not evidence of no effect; <b>no disparity to remove</b>: no change detected where "
        "DP-SGD's own Δ is within its null floor or below that smallest detectable change, counted apart on the "
        "first screen. The p-values are Bonferroni-adjusted in every row; the unadjusted p of every row is in the "
        "CSV (p_t_cross_fit, p_t_in_sample). A cell short of the seeds "
        "its stopping rule asks for is marked provisional. The paper's Δ is "
        "quoted where its text gives one (in-sample); elsewhere it claims a lower Δ. The grey line under each cell is "
        "its accounting. Every row with every column: <a href='claims_table.csv'>claims_table.csv</a>."
        "</p><table><caption>DP-SGD-S rule − DP-SGD, per cell: Δ pp (DP-SGD / rule, cross-fitted), the paired "
        "difference [Bonferroni interval] under each estimator, accuracy % (DP-SGD / rule), paired seeds, verdict "
        "and the rule's per-group share of clipped per-sample gradients</caption>"
        "<tr><th>dataset · model</th><th>ε</th><th>rule</th><th>paper Δ</th><th>Δ pp</th><th>difference, "
        "cross-fitted</th><th>difference, in-sample</th><th>accuracy %</th><th>seeds</th><th>verdict</th></tr>"
        f"{''.join(rows)}</table>{robustness_notes(robust_dir, summaries, k)}{_bound_check(summaries)}{cost}")


# Reruns of one arm at another setting, beside the declared design (one directory each; DP-SGD's summaries only):
# reported under the claims table as robustness checks, never part of the family or a verdict.
ROBUSTNESS = "reports/paper/robustness"


ROBUST_NAMES = {"dpsgd_s_paper": "The paper's rule made DP", "dpsgd_s": "The quantile reading",
                "dpsgd_s_paper_code": "The released code"}


def _own_lr(r) -> str:
    """The qualifier of a row whose arms ran at different lrs (each tuned outside ε)."""
    a, b = r.lr_rule, r.lr_dpsgd
    if not (np.isfinite(a) and np.isfinite(b)) or a == b:
        return ""
    return f"; own lr: the rule at {a:g}, DP-SGD at {b:g} (a difference in Δ may be the lr's)"


def robustness_notes(robust_dir: Path | None, summaries: list[dict], family: int) -> str:
    """One paragraph per cell rerun in ``robust_dir/<check>/`` (DP-SGD at another lr): each rule that runs at that
    lr in the cell (so that the pair differs in the rule alone) against that DP-SGD, over the same seeds, at the
    family's Bonferroni level."""
    if robust_dir is None or not Path(robust_dir).is_dir():
        return ""
    out = []
    for d in sorted(p for p in Path(robust_dir).iterdir() if p.is_dir()):
        alt = load_summaries(None, files=sorted(d.glob("*.json")))
        if not alt or {s["algorithm"] for s in alt} != {"dpsgd"}:
            raise ValueError(f"{d}: a robustness check holds DP-SGD's reruns only")
        cells = {(s["dataset"], s["model"], float(s["epsilon"])) for s in alt}
        keep = [s for s in summaries if (s["dataset"], s["model"], float(s["epsilon"] or 0)) in cells
                and s["algorithm"] != "dpsgd"]
        df = claims_table(keep + alt, family=family)
        for cell in sorted(cells, key=lambda c: -c[2]):
            lr_alt = {s["plan"]["train"]["spec"]["lr"] for s in alt if float(s["epsilon"]) == cell[2]}
            lr_old = {s["plan"]["train"]["spec"]["lr"] for s in _dpsgd_runs(summaries, cell)}
            same = df[(df.dataset == cell[0]) & (df.model == cell[1]) & (df.epsilon == cell[2])
                      & df.lr_rule.isin(lr_alt)]  # the rules at the rerun's lr
            for r in same.itertuples():
                ci = {est: f"{_pp(getattr(r, f'diff_{est}'))} [{_pp(getattr(r, f'lo_bonf_{est}'))}, "
                           f"{_pp(getattr(r, f'hi_bonf_{est}'))}]" for est in ("cross_fit", "in_sample")}
                out.append(
                    f"<li>{_label(*cell[:2])}, ε = {cell[2]:g}: DP-SGD at lr {', '.join(f'{x:g}' for x in lr_alt)} "
                    f"instead of {', '.join(f'{x:g}' for x in lr_old)} ({r.seeds} seeds): accuracy "
                    f"{100 * r.accuracy_dpsgd:.1f}% against the rule's {100 * r.accuracy_rule:.1f}% (balanced "
                    f"{100 * r.balanced_dpsgd:.1f}% against {100 * r.balanced_rule:.1f}%), DP-SGD's Δ "
                    f"{r.delta_dpsgd_cross_fit:.2f} pp cross-fitted. {ROBUST_NAMES[r.rule]}: "
                    f"<b>{html.escape(r.verdict)}</b>, {ci['cross_fit']} cross-fitted, {ci['in_sample']} "
                    "in-sample.</li>")
    if not out:
        return ""
    return ("<p class='small'><b>Robustness checks</b> (reruns of DP-SGD at another lr, beside the declared design, "
            "against each rule that runs at that lr; not in the family, no verdict above changes): when one lr choice "
            f"decides a cell's answer, the cell has no robust verdict.</p><ul class='small'>{''.join(out)}</ul>")


def _bound_check(summaries: list[dict]) -> str:
    """Law at both clip bounds (the released config's C = 10, the paper profile's C = 5): DP-SGD's accuracy and
    clipped share at ε = 10 against the paper's quoted 89.74%."""
    out = []
    for alt in sorted({s["dataset"] for s in summaries if s["dataset"].endswith("_c5")}):
        ds = alt.removesuffix("_c5")
        ref = PAPER_QUOTED.get((ds, "lr", 10.0), {}).get("dpsgd_accuracy")
        arms = {}
        for name, bound in ((ds, "C = 10"), (alt, "C = 5")):
            runs = [s for s in summaries if s["dataset"] == name and s["algorithm"] == "dpsgd"
                    and float(s["epsilon"] or 0) == 10.0]
            if runs:
                clipped = max((g["clipped_fraction"] or 0.0) for s in runs for g in (s["clipping"] or {}).values())
                arms[bound] = (float(np.mean([s["accuracy"]["mean"] for s in runs])), len(runs), clipped)
        if len(arms) < 2 or ref is None:
            continue
        parts = ", ".join(f"{b}: {100 * a:.2f}% over {n} seeds (largest clipped share {100 * c:.1f}%)"
                          for b, (a, n, c) in arms.items())
        close = [b for b, (a, _, _) in arms.items() if abs(a - ref) * 100 <= 0.1]
        none_clipped = all(c == 0 for _, _, c in arms.values())
        out.append(f"<p class='small'><b>Which clip bound the paper used on {DATASET_LABELS.get(ds, ds)}.</b> DP-SGD at "
                   f"ε = 10, {parts}; the paper quotes {100 * ref:.2f}%. "
                   + ("Both are within 0.1 pp of it" if len(close) == 2 else
                      f"{' and '.join(close) or 'Neither'} within 0.1 pp of it")
                   + ("; no per-sample gradient is clipped at either bound, so accuracy cannot tell them apart."
                      if none_clipped else ".") + "</p>")
    return "".join(out)


def _baseline_line(summaries: list[dict], cell: tuple, base: dict | None) -> str:
    """This cell's DP-SGD baseline beside the paper's: Δ (in-sample, the paper's estimator) and accuracy."""
    runs = _dpsgd_runs(summaries, cell)
    if not runs:
        return ""
    d = np.mean([s["attacks"]["alooa_in_sample"]["delta_pp"] for s in runs])
    acc = np.mean([s["accuracy"]["mean"] for s in runs])
    ref = PAPER_QUOTED.get(cell, {})
    paper_d = f" (paper {ref['dpsgd']:.2f})" if "dpsgd" in ref else " (the paper quotes none)"
    paper_a = f" (paper {100 * ref['dpsgd_accuracy']:.2f}%)" if "dpsgd_accuracy" in ref else ""
    verdict = "" if not base else ("; differs from the paper's: " + base["differs"] if base["differs"] else
                                   "; agrees with the paper's (" + ", ".join(base["agrees"]) + ")")
    return (f"DP-SGD baseline: Δ {d:.2f} pp in-sample{paper_d}, accuracy {100 * acc:.2f}%{paper_a}{verdict}.")


def _accounting(summaries: list[dict], cell: tuple) -> str:
    runs = [s for s in summaries if (s["dataset"], s["model"], float(s["epsilon"] or 0)) == cell]
    parts = []
    for alg in ("dpsgd", "dpsgd_s_paper", "dpsgd_s", "dpsgd_s_paper_code"):
        a = next((s["accounting"] for s in runs if s["algorithm"] == alg), None)
        if a is None:
            continue
        extra = "".join(f", {k} {a[k]:.3g}" for k in ("sigma_b", "sigma_s") if a.get(k) is not None)
        spent = "not guaranteed" if not a.get("guaranteed") else f"ε = {a['epsilon']:.2f}"
        parts.append(f"{SHORT.get(alg, 'DP-SGD')}: σ {a['sigma_g']:.3f}{extra}, q {a['sample_rate']:.4f}, "
                     f"T {a['steps']}, {spent}")
    return (f"Accounting ({runs[0]['accounting']['sampling'] if runs else 'poisson'} sampling, "
            f"{runs[0]['accounting']['accountant'] if runs else 'rdp'} accountant, δ = "
            f"{runs[0]['accounting']['delta'] if runs else 1e-5:g}): " + "; ".join(parts))


def _cost(summaries: list[dict]) -> str:
    """Wall time per part: train, signals, attack and overhead, summed over its runs, and per run."""
    if not summaries:
        return ""
    df = pd.DataFrame([{"part": s["part"], **s["wall_s"]} for s in summaries])
    g = df.groupby("part", sort=False)
    rows = "".join(f"<tr><td>{html.escape(p)}</td><td>{len(x)}</td><td>{x.train.sum() / 60:.1f}</td>"
                   f"<td>{x.signals.sum() / 60:.1f}</td><td>{x.attack.sum() / 60:.1f}</td>"
                   f"<td>{x.overhead.sum() / 60:.1f}</td><td>{x.total.sum() / 60:.1f}</td>"
                   f"<td>{x.total.median():.0f}</td></tr>" for p, x in g)
    return ("<details><summary>What the campaign cost</summary><table><caption>Wall time per part (minutes, one "
            "torch thread on a 2-core machine): training, signals (evaluating the bank on the audited and test "
            "records), attacks and the rest, summed over its runs, and the median run (s)</caption><tr><th>part</th>"
            "<th>runs</th><th>train</th><th>signals</th><th>attacks</th><th>overhead</th><th>total</th><th>median "
            f"run (s)</th></tr>{rows}</table></details>")


def write_claims_csv(summaries_dir: Path, out: Path, profile: Path, frame: tuple | None = None) -> Path:
    from ..atomic import write_text

    df, _ = frame or claims_frame(summaries_dir, profile)
    if not df.empty:
        df = df.assign(clipped_dpsgd=df.clipped_dpsgd.map(str), clipped_rule=df.clipped_rule.map(str))
    write_text(out, df.to_csv(index=False, float_format="%.6g"))
    return out
