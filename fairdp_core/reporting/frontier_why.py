"""Why a rule moves Δ where it does, on the index's equal-accuracy section: the hypothesis's sign predictions
(committed in docs/frontier.md before the runs) judged against the verdicts, the mechanism table (each group's bound
and clipped share), DP-SGD at its smallest C, the ablation against the paper rule, and the rules' extra lrs.
Rendering only: the numbers come from :mod:`fairdp_core.audit.frontier`."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
from scipy import stats

from ..audit.frontier import ABLATION, OUTSIDE, cell_c0, extra_lr_table, frontier_at, frontier_points
from ..audit.verdicts import ESTIMATORS, RULE_ORDER
from .claims import SHORT as _RULE_SHORT
from .results import DATASET_LABELS

__all__ = ["PREDICTIONS", "SHORT", "SIGN_WORDS", "UNTESTABLE", "ablation_caveats", "ablation_outcome",
           "ablation_reading", "extra_lr_rows", "fmt_pp", "mechanism_rows", "outcome", "small_c_outcome"]

# The rows' names: the claims' rules, and the ablation (docs/frontier.md, "Ablation").
SHORT = {**_RULE_SHORT, ABLATION: "fixed group bounds (ablation)"}
# The hypothesis's sign predictions, committed in docs/frontier.md before the first frontier run (commit 294fbd8,
# lost with its session; landed as e3cd844, reports/paper/lost_commits.json):
# per rule and dataset, the sign of the effect at equal accuracy (cross-fitted, both ε).
PREDICTIONS = {
    # MNIST (the MLP, ε = 10): added to docs/frontier.md on 2026-12-05 before any frontier_mnist run
    "dpsgd_s_paper": {"law_paper": 0, "bank": -1, "adult": 1, "credit": 0, "compas": 0, "mnist": 0},
    "dpsgd_s": {"law_paper": 1, "bank": 1, "adult": 1, "credit": 1, "compas": 0},
    "dpsgd_s_paper_code": {"law_paper": -1, "bank": -1, "adult": 0, "credit": 0, "compas": 0},
}
# ... and for DP-SGD itself: at C0/10 against its own C0 frontier at the same accuracy (lower on Law and Bank, higher
# on Adult: uniform clipping hits the group with the larger gradients, the riskier one on Law and Bank).
SMALL_C_PREDICTIONS = {"law_paper": -1, "bank": -1, "adult": 1}
SIGN = {"lowers": -1, "raises": 1, "unchanged": 0}
SIGN_WORDS = {-1: "lowers", 0: "no change", 1: "raises"}


def fmt_pp(x, sign=True) -> str:
    return "—" if x is None or not np.isfinite(x) else (f"{x:+.2f}" if sign else f"{x:.2f}")


def mechanism_rows(points: pd.DataFrame, cell: tuple) -> list[str]:
    """Per arm at its claims point: each group's bound relative to the largest (r_k) and clipped share; DP-SGD's
    riskier group; and DP-SGD's clipped shares at its smallest C (which group's gradients are larger)."""
    out = []
    claims = points[(points.dataset == cell[0]) & (points.epsilon == cell[2]) & (points.source == "claims")]
    base = claims[claims.algorithm == "dpsgd"]
    if base.empty:
        return out
    names = list(base.group_names.iloc[0])
    gpr = np.mean(np.stack([np.asarray(g, float) for g in base.gpr]), axis=0)
    risky = names[int(np.argmax(gpr))]
    dp = points[(points.dataset == cell[0]) & (points.epsilon == cell[2]) & (points.algorithm == "dpsgd")
                & (points.source == "frontier")]
    small = ""
    if not dp.empty and dp["clip"].notna().any():
        cmin = dp["clip"].min()
        clips = [c for c in dp[dp["clip"] == cmin].clipping if c]
        if clips:
            small = ", ".join(f"{html.escape(g)} {100 * np.mean([c[g]['clipped_fraction'] for c in clips]):.0f}%"
                              for g in names)
            small = f"DP-SGD at C = {cmin:g} clips {small}"
    for rule in RULE_ORDER:
        arm = claims[claims.algorithm == rule]
        if arm.empty or not all(arm.clipping):
            continue
        bounds = {g: np.mean([c[g].get("final_bound") or np.nan for c in arm.clipping]) for g in names}
        top = max(bounds.values())
        shares = {g: np.mean([c[g]["clipped_fraction"] or 0.0 for c in arm.clipping]) for g in names}
        r = ", ".join(f"{html.escape(g)} {bounds[g] / top:.2f} ({100 * shares[g]:.0f}%)" for g in names)
        out.append(f"<tr><td>{DATASET_LABELS.get(cell[0], cell[0])}</td><td>{cell[2]:g}</td>"
                   f"<td>{html.escape(risky)} ({', '.join(f'{html.escape(g)} {100 * x:.2f}' for g, x in zip(names, gpr))})"
                   "</td>"
                   f"<td>{SHORT[rule]}</td><td>{r}</td><td class='small'>{small}</td></tr>")
    return out


def judge(want: int, got: int) -> str:
    """The pre-registered reading (docs/frontier.md): holds where the measured sign is the predicted one; fails where
    it is the opposite, or where no change was predicted and the interval excludes 0; else not confirmed."""
    if got == want:
        return "holds"
    if want == 0 or got == -want:
        return "fails"
    return "not confirmed"


def small_c_outcome(points: pd.DataFrame, cell: tuple, planned: set | None) -> str | None:
    """DP-SGD at its smallest C against its own C0 frontier at the same accuracy: per seed, the mean over the
    small-C points in range of Δ − the C0 frontier there; the paired t interval over seeds (95%, unadjusted), and
    the prediction judged on it."""
    dp, seeds = frontier_points(points, cell, planned)
    if len(seeds) < 2 or cell[0] not in SMALL_C_PREDICTIONS:
        return None
    c0 = cell_c0(points, cell)
    cmin = float(dp["clip"].min())
    per_seed = []
    for s in seeds:
        d = dp[dp.seed == s]
        base, small = d[d["clip"] == c0], d[d["clip"] == cmin]
        f = frontier_at(base.accuracy, base.delta_cross_fit, small.accuracy)
        ok = np.isfinite(f)
        per_seed.append(float(np.mean(small.delta_cross_fit.to_numpy()[ok] - f[ok])) if ok.any() else np.nan)
    e = np.array(per_seed)
    e = e[np.isfinite(e)]
    if len(e) < 2:
        return f"DP-SGD at C = {cmin:g}: outside its C0 points' accuracy range"
    h = stats.t.ppf(0.975, len(e) - 1) * e.std(ddof=1) / np.sqrt(len(e))
    lo, hi = e.mean() - h, e.mean() + h
    got = -1 if hi < 0 else 1 if lo > 0 else 0
    want = SMALL_C_PREDICTIONS[cell[0]]
    return (f"DP-SGD at C = {cmin:g} against its own C0 frontier at the same accuracy: Δ {e.mean():+.2f} pp "
            f"[{lo:+.2f}, {hi:+.2f}] (95%, {len(e)} seeds); predicted {SIGN_WORDS[want]}: <b>{judge(want, got)}</b>")


UNTESTABLE = (OUTSIDE, "too few seeds", "no disparity to remove")


def judged_sign(r) -> tuple[int | None, str | None]:
    """A row's predicted sign (None: no prediction) and its reading, cross-fitted: "not testable (<verdict>)", the
    :func:`_judge` word, or None where the row has no cross-fitted category."""
    want = PREDICTIONS.get(r.rule, {}).get(r.dataset)
    if want is None:
        return None, None
    if r.verdict in UNTESTABLE:
        return want, f"not testable ({r.verdict})"
    got = SIGN.get(getattr(r, "category_cross_fit", None))
    return want, None if got is None else judge(want, got)


def outcome(r: pd.Series) -> str:
    """The hypothesis's prediction for this row and whether the measured verdict bears it out."""
    want, judged = judged_sign(r)
    if want is None:
        return "—"
    if judged is None:
        return f"predicted {SIGN_WORDS[want]}"
    if r.verdict in UNTESTABLE:
        return f"predicted {SIGN_WORDS[want]}; {judged}"
    note = "" if r.category_cross_fit == r.category_in_sample else f" (in-sample: {r.category_in_sample})"
    return f"predicted {SIGN_WORDS[want]}: <b>{judged}</b>{note}"


