"""Δ at equal accuracy (fairdp_core/audit/frontier.py, docs/frontier.md): the frontier, the refusal to extrapolate,
the interval's coverage on simulated frontiers, a rule that only moves along DP-SGD's frontier, and the operating
points of the grid."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fairdp_core.audit import frontier
from fairdp_core.audit.frontier import OUTSIDE, frontier_at, frontier_table, pareto_reading, simulate_coverage
from fairdp_core.config import ConfigError, expand_runs


def test_frontier_by_hand():
    # (0.1, 1), (0.2, 3), (0.3, 2): the last two violate monotonicity and pool to 2.5
    acc, d = np.array([0.1, 0.2, 0.3]), np.array([1.0, 3.0, 2.0])
    got = frontier_at(acc, d, [0.1, 0.15, 0.2, 0.25, 0.3])
    np.testing.assert_allclose(got, [1.0, 1.75, 2.5, 2.5, 2.5])
    # equal accuracies pool; outside the range or one distinct accuracy: no value
    np.testing.assert_allclose(frontier_at([0.1, 0.1, 0.2], [1.0, 3.0, 4.0], [0.1, 0.15]), [2.0, 3.0])
    assert np.isnan(frontier_at(acc, d, [0.05, 0.35])).all()
    assert np.isnan(frontier_at([0.1, 0.1], [1.0, 2.0], [0.1])).all()


def _points(rule_acc, rule_delta, *, seeds=8, noise=0.02, claims_acc=0.896, seed=0, rule_in_sample=None,
            rule_balanced=None, low_c=False):
    """A cell whose DP-SGD frontier is the line Δ = 50·(acc − 0.88) pp over accuracies 0.880-0.900 (five frontier
    points and the claims point, all at C 10), and a rule at (rule_acc, rule_delta) (in-sample Δ ``rule_in_sample``
    where given), with small per-seed noise. Balanced accuracy runs the other way along the frontier (1.79 − acc),
    so the two axes read differently; the rule's balanced accuracy is ``rule_balanced`` (default: the same map).
    ``low_c``: one more DP-SGD point at C 1 (lr 1), as accurate as the lr-1 point with Δ 2 pp higher."""
    rng = np.random.default_rng(seed)
    rows = []

    def add(alg, lr, acc, delta, s, source, clip=10.0, bal=None, d_in=None):
        row = {"dataset": "law_paper", "model": "lr", "epsilon": 10.0, "algorithm": alg, "lr": lr,
               "clip": clip, "seed": s, "source": source, "run": f"{alg}-{lr}-{clip}-{s}", "accuracy": acc,
               "balanced": 1.79 - acc if bal is None else bal, "group_names": ("a", "b"), "clipping": None,
               "gpr": [0, 0]}
        for est in ("cross_fit", "in_sample"):
            d = d_in if (est == "in_sample" and d_in is not None) else delta
            row[f"delta_{est}"] = d + rng.normal(0, noise)
            row[f"null_floor_{est}"] = 0.05
        rows.append(row)

    for s in range(seeds):
        for lr, acc in zip((0.03, 0.3, 1.0, 3.0, 5.0), (0.880, 0.885, 0.890, 0.895, 0.900)):
            add("dpsgd", lr, acc, 50 * (acc - 0.88), s, "frontier")
        if low_c:
            add("dpsgd", 1.0, 0.890, 50 * 0.01 + 2.0, s, "frontier", clip=1.0)
        add("dpsgd", 0.1, claims_acc, 50 * (claims_acc - 0.88), s, "claims")
        add("dpsgd_s_paper", 0.1, rule_acc, rule_delta, s, "claims", bal=rule_balanced, d_in=rule_in_sample)
    return pd.DataFrame(rows)


def test_a_move_along_the_frontier_is_no_change_at_equal_accuracy():
    # the rule sits on DP-SGD's frontier, 1 pp less accurate than DP-SGD's claims point: against that point it
    # "lowers" Δ by 0.5 pp, at equal accuracy it changes nothing
    df = frontier_table(_points(0.886, 50 * 0.006))
    row = df[(df.rule == "dpsgd_s_paper") & (df.axis == "accuracy")].iloc[0]
    assert row.same_lr_hi_cross_fit < 0 and row.same_lr_effect_cross_fit == pytest.approx(-0.5, abs=0.05)
    assert row.lo_cross_fit <= 0 <= row.hi_cross_fit and abs(row.effect_cross_fit) < 0.05
    assert row.verdict == "no change at equal accuracy"
    # and a rule 0.2 pp below the frontier at the same accuracy lowers Δ at equal accuracy
    low = frontier_table(_points(0.886, 50 * 0.006 - 0.2))
    assert low[low.axis == "accuracy"].iloc[0].verdict == "lowers Δ at equal accuracy"


def test_no_extrapolation_outside_dpsgd_range():
    df = frontier_table(_points(0.905, 0.3))  # more accurate than every DP-SGD point
    row = df[df.axis == "accuracy"].iloc[0]
    assert row.verdict == OUTSIDE
    assert np.isnan(row.effect_cross_fit) and np.isnan(row.lo_cross_fit) and row.outside_cross_fit == 8


def test_a_rules_extra_lrs_are_read_against_the_same_frontier_as_a_family_of_their_own():
    """The rule's extra operating points (frontier runs of the rule at other lrs): one row per lr, each against
    DP-SGD's frontier at its own accuracy, at the Bonferroni level over these rows; a point on the frontier reads
    no change, one 0.5 pp above it raises, one more accurate than every DP-SGD point is outside (no number)."""
    from fairdp_core.audit.frontier import extra_lr_table

    pts = _points(0.890, 0.5)
    rng = np.random.default_rng(9)
    extra = []
    for s in range(8):
        for lr, acc, delta in ((0.03, 0.8875, 50 * 0.0075), (0.3, 0.8925, 50 * 0.0125 + 0.5), (3.0, 0.905, 1.0)):
            row = pts[(pts.seed == s) & (pts.algorithm == "dpsgd_s_paper")].iloc[0].to_dict()
            row.update(lr=lr, source="frontier", accuracy=acc, run=f"x-{lr}-{s}",
                       **{f"delta_{e}": delta + rng.normal(0, 0.02) for e in ("cross_fit", "in_sample")})
            extra.append(row)
    allpts = pd.concat([pts, pd.DataFrame(extra)], ignore_index=True)
    t = extra_lr_table(allpts).set_index("lr")
    assert list(t.index) == [0.03, 0.3, 3.0] and (t.family == 3).all() and (t.seeds == 8).all()
    assert t.loc[0.03, "verdict"] == "no change at equal accuracy" and abs(t.loc[0.03, "effect_cross_fit"]) < 0.05
    assert t.loc[0.3, "verdict"] == "raises Δ at equal accuracy"
    assert t.loc[0.3, "effect_cross_fit"] == pytest.approx(0.5, abs=0.05)
    assert t.loc[3.0, "verdict"] == OUTSIDE and np.isnan(t.loc[3.0, "effect_cross_fit"])
    # the interval, by hand: each seed against its own DP-SGD frontier, the paired t interval at level 1 − 0.05/3
    from scipy import stats

    dp = allpts[allpts.algorithm == "dpsgd"]
    arm = allpts[(allpts.algorithm == "dpsgd_s_paper") & (allpts.lr == 0.3)].set_index("seed")
    e = np.array([arm.loc[s, "delta_cross_fit"] - frontier_at(dp[dp.seed == s].accuracy, dp[dp.seed == s]
                                                              .delta_cross_fit, arm.loc[s, "accuracy"])[0]
                  for s in range(8)])
    h = stats.t.ppf(1 - 0.05 / 6, 7) * e.std(ddof=1) / np.sqrt(8)
    assert (t.loc[0.3, "lo_cross_fit"], t.loc[0.3, "hi_cross_fit"]) == pytest.approx((e.mean() - h, e.mean() + h))
    one = extra_lr_table(allpts, family=1).set_index("lr")  # the unadjusted reading is narrower
    assert one.loc[0.3, "hi_cross_fit"] - one.loc[0.3, "lo_cross_fit"] < t.loc[0.3, "hi_cross_fit"] - t.loc[0.3, "lo_cross_fit"]
    # a point whose DP-SGD Δ there is within its null floor has nothing to remove, as the claims points
    flat = allpts.copy()
    flat.loc[flat.algorithm == "dpsgd", "null_floor_cross_fit"] = flat.loc[flat.algorithm == "dpsgd", "null_floor_in_sample"] = 5.0
    assert extra_lr_table(flat).set_index("lr").loc[0.03, "verdict"] == "no disparity to remove"
    # the claims point is not an extra point, and DP-SGD's own frontier runs never are
    assert extra_lr_table(pts).empty


def test_pareto_reading_names_a_point_as_accurate_with_lower_delta():
    # the rule at 0.889 with Δ 0.9 pp: DP-SGD at lr 1.0 (0.890, 0.5 pp) is more accurate with less Δ, chosen on the
    # other seeds in every seed
    got = pareto_reading(_points(0.889, 0.9), ("law_paper", "lr", 10.0), "dpsgd_s_paper")
    assert (got["lr"], got["found"], got["seeds"]) == (1.0, 8, 8) and got["lower"]
    assert got["diff"] == pytest.approx(-0.4, abs=0.05)
    # the rule on the frontier: the point found is no lower; more accurate than every point: none found
    assert not pareto_reading(_points(0.886, 0.3), ("law_paper", "lr", 10.0), "dpsgd_s_paper")["lower"]
    assert pareto_reading(_points(0.905, 0.3), ("law_paper", "lr", 10.0), "dpsgd_s_paper") is None


def test_a_seed_short_of_a_planned_point_is_left_out():
    cell = ("law_paper", "lr", 10.0)
    pts = _points(0.886, 0.3)
    pts = pts[~((pts.seed == 0) & (pts.lr == 3.0))]  # seed 0 is missing its lr-3 point
    planned = {(lr, 10.0) for lr in (0.03, 0.1, 0.3, 1.0, 3.0, 5.0)}
    assert frontier.frontier_points(pts, cell, planned)[1] == list(range(1, 8))
    assert frontier_table(pts, planned={cell: planned}).seeds.iloc[0] == 7
    # a point planned but run on no seed yet: no seed is complete, so no row
    assert frontier_table(pts, planned={cell: planned | {(9.0, 10.0)}}).empty


def test_lower_clip_points_move_the_primary_reading_not_the_c0_one():
    # a DP-SGD point at C 1 as accurate as the rule with a much higher Δ lifts the all-points frontier there: the
    # rule, on DP-SGD's C0 frontier, then "lowers Δ" in the primary reading and shows no change at C0 only
    df = frontier_table(_points(0.890, 50 * 0.01, low_c=True))
    row = df[df.axis == "accuracy"].iloc[0]
    assert row.effect_cross_fit < -0.5 and row.verdict == "lowers Δ at equal accuracy"
    assert abs(row.c0_effect_cross_fit) < 0.05 and row.c0_verdict == "no change at equal accuracy"


def test_the_estimators_and_the_axes_are_read_apart():
    # cross-fitted on the frontier, in-sample 0.3 pp below it: depends on the estimator
    df = frontier_table(_points(0.886, 0.3, rule_in_sample=0.0))
    assert df[df.axis == "accuracy"].iloc[0].verdict == "depends on the estimator"
    # on the frontier by accuracy; by balanced accuracy (which runs the other way) the rule sits where DP-SGD's Δ is
    # 0.75 pp, so there it lowers Δ; balanced is not the primary axis
    df = frontier_table(_points(0.886, 0.3, rule_balanced=1.79 - 0.895))
    acc, bal = (df[df.axis == a].iloc[0] for a in ("accuracy", "balanced"))
    assert acc.primary and not bal.primary
    assert acc.verdict == "no change at equal accuracy" and bal.verdict == "lowers Δ at equal accuracy"
    assert acc.p_bonf_cross_fit == pytest.approx(min(1.0, 31 * acc.p_unadj_cross_fit))


def test_no_disparity_to_remove():
    # DP-SGD's Δ at the rule's accuracy (0.05 pp) within its null floor (0.05): no change reads "no disparity"
    df = frontier_table(_points(0.881, 0.05))
    assert df[df.axis == "accuracy"].iloc[0].verdict == "no disparity to remove"
    # the claims table: no change where DP-SGD's Δ is within its floor, or below the detectable change
    from fairdp_core.audit.verdicts import claims_table

    def runs(base, floor, noise):
        rng, out = np.random.default_rng(0), []
        for s in range(8):
            for alg, d in (("dpsgd", base), ("dpsgd_s_paper", base + rng.normal(0, noise))):
                out.append({"run": f"a-{alg}-{s}", "dataset": "adult", "model": "lr", "algorithm": alg,
                            "epsilon": 10.0, "seed": s, "numerics": 1, "clipping": None,
                            "accuracy": {"mean": 0.85, "largest_predicted_class_share": 0.7, "balanced": 0.8},
                            "attacks": {a: {"delta_pp": d, "null_floor_pp": floor}
                                        for a in ("alooa_cross_fit", "alooa_in_sample")}})
        return out

    assert claims_table(runs(0.04, 0.05, 0.01)).verdict.tolist() == ["no disparity to remove"]  # at the floor
    assert claims_table(runs(0.30, 0.05, 0.5)).verdict.tolist() == ["no disparity to remove"]  # MDE > Δ
    assert claims_table(runs(0.30, 0.05, 0.01)).verdict.tolist() == ["not detected"]
    row = claims_table(runs(0.30, 0.05, 0.01)).iloc[0]
    assert row.detects_18pct and row.detects_37pct


@pytest.mark.parametrize("offset,cloud", [(0.0, 0.0), (-0.2, 0.0), (0.0, 0.2)])
def test_interval_covers_at_its_nominal_rate(offset, cloud):
    # seed 5, 400 simulated studies of 6 seeds: Monte Carlo SE 0.011 about 0.95
    r = simulate_coverage(offset=offset, cloud=cloud, n_sims=400, x_range=(0.894, 0.898), x_sd=0.00005,
                          delta_sd=0.09, seed_sd=0.05, rng=np.random.default_rng(5))
    assert r["coverage"] >= 0.92 and abs(r["bias"]) < 0.02 and r["outside_share"] == 0


def test_coverage_check_rejects_a_wrong_frontier(monkeypatch):
    # a frontier read as the highest DP-SGD Δ of the seed (not the fit at the rule's accuracy) must fail the check
    monkeypatch.setattr(frontier, "frontier_at", lambda acc, d, at: np.array([np.max(d)]))
    r = simulate_coverage(offset=0.0, n_sims=200, x_range=(0.894, 0.898), x_sd=0.00005, delta_sd=0.09,
                          seed_sd=0.05, rng=np.random.default_rng(5))
    assert r["coverage"] < 0.5


def test_grid_points_name_and_plan_runs():
    from fairdp_core.config import GridEntry

    g = GridEntry(dataset="law_paper", model="lr", algorithms=["dpsgd"], epsilons=[10], seeds=2,
                  points=[{"lr": 0.3, "clip": 3.333}, {"lr": 1.0}])
    runs = expand_runs([g], None)
    assert list(runs) == ["law_paper-lr-dpsgd-e10-lr0p3-c3p333-s0", "law_paper-lr-dpsgd-e10-lr1-s0",
                          "law_paper-lr-dpsgd-e10-lr0p3-c3p333-s1", "law_paper-lr-dpsgd-e10-lr1-s1"]
    assert runs["law_paper-lr-dpsgd-e10-lr1-s0"]["clip"] is None
    # a grid without points writes runs as before (no lr or clip key)
    plain = expand_runs([GridEntry(dataset="law_paper", model="lr", algorithms=["dpsgd"], epsilons=[10])], None)
    assert set(plain["law_paper-lr-dpsgd-e10-s0"]) == {"dataset", "model", "algorithm", "epsilon", "seed", "tau",
                                                       "gamma"}


def test_operating_point_wins_in_the_plan(tmp_path):
    import shutil
    from pathlib import Path

    from fairdp_core.config import load_params
    from fairdp_core.stages.plan import train_plan
    from fairdp_core.study.params_files import use_profile

    root = Path(__file__).resolve().parents[1]
    shutil.copytree(root / "profiles", tmp_path / "profiles")
    use_profile("frontier", tmp_path / "params.yaml", tmp_path / "profiles")  # writes runs.yaml too
    p = load_params(tmp_path / "params.yaml")
    spec = train_plan(p, "law_paper-lr-dpsgd-e10-lr0p3-c3p333-s1")["spec"]
    assert (spec["lr"], spec["clip"], spec["epochs"]) == (0.3, 3.333, 20.0)
    paper = train_plan(p, "compas-lr-dpsgd_s_paper-e1-lr0p2-s0")["spec"]
    assert (paper["lr"], paper["clip"], paper["epochs"]) == (0.2, 1.0, 50.0)
    # paired with the claims run of the same seed: the same design and bank seed
    plan = train_plan(p, "law_paper-lr-dpsgd-e10-lr3-c10-s4")
    assert plan["design"] == "law_paper-s4"
    # a clip bound on a rule that has none is refused, naming the run
    runs = dict(p.runs)
    name = "law_paper-lr-dpsgd_s-e10-lr0p3-s0"
    runs[name] = runs[name].model_copy(update={"clip": 2.0})
    with pytest.raises(ConfigError, match=name):
        train_plan(p.model_copy(update={"runs": runs}), name)


def test_committed_frontier_table_recomputes_from_the_committed_summaries(tmp_path):
    """reports/frontier_table.csv (written by the index stage) is frontier_table() of the tracked frontier and claims
    summaries: every row, verdict and number."""
    import shutil
    import subprocess
    from pathlib import Path

    from fairdp_core.audit.frontier import load_points
    from fairdp_core.reporting.frontier import FRONTIER_CLAIMS, FRONTIER_SOURCES, planned_points

    root = Path(__file__).resolve().parents[1]
    dirs = [d for d, _ in FRONTIER_SOURCES]
    tracked = subprocess.run(["git", "ls-files", *dirs, *FRONTIER_CLAIMS], cwd=root,
                             capture_output=True, text=True, check=True).stdout.split()
    for p in tracked:
        if p.endswith(".json"):
            (tmp_path / Path(p).parent).mkdir(parents=True, exist_ok=True)
            shutil.copy(root / p, tmp_path / p)
    assert any(p.startswith("reports/paper/frontier/") for p in tracked), "no frontier summary is committed"
    pts = load_points([tmp_path / d for d in dirs], [tmp_path / d for d in FRONTIER_CLAIMS])
    got = frontier_table(pts, planned=planned_points([root / p for _, p in FRONTIER_SOURCES], pts))
    want = pd.read_csv(root / "reports" / "frontier_table.csv")
    assert list(got.columns) == list(want.columns) and len(got) == len(want)
    for col in want.columns:
        if want[col].dtype.kind in "fi":
            np.testing.assert_allclose(got[col].to_numpy(float), want[col].to_numpy(float), rtol=1e-5, atol=1e-6,
                                       equal_nan=True, err_msg=col)
        else:
            assert got[col].astype(str).tolist() == want[col].astype(str).tolist(), col


def test_the_ablation_is_read_at_its_own_point_and_judged_against_the_paper_rule():
    """The ablation (fixed group bounds) has no claims run: its row reads its frontier-source point. Against the
    paper rule it is judged on the paired per-seed difference of their effects at equal accuracy: the same effect
    reads "same effect" (TOST within 20% of DP-SGD's Δ), 0.2 pp apart "differs", a noisy one "inconclusive"."""
    from fairdp_core.reporting.frontier_why import ablation_outcome

    df = _points(0.886, 50 * 0.006 - 0.2, noise=0.005)  # the paper rule lowers Δ by 0.2 pp at equal accuracy

    def with_ablation(offset, noise):
        rng = np.random.default_rng(3)
        abl = df[df.algorithm == "dpsgd_s_paper"].copy()
        abl["algorithm"], abl["source"] = frontier.ABLATION, "frontier"
        abl["accuracy"], abl["balanced"] = 0.892, 1.79 - 0.892
        for est in ("cross_fit", "in_sample"):  # DP-SGD's frontier at 0.892 is 0.6 pp
            abl[f"delta_{est}"] = 50 * 0.012 + offset + rng.normal(0, noise, len(abl))
        pts = pd.concat([df, abl], ignore_index=True)
        table = frontier_table(pts)
        return pts, table[(table.rule == frontier.ABLATION) & (table.axis == "accuracy")].iloc[0]

    pts, row = with_ablation(0.0, 0.005)  # on the frontier: no change, and 0.2 pp above the rule's effect
    assert row.seeds == 8 and row.x_rule == pytest.approx(0.892)
    assert row.verdict == "no change at equal accuracy" and abs(row.effect_cross_fit) < 0.05
    assert "<b>differs</b>" in ablation_outcome(pts, row)
    pts, row = with_ablation(-0.2, 0.005)  # the rule's effect exactly
    assert row.verdict == "lowers Δ at equal accuracy"
    assert "<b>same effect" in ablation_outcome(pts, row)
    pts, row = with_ablation(-0.2, 0.5)  # the same mean, far noisier
    assert "<b>inconclusive</b>" in ablation_outcome(pts, row)


def test_the_ablations_hidden_readings_are_computed_from_the_runs():
    """The page's caveats on the ablation are computed, not written in: its reading at the first 6 seeds is the
    reading of those seeds alone, and its C0-path reading that of DP-SGD's points at the cell's C0 alone (here a
    dominated C = 1 point is dropped); both are named in the sentence only where they read otherwise or were
    followed by more seeds."""
    from fairdp_core.reporting.frontier_why import ablation_caveats, ablation_reading

    df = _points(0.886, 50 * 0.006 - 0.2, noise=0.005, low_c=True)
    rng = np.random.default_rng(3)
    abl = df[df.algorithm == "dpsgd_s_paper"].copy()
    abl["algorithm"], abl["source"], abl["accuracy"] = frontier.ABLATION, "frontier", 0.889
    for est in ("cross_fit", "in_sample"):
        abl[f"delta_{est}"] = 50 * 0.009 + rng.normal(0, 0.01, len(abl))  # on DP-SGD's C0 path: differs from the rule
    pts = pd.concat([df, abl], ignore_index=True)
    table = frontier_table(pts)
    row = table[(table.rule == frontier.ABLATION) & (table.axis == "accuracy")].iloc[0]
    early, alone = ablation_reading(pts, row, first=6), ablation_reading(pts[pts.seed < 6], row)
    assert early["n"] == 6 and ablation_reading(pts, row)["n"] == 8
    assert early == pytest.approx(alone) and early["word"] == alone["word"]
    c0, without = ablation_reading(pts, row, c0_only=True), ablation_reading(pts[pts["clip"] == 10.0], row)
    assert c0 == pytest.approx(without) and c0 != pytest.approx(ablation_reading(pts, row))
    text = ablation_caveats(pts, table)
    assert "At the first 6 seeds (95%)" in text and f"{early['m']:+.2f}" in text
    assert ("Against DP-SGD's C0 path alone" in text) == (c0["word"] != ablation_reading(pts, row)["word"])
    assert ablation_caveats(pts[pts.seed < 6], frontier_table(pts[pts.seed < 6])).find("At the first") == -1


def test_the_blinded_seed_rule_reads_spreads_only():
    """The seeds the rule asks for depend on the uncentred spread of the per-seed effects against 20% of DP-SGD's
    Δ there: a tight spread asks for the minimum, a wide one for the cap; flipping every sign changes nothing."""
    f = np.full(6, 1.0)  # DP-SGD's Δ at the rule's accuracy: 1 pp, so the target is 0.2 pp
    tight, wide = np.array([0.02, -0.03, 0.01, 0.0, 0.02, -0.01]), np.array([0.5, -0.4, 0.6, -0.5, 0.4, -0.6])
    assert frontier._seeds_asked(tight, f) == 6
    assert frontier._seeds_asked(wide, f) == 16
    mid = np.array([0.2, -0.15, 0.18, -0.2, 0.16, -0.17])
    assert 6 < frontier._seeds_asked(mid, f) < 16
    assert frontier._seeds_asked(-mid, f) == frontier._seeds_asked(mid, f)
    row = frontier_table(_points(0.886, 50 * 0.006))
    assert row[row.axis == "accuracy"].iloc[0].seeds_asked_cross_fit >= 6


def test_a_cell_in_progress_says_so():
    """A cell with frontier runs but no complete seed: how many runs are stored, not "not run yet"."""
    import pandas as pd

    from fairdp_core.reporting.frontier import cell_progress

    pts = pd.DataFrame({"dataset": ["mnist", "mnist", "mnist"], "model": ["mlp"] * 3, "epsilon": [10.0] * 3,
                        "source": ["frontier", "frontier", "claims"]})
    assert cell_progress(pts, ("mnist", "mlp", 10.0)) == "in progress: 2 frontier runs stored, no seed complete yet"
    assert cell_progress(pts, ("bank", "lr", 10.0)) == "not run yet"
    assert cell_progress(pd.DataFrame(), ("bank", "lr", 10.0)) == "not run yet"


def test_the_first_screen_answers_at_equal_accuracy_with_its_seeds():
    """The index's bold answer is the deciding rule at equal accuracy over the cells run: golden text, the cells named
    where it lowers or raises Δ, the outside-range cells not counted as tested, and the seeds the verdicts rest on
    where the committed seed rule asked for more (a departure from the design, said where the counts are read)."""
    import html
    import re

    from fairdp_core.reporting.frontier import frontier_answer

    def table(asked, verdicts=None, seeds=None):
        verdicts = verdicts or ["no change at equal accuracy"] * len(asked)
        seeds = seeds or [6] * len(asked)
        return pd.DataFrame([{"dataset": d, "model": "lr", "epsilon": 10.0, "rule": "dpsgd_s_paper",
                              "axis": "accuracy", "verdict": v, "seeds": s, "seeds_asked_cross_fit": a,
                              "seeds_asked_in_sample": np.nan}
                             for d, a, v, s in zip(["bank", "adult", "law_paper", "compas"], asked, verdicts, seeds)])

    def text(t, n):
        return html.unescape(re.sub(r"<[^>]+>", "", frontier_answer(t, n)))

    assert text(table([16, 9]), 3) == (
        "At equal accuracy, not established in any cell (not evidence of no effect): the paper's rule "
        "made DP lowers Δ in 0 of 2 cells, raises it in 0 and shows no detectable change in 2 (2 of 3 cells run; all "
        "still at 6 seeds).")
    mixed = table([16, 16, 6, np.nan], ["lowers Δ at equal accuracy", "raises Δ at equal accuracy",
                                        "no disparity to remove", "outside DP-SGD's range"], [16, 6, 6, 6])
    assert text(mixed, 4) == (
        "At equal accuracy, not in general: the paper's rule made DP lowers Δ in 1 of 3 cells (Bank "
        "ε = 10), raises it in 1 (Adult ε = 10), shows no detectable change in 0, has nothing to remove in 1 and lies "
        "outside DP-SGD's accuracy range in 1 (1 cell still at 6 seeds).")
    assert text(table([6, np.nan]), 2).endswith("shows no detectable change in 2.")
    assert text(table([6]), 2).endswith("(1 of 2 cells run).")
    assert text(table([16, 16], seeds=[6, 15]), 2).endswith("(all still at 6-15 seeds).")
    assert text(pd.DataFrame(), 11) == "At equal accuracy: not yet decided, 0 of 11 cells run."


def test_a_rule_below_the_pooled_frontier_but_above_dpsgds_best_point_is_said_so():
    """DP-SGD's frontier pools every operating point: a dominated one (C 1, as accurate as lr 1 at C 10 with Δ 2 pp
    higher) lifts it. A rule at that accuracy with Δ 1.0 then lowers Δ at equal accuracy (against the pooled 1.5),
    while DP-SGD at lr 1, C 10 is as accurate with Δ 0.5 and its C0 path alone says the rule raises Δ: the answer
    counts the cell apart, names what says otherwise, and its first words do not count it as lowering Δ. A rule
    truly below DP-SGD's best point is not flagged."""
    import html
    import re

    from fairdp_core.reporting.frontier import frontier_answer, frontier_only, frontier_quoted

    cell = ("law_paper", "lr", 10.0)
    pts = _points(0.890, 1.0, low_c=True)
    table = frontier_table(pts)
    row = table[table.axis == "accuracy"].iloc[0]
    assert row.verdict == "lowers Δ at equal accuracy" and row.c0_verdict == "raises Δ at equal accuracy"
    flagged = frontier_only(pts, table)
    assert flagged == {cell: ("C0 path", "best point")}
    text = html.unescape(re.sub(r"<[^>]+>", "", frontier_answer(table, 1, flagged)))
    assert text == ("At equal accuracy, not established in any cell (not evidence of no effect): the paper's rule made "
                    "DP lowers Δ in 0 of 1 cells and in 1 more only against DP-SGD's pooled frontier (Law ε = 10), "
                    "raises it in 0 and shows no detectable change in 0."), text
    assert "title='not its C0 path or best point'" in frontier_answer(table, 1, flagged)
    assert frontier_quoted(table, flagged) == {cell: "lowers vs pooled frontier, raises vs C0 path"}
    from fairdp_core.reporting.frontier import frontier_section

    section = html.unescape(re.sub(r"<[^>]+>", "", frontier_section(pts, table, [cell], None, flagged)))
    assert "counts apart the paper rule's lower verdicts against DP-SGD's pooled frontier only: Law ε = 10 (not its " \
        "C0 path or best point)." in section
    assert frontier_quoted(table) == {cell: "lowers Δ"}
    plain = _points(0.890, 1.0)  # no dominated point: the rule raises Δ, nothing to qualify
    assert frontier_only(plain, frontier_table(plain)) == {}
    good = _points(0.890, 0.2)  # below DP-SGD's best point as accurate, and below its C0 path
    assert frontier_only(good, frontier_table(good)) == {}
    # Δ 0.55, just above DP-SGD's lr-1 point (0.5): the best point is lower, the C0 path cannot tell (no change)
    mid = _points(0.890, 0.55, low_c=True)
    mid_table = frontier_table(mid)
    assert frontier_only(mid, mid_table) == {cell: ("best point",)}
    assert frontier_quoted(mid_table, frontier_only(mid, mid_table)) == {cell: "lowers vs pooled frontier, not vs best point"}


def test_the_figures_flattest_cell_reads_complete_seeds_and_needs_two_points():
    """The caption's narrowest accuracy range is over DP-SGD's seed-mean points of the seeds that hold every point:
    2 pp on the toy frontier (0.880-0.900), and NaN (left out of the caption) with one DP-SGD point."""
    from fairdp_core.reporting.frontier import _accuracy_span

    cell = ("law_paper", "lr", 10.0)
    df = _points(0.886, 0.1)
    assert _accuracy_span(df, cell) == (pytest.approx(2.0), "Law ε = 10")
    one = df[(df.algorithm != "dpsgd") | ((df.lr == 0.3) & (df.source == "frontier"))]
    assert np.isnan(_accuracy_span(one, cell)[0])
