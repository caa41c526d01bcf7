"""The claims campaign on the index page: the answer, one sentence per rule, the paper's three quoted claims, and
the paper's Tables 4-6 side by side (HTML), all from ``reports/paper/claims/`` (:mod:`fairdp_core.audit.verdicts`).
Rendering only: every number comes from :func:`~fairdp_core.audit.verdicts.claims_table`."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy import stats

from ..audit.verdicts import (
    LIKE_FOR_LIKE_PP,
    MIN_SEEDS,
    PAPER_QUOTED,
    RULE_ORDER,
    claims_table,
    depends_detail,
    load_summaries,
    seeds_needed,
)
from .results import DATASET_LABELS, MODEL_LABELS

__all__ = ["CLAIMS_SOURCES", "RULE_NAMES", "answer_lead", "cells_named", "claims_first_screen", "claims_frame",
           "expected_cells", "planned_rows"]

RULE_NAMES = {
    "dpsgd_s_paper": "The paper's rule made DP (dpsgd_s_paper, the arm that decides the paper's claim)",
    "dpsgd_s": "The study's quantile reading of the paper's text (dpsgd_s)",
    "dpsgd_s_paper_code": "The paper's code as released (dpsgd_s_paper_code, not DP)",
}
SHORT = {"dpsgd_s_paper": "paper's rule, made DP", "dpsgd_s": "quantile reading", "dpsgd_s_paper_code":
         "released code (not DP)"}
DESIGN = ("the paper's design: every training record audited (m = n), each model on a stratified half, 2R = 400 "
          "models per configuration (MNIST: 2R = 64; for the MLP the design its SD pilot chose, for the CNN what fits 2 "
          "CPU cores; UTKFace: 2R = 8 at the paper's 20 epochs, C = 10 and Adam, what fits 2 CPU cores; "
          "docs/claims.md), batch 256, lr 0.1 (COMPAS and MNIST's CNN: each arm at its own lr; UTKFace: both arms at "
          "Adam lr 0.005, not the paper's 0.001; the quantile "
          "reading on Credit and Law at its own, 2 and 1, against DP-SGD at 0.1, so its verdicts there mix the rule "
          "with a 10-20× larger step (on Law, DP-SGD at lr 1 has a lower Δ: the robustness checks below); every lr "
          "tuned outside ε on half the test split, docs/claims.md), the "
          "paper's per-dataset clip bound and epochs; Poisson sampling, RDP accountant, δ = 1e-5")


def _label(ds: str, model: str) -> str:
    return f"{DATASET_LABELS.get(ds, ds)} · {MODEL_LABELS.get(model, model)}"


# The campaign's profiles and where their summaries are (relative to the project): the LR grid at the paper's
# design, MNIST's MLP cell at the design its SD pilot chose, and the CNN cells of MNIST and UTKFace at the designs that
# fit 2 CPU cores (docs/claims.md). One table, one family.
CLAIMS_SOURCES = (("reports/paper/claims", "profiles/claims.yaml"),
                  ("reports/paper/claims_mnist", "profiles/claims_mnist.yaml"),
                  ("reports/paper/claims_mnist_cnn", "profiles/claims_mnist_cnn.yaml"),
                  ("reports/paper/claims_utkface", "profiles/claims_utkface.yaml"))


def _paths(x: str | Path | list | tuple) -> list[Path]:
    return [Path(p) for p in x] if isinstance(x, (list, tuple)) else [Path(x)]


def _grid(profile: str | Path | list) -> list[dict]:
    return [g for p in _paths(profile) for g in yaml.safe_load(p.read_text())["grid"]]


def expected_cells(profile: str | Path | list) -> list[tuple[str, str, float]]:
    """The DP cells of the campaign profiles' grids (dataset, model, ε), in grid order."""
    out = []
    for g in _grid(profile):
        if set(g["algorithms"]) - {"sgd", "dpsgd"}:
            out += [(g["dataset"], g["model"], float(e)) for e in g["epsilons"]
                    if (g["dataset"], g["model"], float(e)) not in out]
    return out


def planned_rows(profile: str | Path | list) -> int:
    """The family: every (cell, DP-SGD-S rule) the campaign profiles plan, whether run yet or not."""
    rows = {(g["dataset"], g["model"], float(e), rule) for g in _grid(profile) for e in g["epsilons"]
            for rule in g["algorithms"] if rule in RULE_ORDER}
    return len(rows)