def ablation_reading(points: pd.DataFrame, r, planned: dict | None = None, *, c0_only: bool = False,
                     first: int | None = None) -> dict:
    """The ablation against the paper rule (docs/frontier.md, "Ablation"): per seed, the ablation's effect at equal
    accuracy minus the paper rule's (each against that seed's DP-SGD frontier, cross-fitted), with its 95% t interval
    (descriptive, unadjusted), and a TOST equivalence reading at a margin of 20% of DP-SGD's Δ at the rule's accuracy
    (the paper-sized share): "same effect" where the 90% interval lies within the margin, "differs" where the 95%
    interval excludes 0, else "inconclusive". ``c0_only``: against DP-SGD's points at the cell's C0 only (its lr
    path); ``first``: the cell's first ``first`` complete seeds only (the reading when the ablation had that many).
    {"n", "m", "h95", "h90", "margin", "word"}, or {"n"} alone where fewer than 2 seeds have both in DP-SGD's range."""
    cell = (r.dataset, r.model, r.epsilon)
    dp, seeds = frontier_points(points, cell, (planned or {}).get(cell))
    if c0_only:
        dp = dp[dp["clip"] == cell_c0(points, cell)]
    at = (points.dataset == cell[0]) & (points.model == cell[1]) & (points.epsilon == cell[2])
    rule = points[at & (points.algorithm == "dpsgd_s_paper") & (points.source == "claims")]
    abl = points[at & (points.algorithm == ABLATION)]
    both = [x for x in seeds if x in set(rule.seed) and x in set(abl.seed)]
    diffs, front = [], []
    for seed in both[:first]:
        d = dp[dp.seed == seed]
        a, b = abl[abl.seed == seed].iloc[0], rule[rule.seed == seed].iloc[0]
        fa, fb = frontier_at(d.accuracy, d.delta_cross_fit, [a.accuracy, b.accuracy])
        if np.isfinite(fa) and np.isfinite(fb):
            diffs.append((a.delta_cross_fit - fa) - (b.delta_cross_fit - fb))
            front.append(fb)
    n = len(diffs)
    if n < 2:
        return {"n": n}
    e = np.array(diffs)
    se = e.std(ddof=1) / np.sqrt(n)
    h95, h90 = stats.t.ppf(0.975, n - 1) * se, stats.t.ppf(0.95, n - 1) * se
    margin = 0.2 * float(np.mean(front))
    m = float(e.mean())
    word = ("differs" if m - h95 > 0 or m + h95 < 0 else
            "same effect (equivalent within the margin)" if -margin <= m - h90 and m + h90 <= margin else
            "inconclusive")
    return {"n": n, "m": m, "h95": h95, "h90": h90, "margin": margin, "word": word}


def ablation_outcome(points: pd.DataFrame, r, planned: dict | None = None) -> str:
    """:func:`ablation_reading` in words, against DP-SGD's pooled frontier over every seed."""
    a = ablation_reading(points, r, planned)
    if "m" not in a:
        return f"ablation against the paper rule: not testable ({a['n']} seed(s) with both in DP-SGD's range)"
    m, h95, h90 = a["m"], a["h95"], a["h90"]
    return (f"ablation − paper rule, per seed at equal accuracy: {fmt_pp(m)} [{fmt_pp(m - h95)}, "
            f"{fmt_pp(m + h95)}] pp (95%, {a['n']} seeds); equivalence margin ±{a['margin']:.2f} pp (20% of DP-SGD's "
            f"pooled-frontier Δ there), 90% interval [{fmt_pp(m - h90)}, {fmt_pp(m + h90)}]: <b>{a['word']}</b>")


def ablation_caveats(points: pd.DataFrame, table: pd.DataFrame, planned: dict | None = None, *,
                     first: int = 6) -> str:
    """The ablation's readings that the pooled one hides, computed from the runs, in one sentence each: the cells
    where DP-SGD's C0 path alone reads otherwise (with its margin), and the readings at the first ``first`` seeds of
    the cells topped up past them (the later seeds were run with those readings known)."""
    c0_notes, early_notes = [], []
    for r in table[(table.axis == "accuracy") & (table.rule == ABLATION)].itertuples():
        name = f"{DATASET_LABELS.get(r.dataset, r.dataset)} ε = {r.epsilon:g}"
        pooled, c0 = ablation_reading(points, r, planned), ablation_reading(points, r, planned, c0_only=True)
        if "m" not in pooled:
            continue
        if "m" not in c0:
            c0_notes.append(f"{name}: not testable ({c0['n']} seed(s) with both in the C0 path's range)")
        elif c0["word"] != pooled["word"]:
            c0_notes.append(f"{name}, margin ±{c0['margin']:.2f} pp: {_word(c0)} ({fmt_pp(c0['m'])} "
                            f"[{fmt_pp(c0['m'] - c0['h90'])}, {fmt_pp(c0['m'] + c0['h90'])}], 90%) where the pooled "
                            f"frontier reads {_word(pooled)}")
        early = ablation_reading(points, r, planned, first=first)
        if pooled["n"] > first and "m" in early:
            used = "" if early["n"] == first else f" ({early['n']} of them in DP-SGD's range)"
            early_notes.append(f"{name} {_word(early)}, {fmt_pp(early['m'])} [{fmt_pp(early['m'] - early['h95'])}, "
                               f"{fmt_pp(early['m'] + early['h95'])}]{used}")
    out = []
    if c0_notes:
        out.append("Against DP-SGD's C0 path alone: " + "; ".join(c0_notes) + ".")
    if early_notes:
        out.append(f"At the first {first} seeds (95%), readings that were on the page when the cells' later seeds "
                   "were run (to the cell's seed count, which the seed rule set for the cell's rules, not the "
                   "ablation's own answer; docs/frontier.md names where that answer was smaller): "
                   + "; ".join(early_notes) + ".")
    return " ".join(out)