def claims_frame(summaries_dir: Path | list, profile: Path | list, files: list[Path] | None = None
                 ) -> tuple[pd.DataFrame, list[dict]]:
    """The claims table over the family of every (cell, rule) the profiles plan, with each cell's
    seed target (the campaign's stopping rule) beside its seeds; and the summaries it was computed from
    (``summaries_dir``: one directory or several; ``files``: only these summaries)."""
    if files is None:
        files = sorted(f for d in _paths(summaries_dir) for f in d.glob("*.json"))
    s = load_summaries(None, files=files)
    names = [x["run"] for x in s]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"runs stored twice among the campaign's summaries ({', '.join(map(str, summaries_dir))}): "
                         f"{', '.join(twice[:5])}")
    df = claims_table(s, family=planned_rows(profile))
    if not df.empty:
        need = {}
        for cell in {(r.dataset, r.model, r.epsilon) for r in df.itertuples()}:
            runs = [x for x in s if (x["dataset"], x["model"], float(x["epsilon"] or 0)) == cell]
            need[cell] = seeds_needed(runs, max_seeds=_max_seeds(profile, cell))["seeds"]
        df["seeds_target"] = [need[(r.dataset, r.model, r.epsilon)] for r in df.itertuples()]
    return df, s


def _max_seeds(profile, cell: tuple) -> int:
    """The most seeds the profile lets ``cell`` run (its grid entry's ``seeds``)."""
    return max((g.get("seeds", 1) for g in _grid(profile) if (g["dataset"], g["model"]) == cell[:2]
                and cell[2] in [float(e) for e in g["epsilons"]] and set(g["algorithms"]) - {"sgd", "dpsgd"}),
               default=16)


def _pp(x, digits=2, sign=True) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "—"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def _diff(r: pd.Series, est: str) -> str:
    lo, hi = r[f"lo_bonf_{est}"], r[f"hi_bonf_{est}"]
    ci = "" if not np.isfinite(lo) else f" [{lo:+.3f}, {hi:+.3f}]"
    p = r[f"p_bonf_{est}"]
    return f"{_pp(r[f'diff_{est}'], 3)}{ci}" + ("" if not np.isfinite(p) else f", p<sub>Bonf</sub> = {p:.2g}")


def _dpsgd_runs(summaries: list[dict], cell: tuple) -> list[dict]:
    """The DP-SGD runs of one cell (dataset, model, ε)."""
    return [s for s in summaries if (s["dataset"], s["model"], float(s["epsilon"] or 0), s["algorithm"])
            == (*cell, "dpsgd")]


def _baseline(summaries: list[dict], cell: tuple) -> dict | None:
    """This study's DP-SGD Δ (in-sample, the paper's estimator) and accuracy against the paper's quoted ones: Δ
    differs where the paper's value is outside our 95% t interval over seeds (the paper's own spread is not
    published, so this reads our uncertainty only), accuracy where they differ by more than 1 pp; None where it
    cannot be checked."""
    ref = PAPER_QUOTED.get(cell)
    runs = _dpsgd_runs(summaries, cell)
    if ref is None or not runs:
        return None
    d = np.array([s["attacks"]["alooa_in_sample"]["delta_pp"] for s in runs], dtype=float)
    acc = float(np.mean([s["accuracy"]["mean"] for s in runs]))
    delta_differs = None
    if len(d) >= 2:
        h = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
        delta_differs = not (d.mean() - h <= ref["dpsgd"] <= d.mean() + h)
    acc_differs = None if "dpsgd_accuracy" not in ref else abs(acc - ref["dpsgd_accuracy"]) * 100 > 1.0
    parts = []
    if delta_differs:
        parts.append(f"Δ {d.mean():.2f} vs the paper's {ref['dpsgd']:.2f} pp")
    if acc_differs:
        parts.append(f"accuracy {100 * acc:.2f} vs {100 * ref['dpsgd_accuracy']:.2f}%")
    agrees = [w for w, x in (("Δ", delta_differs), ("accuracy", acc_differs)) if x is False]
    return {"delta": float(d.mean()), "paper_delta": ref["dpsgd"], "accuracy": acc,
            "paper_accuracy": ref.get("dpsgd_accuracy"), "differs": "; ".join(parts), "agrees": agrees}