def _word(reading: dict) -> str:
    return reading["word"].split(" (")[0]


def extra_lr_outcome(r) -> tuple[int | None, str]:
    """One extra-lr row's predicted sign and its reading, judged as the claims points' are (:func:`judged_sign`)."""
    want, judged = judged_sign(r)
    return want, "—" if want is None else judged or f"not testable ({r.verdict})"


def extra_lr_rows(points: pd.DataFrame, planned: dict | None) -> tuple[str, str]:
    """The prediction that each rule's sign stays the same at its extra lrs (docs/frontier.md, "Predictions"):
    the table of those rows, judged cross-fitted as the claims points are, and one sentence tallying it (with the
    unadjusted tally beside it: the family was chosen after the runs)."""
    t = extra_lr_table(points, planned=planned)
    if t.empty:
        return "", "No rule has run at an extra lr yet."
    rows, judged = [], []
    for r in t.itertuples():
        want, outcome = extra_lr_outcome(r)
        judged.append(outcome.split(" (")[0])
        ci = {est: ("—" if not np.isfinite(getattr(r, f"effect_{est}")) else
                    f"{getattr(r, f'effect_{est}'):+.2f} [{getattr(r, f'lo_{est}'):+.2f}, {getattr(r, f'hi_{est}'):+.2f}]")
              for est in ESTIMATORS}
        rows.append(f"<tr><td>{html.escape(DATASET_LABELS.get(r.dataset, r.dataset))}</td><td>{r.epsilon:g}</td>"
                    f"<td>{html.escape(SHORT[r.rule])}</td><td>{r.lr:g}</td><td>{r.seeds}</td>"
                    f"<td>{100 * r.accuracy:.2f}</td><td>{ci['cross_fit']}</td><td>{ci['in_sample']}</td>"
                    f"<td>{html.escape(r.verdict)}</td><td>"
                    + (f"predicted {SIGN_WORDS[want]}: <b>{html.escape(outcome)}</b>" if want is not None else "—")
                    + "</td></tr>")
    order = ("holds", "not confirmed", "fails", "not testable")

    def tally(outcomes: list[str]) -> str:
        counts = pd.Series(outcomes).value_counts()
        return ", ".join(f"{k} {counts[k]}" for k in order if k in counts)

    plain = [extra_lr_outcome(r)[1].split(" (")[0] for r in extra_lr_table(points, planned=planned, family=1)
             .itertuples()]
    line = (f"At the rules' extra lrs the sign was predicted to stay as at the claims lr. Over {len(t)} rows, "
            f"cross-fitted, at the Bonferroni level over these {int(t.family.iloc[0])} rows (a family chosen after "
            f"the runs, before these rows were computed): {tally(judged)}; not testable counts the rows with no "
            f"disparity to remove at that level and those outside DP-SGD's range. Unadjusted (95%): {tally(plain)}.")
    table = ("<table><caption>Each rule at its extra lrs against DP-SGD's frontier at its accuracy: Δ(rule) − "
             "Δ(DP-SGD), pp [Bonferroni interval over these rows]</caption><tr><th>dataset</th><th>ε</th><th>rule</th>"
             "<th>lr</th><th>seeds</th><th>accuracy %</th><th>cross-fitted</th><th>in-sample</th><th>verdict</th>"
             f"<th>prediction</th></tr>{''.join(rows)}</table>")
    return table, line