def _verdict_text(r: pd.Series, base: dict | None) -> str:
    v = r.verdict
    if v == "not a like-for-like test":
        plain = abs(r.accuracy_rule - r.accuracy_dpsgd) * 100 > LIKE_FOR_LIKE_PP
        why = ("a degenerate arm" if r.degenerate_dpsgd or r.degenerate_rule else
               f"{'accuracies' if plain else 'balanced accuracies'} more than {LIKE_FOR_LIKE_PP:g} pp apart")
        v += (f" ({why}: DP-SGD {100 * r.accuracy_dpsgd:.1f}%, rule {100 * r.accuracy_rule:.1f}%; balanced "
              f"{100 * r.balanced_dpsgd:.1f}%, {100 * r.balanced_rule:.1f}%)")
    elif v == "not detected" and r.mde is not None:
        v += f" (detectable at 80% power: ±{r.mde:.2f} pp; {_paper_sized(r)})"
    elif v == "no disparity to remove":
        v += (f" (DP-SGD's Δ {r.delta_dpsgd_cross_fit:.2f} pp, null floor {r.null_floor_dpsgd_cross_fit:.2f}, "
              f"detectable at 80% power: ±{r.mde:.2f} pp)")
    elif v == "depends on the estimator":
        v += f" ({depends_detail(r)})"
    elif v == "too few seeds":
        v += f" ({min(r.n_cross_fit, r.n_in_sample)} of {MIN_SEEDS})"
    if r.verdict != "not a like-for-like test" and r.seeds < r.get("seeds_target", 0):
        v += f"; provisional: {r.seeds} of the {r.seeds_target} seeds this cell needs"
    if base and base["differs"] and r.verdict in ("reproduced", "contradicted", "not detected",
                                                  "depends on the estimator", "no disparity to remove"):
        v += f"; DP-SGD's baseline differs from the paper's ({base['differs']})"
    return v


def _paper_sized(r) -> str:
    """Whether the seeds could detect a paper-sized reduction (18-37% of DP-SGD's Δ) at 80% power."""
    d18, d37 = r.get("detects_18pct"), r.get("detects_37pct")
    if d18:
        return "a paper-sized change (18-37% of DP-SGD's Δ) would have been detected"
    if d37:
        return "only the paper's larger effects (37% of DP-SGD's Δ) would have been detected"
    return "a paper-sized change (18-37% of DP-SGD's Δ) could not have been detected"


# The three rules, named once on the first screen: which is the paper's algorithm as published, which decides the
# claim, which is this study's reading (issue text, fixed for every page)
FIRST_SCREEN_NAMES = {
    "dpsgd_s_paper": "<b title='dpsgd_s_paper'>Paper's rule made DP</b> (decides the claim)",
    "dpsgd_s_paper_code": "<b title='dpsgd_s_paper_code'>Paper's algorithm as published</b> (not DP)",
    "dpsgd_s": "<b title='dpsgd_s'>This study's quantile reading</b>",
}


def cells_named(rows: pd.DataFrame) -> str:
    """The cells of ``rows`` (dataset, model, epsilon) named for a sentence, one name per dataset and model with its
    ε listed: "Bank ε = 10, 1; MNIST MLP ε = 10" (the model named where it is not LR; a label's parenthesis left
    out: "Law", not "Law (paper's task)")."""
    eps: dict[str, list[str]] = {}
    for r in rows.itertuples():
        name = DATASET_LABELS.get(r.dataset, r.dataset).split(" (")[0] + (
            "" if r.model == "lr" else " " + MODEL_LABELS.get(r.model, r.model))
        eps.setdefault(name, []).append(f"{r.epsilon:g}")
    return "; ".join(f"{n} ε = {', '.join(e)}" for n, e in eps.items())


def answer_lead(low: int, up: int, tested: int, none: int, cells: str = "like-for-like cell") -> str:
    """The answer's first words from the deciding rule's counts over ``tested`` cells: ``low`` lowered Δ, ``up``
    raised it, ``none`` had no disparity to remove (the same words for the same-lr and the equal-accuracy answer)."""
    if up and low:
        return "Not in general"
    if up:
        return "No"
    if low == tested - none and low:
        return "Yes, in every tested cell with a disparity to remove"
    if low == 0:
        return f"Not established in any {cells} (not evidence of no effect)"
    return f"Only in {low} of {tested} {cells}s"


def _answer(paper: pd.DataFrame, have: int, cells: int, missing: str = "", *, brief: bool = False) -> str:
    """The bold sentence: what the paper's rule made DP does to Δ over the tested cells, named; ``missing`` names
    the cells short of seeds. ``brief``: only the cells tested, as the lead-in of the rule lines that give the counts
    (beside the equal-accuracy answer, within the first screen's words)."""
    v = paper.verdict.value_counts()
    low, up, same, dep, none = (int(v.get(k, 0)) for k in ("reproduced", "contradicted", "not detected",
                                                          "depends on the estimator", "no disparity to remove"))
    tested = low + up + same + dep + none
    if tested == 0:
        return "Not yet decided: no cell has a like-for-like test with enough seeds."
    where = {k: cells_named(paper[paper.verdict == k]) for k in ("reproduced", "contradicted")}
    lead = answer_lead(low, up, tested, none)
    parts = [f"lowers Δ in {low}" + (f" ({where['reproduced']})" if low else ""),
             f"raises it in {up}" + (f" ({where['contradicted']})" if up else ""),
             f"shows no detectable change in {same}"]
    if dep:
        parts.append(f"depends on the estimator in {dep}")
    if none:  # counted apart: DP-SGD's own Δ there is within its null floor or below what the seeds could detect
        parts.append(f"nothing to remove in {none}")
    decided = paper[paper.verdict.isin(["reproduced", "contradicted", "not detected", "depends on the estimator",
                                        "no disparity to remove"])]
    prov = int((decided.seeds < decided.get("seeds_target", decided.seeds)).sum())
    notes = ([] if have == cells else [f"{missing} not complete" if missing else f"{have} of {cells} run"]) + (
        [f"{prov} provisional"] if prov else [])
    over = f"{tested} like-for-like {'cell' if tested == 1 else 'cells'}" + (f" ({'; '.join(notes)})" if notes else "")
    if brief:
        return f"({over}):"
    return (f"{lead}: in {over}, the paper's rule made DP "
            + ", ".join(parts[:-1]) + f" and {parts[-1]}.")


def _rule_line(df: pd.DataFrame, rule: str) -> str:
    """One short line per rule: its verdict counts over the cells run."""
    g = df[df.rule == rule]
    v = g.verdict.value_counts()
    # (cells whose arms ran at different lrs, each tuned outside ε, are marked in the claims table, not here)
    counts = [f"{k} {int(v.get(key, 0))}"
              for k, key in (("lower", "reproduced"), ("higher", "contradicted"), ("no change", "not detected"),
                             ("estimator-dependent", "depends on the estimator"),
                             ("nothing to remove", "no disparity to remove"))
              if v.get(key, 0) or key in ("reproduced", "contradicted")]  # the others where they occur
    rest = [f"{int(v[key])} {k}" for k, key in (("not like-for-like", "not a like-for-like test"),
                                                ("with too few seeds", "too few seeds")) if v.get(key, 0)]
    return f"{FIRST_SCREEN_NAMES[rule]}: {', '.join(counts)}" + (f"; {', '.join(rest)}" if rest else "") + "."


def _short_verdict(r: pd.Series, base: dict | None, paper_effect: float | None = None) -> str:
    """The verdict and its one most needed qualifier (the full text is in the claims table below)."""
    v = r.verdict
    if v == "not a like-for-like test":
        plain = abs(r.accuracy_rule - r.accuracy_dpsgd) * 100 > LIKE_FOR_LIKE_PP
        a, b = (r.accuracy_dpsgd, r.accuracy_rule) if plain else (r.balanced_dpsgd, r.balanced_rule)
        return f"{v} ({'accuracy' if plain else 'balanced accuracy'} {100 * a:.1f}% vs {100 * b:.1f}%)"
    if r.seeds < r.get("seeds_target", 0):
        v += f", provisional ({r.seeds} of {r.seeds_target} seeds)"
    elif v == "not detected" and r.mde is not None:
        v += f" (MDE ±{r.mde:.2f})"
    elif v == "no disparity to remove":
        v += f" (DP-SGD's Δ {r.delta_dpsgd_cross_fit:.2f}, MDE ±{r.mde:.2f})"
    if paper_effect is not None and all(np.isfinite([r[f"lo_bonf_{e}"], r[f"hi_bonf_{e}"]]).all() and
                                        not r[f"lo_bonf_{e}"] <= paper_effect <= r[f"hi_bonf_{e}"]
                                        for e in ("in_sample", "cross_fit")):
        v += f"; paper's {paper_effect:+.2f} excluded"
    return v


def claims_first_screen(summaries_dir: Path, profile: Path, frame: tuple | None = None, *, equal_accuracy: str = "",
                        quoted_extra: dict | None = None) -> str:
    """The question, the bold answer, one line per rule, and the paper's three quoted claims (``frame``:
    :func:`claims_frame`'s result, when the caller has it already). Short: it is the index's first screen
    (at most 250 words at 1,400 × 900 with the page's heading). ``equal_accuracy``: the answer at equal accuracy
    over every planned cell (HTML, one sentence): given, it is the bold answer and the same-lr one follows it in
    plain text; ``quoted_extra``: cell -> the paper
    rule's verdict at equal accuracy, a column of the quoted claims' table."""
    df, summaries = frame or claims_frame(summaries_dir, profile)
    cells = expected_cells(profile)
    have = set() if df.empty else {(r.dataset, r.model, r.epsilon) for r in df.itertuples() if r.seeds >= MIN_SEEDS}
    question = "<h2>Does DP-SGD-S lower the group disparity Δ, as the paper claims?</h2>"
    if df.empty:
        return (f"<div class='findings'>{question}<p><b>Not yet decided: no run of the claims campaign is stored."
                f"</b> 0 of the profile's {len(cells)} cells run.</p></div>")
    paper = df[df.rule == "dpsgd_s_paper"]
    lines = "".join(f"<li>{_rule_line(df, rule)}</li>" for rule in RULE_ORDER if (df.rule == rule).any())
    rows = []
    for cell, ref in PAPER_QUOTED.items():
        r = paper[(paper.dataset == cell[0]) & (paper.model == cell[1]) & (paper.epsilon == cell[2])]
        effect = ref["dpsgd_s"] - ref["dpsgd"]
        head = f"<td>{_label(*cell[:2])}</td><td>{ref['dpsgd']:.2f} → {ref['dpsgd_s']:.2f}</td>"
        extra = ("" if quoted_extra is None else f"<td>{html.escape(quoted_extra[cell])}</td>" if cell in quoted_extra
                 else "<td title='not planned: the frontier covers the LR cells and the MNIST MLP'>—</td>")
        if r.empty:
            rows.append(f"<tr>{head}<td colspan='2'>not run yet</td>{extra}</tr>")
            continue
        r = r.iloc[0]
        ci = {est: f"{_pp(r[f'diff_{est}'])} [{_pp(r[f'lo_bonf_{est}'])}, {_pp(r[f'hi_bonf_{est}'])}]"
              for est in ("in_sample", "cross_fit")}
        rows.append(f"<tr>{head}<td>{ci['in_sample']}</td>"
                    f"<td><b>{html.escape(_short_verdict(r, _baseline(summaries, cell), effect))}</b></td>{extra}</tr>")
    # the cells short of seeds (not run, or running), named when there are one or two (with ε where the dataset and
    # model have another cell)
    gone = [c for c in cells if c not in have]
    missing = "" if len(gone) > 2 else ", ".join(
        _label(*c[:2]).replace(" · ", " ") + (f" ε = {c[2]:g}" if sum(d[:2] == c[:2] for d in cells) > 1 else "")
        for c in gone)
    if equal_accuracy:
        answer = (f"<p><b>{equal_accuracy}</b> At the same lr "
                  f"{html.escape(_answer(paper, len(have), len(cells), missing, brief=True))}</p>")
    else:
        answer = f"<p><b>{html.escape(_answer(paper, len(have), len(cells), missing))}</b></p>"
    return (
        f"<div class='findings'>{question}{answer}<ul>{lines}</ul>"
        "<table id='quoted-claims'><caption><a href='#claims'>Paper's claims</a>, ε = 10: Δ(rule) − Δ(DP-SGD), "
        "in-sample, Bonferroni 95%.</caption>"
        "<tr><th>cell</th><th>paper Δ (pp)</th><th>in-sample</th><th>same-lr verdict</th>"
        + ("" if quoted_extra is None else "<th>at equal accuracy</th>") + f"</tr>{''.join(rows)}</table></div>")


