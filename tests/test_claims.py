"""The claims campaign (fairdp_core/study/claims.py) and its verdicts (fairdp_core/audit/verdicts.py): the profile's
effective settings are the paper's, the committed summaries come from this repository's history and the profile's
plan, the index's verdicts recompute from them, and the verdict rules refuse a test that is not like for like or
whose estimators disagree."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from fairdp_core.audit.verdicts import claims_table, degenerate
from fairdp_core.cli import use_profile
from fairdp_core.config import load_params

ROOT = Path(__file__).resolve().parents[1]
SUMMARIES = ROOT / "reports" / "paper" / "claims"
# the paper's released per-dataset configs: (clip, epochs); lr 0.1 and batch 256 everywhere
PAPER_CONFIGS = {"adult": (5.0, 20), "bank": (5.0, 20), "law_paper": (10.0, 20), "credit": (10.0, 20),
                 "compas": (1.0, 50), "law_paper_c5": (5.0, 20)}


# Cells whose arms run at their own lr, tuned outside ε (docs/claims.md): COMPAS, where at the paper's lr the arms
# are not a like-for-like test.
TUNED_LR = {("compas", "dpsgd"): 0.2, ("compas", "dpsgd_s_paper"): 0.5, ("compas", "dpsgd_s"): 0.2,
            ("compas", "dpsgd_s_paper_code"): 2.0, ("credit", "dpsgd_s"): 2.0, ("law_paper", "dpsgd_s"): 1.0}


def _profile_params(tmp_path_factory, profile: str):
    d = tmp_path_factory.mktemp(profile)
    shutil.copytree(ROOT / "profiles", d / "profiles")
    use_profile(profile, d / "params.yaml", d / "profiles")
    return load_params(d / "params.yaml")


@pytest.fixture(scope="module")
def claims_params(tmp_path_factory):
    return _profile_params(tmp_path_factory, "claims")


def test_claims_profile_runs_at_the_papers_design(claims_params):
    """m = n, 2R = 400, lr 0.1, batch 256 and each dataset's clip bound and epochs (the default profile's tuned lr
    must not leak in through the merged overrides), except the arms whose lr was tuned per arm outside ε (TUNED_LR);
    DP-SGD and the three rules at ε 1 and 10, SGD at 2 seeds."""
    from fairdp_core.stages.plan import train_plan

    p = claims_params
    assert p.audit.m == "all" and p.audit.R == 200
    for name, run in p.runs.items():
        spec = train_plan(p, name)["spec"]
        clip, epochs = PAPER_CONFIGS[run.dataset]
        lr = TUNED_LR.get((run.dataset, run.algorithm), 0.1)
        assert (spec["lr"], spec["batch_size"], spec["epochs"]) == (lr, 256, epochs), name
        assert spec.get("clip", clip) == clip, name
    cells = {(r.dataset, r.algorithm, r.epsilon) for r in p.runs.values()}
    for ds in ("adult", "bank", "law_paper", "credit", "compas"):
        for rule in ("dpsgd", "dpsgd_s_paper", "dpsgd_s", "dpsgd_s_paper_code"):
            assert {(ds, rule, 1.0), (ds, rule, 10.0)} <= cells
        assert sum(r.dataset == ds and r.algorithm == "sgd" for r in p.runs.values()) == 2


def _summaries(where: Path = SUMMARIES) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(where.glob("*.json"))]


@pytest.mark.parametrize("profile", ["claims", "claims_mnist", "claims_mnist_cnn", "claims_utkface", "frontier",
                                     "frontier_mnist"])
def test_committed_summaries_come_from_history_and_the_profile(profile, tmp_path_factory):
    """Every committed summary of a campaign profile: its commit is an ancestor of HEAD, and its effective plan
    (train and attack plans, the attacks run) is that profile's for that run, hash included."""
    from fairdp_core.study.claims import effective_plan, plan_hash

    claims_params = _profile_params(tmp_path_factory, profile)
    summaries = _summaries(ROOT / "reports" / "paper" / profile)
    if not summaries:
        pytest.skip(f"no {profile} summary committed yet")
    commits = {s["commit"] for s in summaries}
    # A commit lost with a session whose hand-in did not land stands for the commit that landed its tree, with the
    # reason and a rerun check written down (reports/paper/lost_commits.json).
    lost = json.loads((ROOT / "reports" / "paper" / "lost_commits.json").read_text())
    for c in commits:
        assert "+" not in c, c
        if c in lost:
            assert _git_has(c) is False, f"{c} is in history: it is not lost"
            assert lost[c]["why"] and lost[c]["rerun_check"], c
            # exactly the runs it made, no later summary stamped with it
            assert sorted(s["run"] for s in summaries if s["commit"] == c) == lost[c]["runs"], c
            c = lost[c]["landed_as"]
        r = subprocess.run(["git", "merge-base", "--is-ancestor", c, "HEAD"], cwd=ROOT)
        assert r.returncode == 0, f"summary commit {c} is not an ancestor of HEAD"
    for s in summaries:
        plan = effective_plan(claims_params, s["run"])
        assert s["plan"] == json.loads(json.dumps(plan)), s["run"]
        assert s["plan_sha256"] == plan_hash(plan), s["run"]


def _git_has(commit: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True).returncode == 0


def _tracked_summaries() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "reports/paper/claims", "reports/paper/claims_mnist",
                          "reports/paper/claims_mnist_cnn", "reports/paper/claims_utkface"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / p for p in out if p.endswith(".json")]  # a directory's README is not a summary


def test_index_verdicts_recompute_from_the_committed_summaries():
    """Every row of the committed index's claims table (verdict, both estimators' differences and Bonferroni
    intervals, seeds) is what claims_frame computes from the committed summaries (git-tracked only: a campaign may
    be writing new ones), and reports/claims_table.csv holds the same rows."""
    import pandas as pd

    from fairdp_core.reporting.claims import CLAIMS_SOURCES, claims_frame

    df, _ = claims_frame([ROOT / d for d, _ in CLAIMS_SOURCES], [ROOT / p for _, p in CLAIMS_SOURCES],
                         files=_tracked_summaries())
    page = (ROOT / "reports" / "index.html").read_text()
    rows = dict(re.findall(r"<tr data-key='([^']+)'>(.*?)</tr>", page))
    assert len(rows) == len(df)
    for r in df.itertuples():
        html = rows[f"{r.dataset}|{r.model}|{r.epsilon:g}|{r.rule}"]
        verdict = re.search(r"<td class='verdict'><b>([^<]*)</b>", html).group(1)
        assert verdict.startswith(r.verdict), (html, r.verdict)
        for est in ("cross_fit", "in_sample"):
            lo, hi = getattr(r, f"lo_bonf_{est}"), getattr(r, f"hi_bonf_{est}")
            assert f"{getattr(r, f'diff_{est}'):+.3f} [{lo:+.3f}, {hi:+.3f}]" in html, (est, html)
        assert f"<td>{r.seeds}</td>" in html
    if len(df):
        csv = pd.read_csv(ROOT / "reports" / "claims_table.csv")
        assert list(csv.verdict) == list(df.verdict)
        assert np.allclose(csv.diff_cross_fit, df.diff_cross_fit, rtol=1e-5)


def _run(ds, alg, seed, d_cf, d_in, acc=0.85, eps=10.0, top=0.7, balanced=0.8):
    return {"run": f"{ds}-lr-{alg}-e{eps:g}-s{seed}", "dataset": ds, "model": "lr", "algorithm": alg, "epsilon": eps,
            "seed": seed, "numerics": 1, "clipping": None,
            "accuracy": {"mean": acc, "largest_predicted_class_share": top, "balanced": balanced},
            "attacks": {"alooa_cross_fit": {"delta_pp": d_cf}, "alooa_in_sample": {"delta_pp": d_in}}}


def _bank(rule_cf, rule_in, *, seeds=8, acc_rule=0.85, top_rule=0.7, noise=0.01):
    """DP-SGD at Δ 1.0 pp on every seed; the rule at 1.0 + rule_cf (cross-fitted) and 1.0 + rule_in (in-sample),
    each seed jittered by ``noise``."""
    rng = np.random.default_rng(0)
    out = []
    for s in range(seeds):
        out.append(_run("adult", "dpsgd", s, 1.0, 1.0))
        e = rng.normal(0, noise, 2)
        out.append(_run("adult", "dpsgd_s_paper", s, 1.0 + rule_cf + e[0], 1.0 + rule_in + e[1], acc=acc_rule,
                        top=top_rule))
    return out


def test_verdicts_by_hand():
    """A clear fall under both estimators is reproduced; a clear rise contradicted; no change not detected."""
    assert claims_table(_bank(-0.3, -0.3)).verdict.tolist() == ["reproduced"]
    assert claims_table(_bank(+0.3, +0.3)).verdict.tolist() == ["contradicted"]
    assert claims_table(_bank(0.0, 0.0, noise=0.2)).verdict.tolist() == ["not detected"]
    # 5 seeds: too few for a verdict, however clear
    assert claims_table(_bank(-0.3, -0.3, seeds=5)).verdict.tolist() == ["too few seeds"]


def test_estimator_disagreement_reads_depends_on_the_estimator():
    df = claims_table(_bank(-0.3, +0.3))
    assert df.category_cross_fit.tolist() == ["lowers"] and df.category_in_sample.tolist() == ["raises"]
    assert df.verdict.tolist() == ["depends on the estimator"]
    assert claims_table(_bank(-0.3, 0.0, noise=0.2)).verdict.tolist() == ["depends on the estimator"]


def test_degenerate_or_unequal_arms_get_no_verdict():
    """A degenerate arm (≥ 99% one class), or arms more than 2 pp apart in accuracy, is no like-for-like test: never
    reproduced or contradicted, whatever Δ does."""
    for bank in (_bank(-0.3, -0.3, top_rule=0.995), _bank(+0.3, +0.3, acc_rule=0.82), _bank(-0.3, -0.3, acc_rule=0.88)):
        assert claims_table(bank).verdict.tolist() == ["not a like-for-like test"]
    assert claims_table(_bank(-0.3, -0.3, acc_rule=0.835)).verdict.tolist() == ["reproduced"]  # 1.5 pp apart
    assert degenerate({"largest_predicted_class_share": 0.99, "balanced": 0.9})
    assert degenerate({"largest_predicted_class_share": 0.5, "balanced": 0.51})
    assert not degenerate({"largest_predicted_class_share": 0.9, "balanced": 0.6})


def test_holm_and_bonferroni_over_the_whole_table():
    """Twenty cells each with the same borderline fall: alone it would be significant (t p ≈ 0.01), but Holm over
    the 20 rows keeps none, and the Bonferroni interval at 1 − 0.05/20 is wider than the unadjusted one."""
    from scipy import stats

    rows = []
    for c in range(20):
        for s in range(8):
            d = -0.1 + 0.1 * (s % 2) - 0.02  # per-seed differences -0.12 / -0.02: mean -0.07
            rows.append({**_run(f"d{c}", "dpsgd", s, 1.0, 1.0)})
            rows.append({**_run(f"d{c}", "dpsgd_s_paper", s, 1.0 + d, 1.0 + d)})
    df = claims_table(rows)
    assert len(df) == 20
    p = df.p_t_cross_fit.iloc[0]
    assert p < 0.05 and (df.p_holm_cross_fit > 0.05).all() and (df.verdict == "not detected").all()
    sd, n = df.sd_cross_fit.iloc[0], 8
    assert df.hi_bonf_cross_fit.iloc[0] - df.diff_cross_fit.iloc[0] == pytest.approx(
        stats.t.ppf(1 - 0.05 / 40, n - 1) * sd / np.sqrt(n))


_BANK_DIGEST = """
import hashlib, numpy as np, torch
from fairdp_core.engine import TrainSpec, train_bank
rng = np.random.default_rng(0)
X = rng.normal(size=(400, 6)).astype(np.float32)
y = (X[:, 0] + 0.3 * rng.normal(size=400) > 0).astype(np.int64)
import sys
K = int(sys.argv[2])
g = (X[:, 1] > 0.5).astype(np.int64) if K == 2 else np.digitize(X[:, 1], np.quantile(X[:, 1], [0.5, 0.75, 0.95]))
member = rng.random((4, 400)) < 0.5
spec = TrainSpec(algorithm=sys.argv[1], model="lr", epochs=2, batch_size=64, lr=0.1, clip=1.0, target_epsilon=10.0,
                 delta=1e-5, accountant="rdp")
torch.set_num_threads(1)
bank = train_bank(X, y, g, member, spec, n_classes=2, n_groups=K, seed=7, progress=False)
loss, _ = bank.evaluate(X, y)
print(hashlib.sha256(np.ascontiguousarray(loss, dtype=np.float32).tobytes()).hexdigest()[:16])
"""
# algorithm -> (its numerics version, the digests of its small bank's losses on the CPUs it was measured on). The
# last bits of float32 kernels differ between CPU families even with MKL_CBWR=COMPATIBLE (docs/frontier.md, "How it
# runs"): dc5769f5... on the machines of sessions 1-14 and on an AVX2 AMD EPYC (2026-12-07), 89b7cbf0... on an
# AVX-512 (FP16) Xeon, 2026-12-06, before the stages pinned torch's AVX2 kernels (ATEN_CPU_CAPABILITY=avx2, which
# gives dc5769f5... on the EPYC; its digest on an AVX-512 machine is not yet measured). A new machine whose digest is
# neither says so here; a change to the engine changes the digest on every machine.
# The paper rules on the dense backend with K = 4 groups read their sums' Gram matrix (numerics_gram), measured on
# the AVX2 EPYC only; version 3 (before the cached input pairs) gave 8f70c4f5... and 96fdbfe8... there. Version 5
# (the Gram matrix's float64 products through numpy's OpenBLAS instead of torch's MKL) rounds those float64 products
# otherwise, but these banks' bytes stayed what they were at version 4 (their bounds are float32). With K = 2
# they keep K passes and the engine's version 1 (the LR cells): the same digests before and after that change.
GOLDEN_DIGESTS = {("dpsgd", 2): (1, {"dc5769f5eb041a1d", "89b7cbf039f6db62"}),
                  ("dpsgd_s_paper", 2): (1, {"3fe2e23a376c2040"}),
                  ("dpsgd_s_paper_code", 2): (1, {"ddd14b4561847ac9"}),
                  ("dpsgd_s_paper", 4): (5, {"eda4029e9b76b062"}),
                  ("dpsgd_s_paper_code", 4): (5, {"8924d39eecbeaff8"})}


@pytest.mark.slow
@pytest.mark.parametrize(("algorithm", "K"), sorted(GOLDEN_DIGESTS))
def test_numerics_version_pins_a_banks_bits(algorithm, K):
    """A small bank's bytes (DP-SGD; the paper rules where they read the Gram matrix of K = 4 group sums), pinned
    for its numerics version, in a fresh process with the stages' reproducibility settings (MKL_CBWR): a change to
    the engine that changes them fails here and must bump the version (claims summaries of another version never
    pool with these)."""
    import os
    import sys

    from fairdp_core.stages import MALLOC_ENV, REPRO_ENV
    from fairdp_core.study.claims import numerics_of

    env = {**os.environ, **MALLOC_ENV, **REPRO_ENV, "MKL_CBWR": "COMPATIBLE"}
    out = subprocess.run([sys.executable, "-c", _BANK_DIGEST, algorithm, str(K)], env=env, capture_output=True,
                         text=True, check=True)
    version, digests = GOLDEN_DIGESTS[algorithm, K]
    assert numerics_of(algorithm, "lr", K) == version and out.stdout.strip() in digests, out.stdout


def test_a_direction_is_never_stated_beside_an_interval_that_holds_zero():
    """Holm can reject where the Bonferroni interval printed beside it still holds 0: such a row reads unchanged,
    so "reproduced" always comes with intervals below 0 under both estimators (and "contradicted" above)."""
    rng = np.random.default_rng(3)
    for _trial in range(30):
        rows = []
        for c in range(6):
            effect = rng.normal(0, 0.15)
            for s in range(6):
                d = effect + rng.normal(0, 0.1)
                rows += [_run(f"d{c}", "dpsgd", s, 1.0, 1.0), _run(f"d{c}", "dpsgd_s_paper", s, 1.0 + d, 1.0 + d)]
        df = claims_table(rows)
        for r in df.itertuples():
            if r.verdict == "reproduced":
                assert r.hi_bonf_cross_fit < 0 and r.hi_bonf_in_sample < 0
            if r.verdict == "contradicted":
                assert r.lo_bonf_cross_fit > 0 and r.lo_bonf_in_sample > 0
            if r.category_cross_fit == "unchanged":
                assert not (r.p_holm_cross_fit < 0.05 and (r.hi_bonf_cross_fit < 0 or r.lo_bonf_cross_fit > 0))


def test_the_comparison_is_paired_by_seed():
    """DP-SGD's Δ varies a lot between seeds and the rule follows it 0.1 pp lower: only a paired test finds the
    fall (an unpaired comparison, or seeds mis-paired, would not)."""
    rows = []
    for s in range(8):
        base = 1.0 + 0.5 * (s % 4)
        rows += [_run("adult", "dpsgd", s, base, base),
                 _run("adult", "dpsgd_s_paper", s, base - 0.1 + 0.005 * (s % 2), base - 0.1 - 0.005 * (s % 2))]
    df = claims_table(rows)
    assert df.verdict.tolist() == ["reproduced"] and df.diff_cross_fit.iloc[0] == pytest.approx(-0.1 + 0.0025)


def test_boundaries_six_seeds_and_two_points():
    assert claims_table(_bank(-0.3, -0.3, seeds=6)).verdict.tolist() == ["reproduced"]
    assert claims_table(_bank(-0.3, -0.3, acc_rule=0.87)).verdict.tolist() == ["reproduced"]  # exactly 2 pp
    assert claims_table(_bank(-0.3, -0.3, acc_rule=0.8701)).verdict.tolist() == ["not a like-for-like test"]


def test_a_degenerate_dpsgd_seed_or_balanced_gap_voids_the_test():
    rows = _bank(-0.3, -0.3)
    rows[0]["accuracy"]["largest_predicted_class_share"] = 0.995  # DP-SGD's seed 0 predicts one class
    assert claims_table(rows).verdict.tolist() == ["not a like-for-like test"]
    rows = _bank(-0.3, -0.3)
    for r in rows:
        if r["algorithm"] == "dpsgd_s_paper":
            r["accuracy"]["balanced"] = 0.77  # same accuracy, 3 pp lower balanced accuracy
    assert claims_table(rows).verdict.tolist() == ["not a like-for-like test"]
    with pytest.raises(ValueError, match="degenerate"):
        degenerate({"mean": 0.8})


def test_a_missing_delta_drops_that_seed_from_both_arms():
    rows = _bank(-0.3, -0.3, seeds=8)
    rows[1]["attacks"]["alooa_cross_fit"]["delta_pp"] = None  # the rule's seed 0, as jsonable writes a NaN
    df = claims_table(rows)
    assert df.n_cross_fit.iloc[0] == 7 and df.n_in_sample.iloc[0] == 8 and df.verdict.tolist() == ["reproduced"]
    rows = _bank(-0.3, -0.3, seeds=6)
    rows[1]["attacks"]["alooa_cross_fit"]["delta_pp"] = float("nan")
    assert claims_table(rows).verdict.tolist() == ["too few seeds"]


def test_seeds_needed_is_blind_to_which_arm_is_which():
    """The seed rule reads sqrt(mean d²) and the pooled Δ: swapping the arms gives the same answer, and a hand case
    (every |d| = 0.1 pp, pooled Δ 1.0 pp, target 0.2 pp: SD/target = 0.5) needs the 6-seed minimum, while |d| = 0.2
    (SD/target = 1) needs 10 (noncentral t, 80% power at α = 0.05)."""
    from fairdp_core.study.claims import seeds_needed

    def part(dd):
        out = []
        for s, d in enumerate(dd):
            out += [_run("law", "dpsgd", s, 1.0 - d / 2, 1.0 - d / 2), _run("law", "dpsgd_s_paper", s, 1.0 + d / 2,
                                                                              1.0 + d / 2)]
        return out

    assert seeds_needed(part([0.1, -0.1] * 3))["seeds"] == 6
    assert seeds_needed(part([0.2, -0.2] * 3))["seeds"] == 10
    assert seeds_needed(part([0.2, 0.2] * 3)) == seeds_needed(part([-0.2, -0.2] * 3))  # blind to the sign
    assert seeds_needed(part([1.0, -1.0] * 3))["seeds"] == 16  # capped


def test_run_part_runs_seed_by_seed_until_its_target(monkeypatch, claims_params, tmp_path):
    """With a stubbed run (no training): 6 seeds of 4 arms first, then the blinded target; an SGD part stops at its
    2 seeds; a part already run is read back, never rerun."""
    import fairdp_core.study.claims as claims

    calls = []

    def fake(params, name, part, summaries, *, commit, progress=True):
        r = params.runs[name]
        d = {"dpsgd": 0.0, "dpsgd_s_paper": 0.2 * (1 if r.seed % 2 else -1)}.get(r.algorithm, 0.0)
        s = {**_run(r.dataset, r.algorithm, r.seed, 1.0 + d, 1.0 + d), "run": name, "plan_sha256": "x",
             "numerics": claims.numerics_of(r.algorithm, r.model, 2), "group_names": ["a", "b"],
             "wall_s": {"train": 0, "attack": 0, "total": 0}}
        calls.append(name)
        claims.summary_path(summaries, name).write_text(json.dumps(s))
        return s

    monkeypatch.setattr(claims, "run_one", fake)
    monkeypatch.setattr(claims, "plan_hash", lambda plan: "x")
    got = claims.run_part(claims_params, "law_paper-lr-e10", tmp_path, commit="c", log=lambda m: None)
    seeds = sorted({s["seed"] for s in got})
    assert seeds == list(range(10)) and len(calls) == 4 * 10  # |d| = 0.2, pooled Δ 1.0: 10 seeds
    assert [n.split("-")[-1] for n in calls[:4]] == ["s0"] * 4  # every arm of a seed before the next seed
    calls.clear()
    claims.run_part(claims_params, "law_paper-lr-e10", tmp_path, commit="c", log=lambda m: None)
    assert calls == []  # nothing rerun
    assert len(claims.run_part(claims_params, "law_paper-lr-sgd", tmp_path, commit="c", log=lambda m: None)) == 2


def test_the_answer_when_nothing_is_detected():
    """Golden text: every tested cell 'not detected' is said as not established, never as refuted."""
    import html
    import tempfile

    from fairdp_core.reporting.claims import claims_first_screen

    with tempfile.TemporaryDirectory() as tmp:
        for s in _bank(0.0, 0.0, noise=0.2):
            s = {**s, "dataset": "law_paper", "wall_s": {"train": 1, "signals": 0, "attack": 1, "overhead": 0,
                                                          "total": 2}, "part": "p",
                 "accounting": {"sampling": "poisson", "accountant": "rdp", "delta": 1e-5}}
            (Path(tmp) / f"{s['algorithm']}-{s['seed']}.json").write_text(json.dumps(s))
        page = html.unescape(re.sub(r"<[^>]+>", "", claims_first_screen(Path(tmp), ROOT / "profiles" / "claims.yaml")))
    assert ("Not established in any like-for-like cell (not evidence of no effect): in 1 like-for-like cell (1 of 10 run; "
            "1 provisional), the paper's rule made DP lowers Δ in 0, raises it in 0 and shows no detectable change in "
            "1.") in page
    assert "Paper's algorithm as published" not in page  # only the rules that ran get a line
    assert "Paper's rule made DP (decides the claim): lower 0, higher 0, no change 1" in page


def test_the_family_and_seed_caps_are_the_campaign_profiles_plan(tmp_path):
    """33 rows: the 10 LR cells x 3 rules of claims.yaml, and the paper rule's cell of MNIST MLP (claims_mnist.yaml),
    MNIST CNN (claims_mnist_cnn.yaml) and UTKFace CNN (claims_utkface.yaml); each cell's seed cap is its own grid
    entry's (16 for the LR cells, 12 for MNIST, 6 for UTKFace); a run stored in both directories is an error, not
    silently counted once."""
    from fairdp_core.reporting.claims import CLAIMS_SOURCES, _max_seeds, claims_frame, planned_rows

    profiles = [ROOT / p for _, p in CLAIMS_SOURCES]
    assert planned_rows(profiles) == 33 and planned_rows(profiles[:1]) == 30
    assert _max_seeds(profiles, ("mnist", "mlp", 10.0)) == 12 and _max_seeds(profiles, ("mnist", "cnn", 10.0)) == 12
    assert _max_seeds(profiles, ("adult", "lr", 1.0)) == 16 and _max_seeds(profiles, ("utkface", "cnn", 10.0)) == 6
    one = sorted((ROOT / "reports" / "paper" / "claims").glob("adult-lr-dpsgd-e10-s0.json"))
    assert one
    with pytest.raises(ValueError, match="runs stored twice"):
        claims_frame([tmp_path], profiles, files=one + one)



def test_run_one_summary_records_its_plan_and_execution(monkeypatch, claims_params, tmp_path):
    """run_one's summary (training and attacks stubbed): the plan and its hash, and what the plan hash leaves out but
    a bank's last bits can depend on (threads, workers, MKL_CBWR); a design file already in the checkout (another
    campaign's, of another R) is drawn afresh, never reused."""
    import fairdp_core.data.pipeline as pipeline
    import fairdp_core.stages.attack as attack
    import fairdp_core.stages.design as design
    import fairdp_core.stages.train as train
    import fairdp_core.study.claims as claims

    p = claims_params
    name = "law_paper-lr-dpsgd-e10-s0"
    info = {k: 1 for k in ("n_models", "m", "R", "n_train", "n_test")}
    info.update(group_names=["a"], class_names=["0", "1"], accuracy={}, accounting={}, clipping={})

    def fake_train(params, run, out, *, plan, design_path, progress):
        t = params.resolve("results/timings")
        t.mkdir(parents=True, exist_ok=True)
        (t / f"train-{run}.json").write_text(json.dumps({"train_s": 2.0, "signals_s": 1.0}))
        return info

    monkeypatch.setattr(pipeline, "prepare", lambda params, ds: None)
    drawn = []
    monkeypatch.setattr(design, "write_design", lambda params, key, path: drawn.append(path))
    stale = p.resolve("results/designs") / "law_paper-s0.npz"  # left by a campaign of another R: drawn afresh
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_bytes(b"another campaign's design")
    monkeypatch.setattr(train, "run_train", fake_train)
    monkeypatch.setattr(attack, "run_attack", lambda *a, **k: ({"attacks": {}}, None))
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    out = claims.run_one(p, name, "law_paper-lr-e10", tmp_path, commit="abc", progress=False)
    assert out["plan_sha256"] == claims.plan_hash(claims.effective_plan(p, name))
    assert out["execution"] == {"threads": p.train.threads, "workers": p.compute.workers, "MKL_CBWR": "COMPATIBLE"}
    assert json.loads(claims.summary_path(tmp_path, name).read_text())["execution"] == out["execution"]
    assert drawn == [stale]


def test_robustness_notes_recompute_from_the_committed_reruns(tmp_path):
    """The index's robustness lines: DP-SGD's committed reruns (reports/paper/robustness/) replace DP-SGD's runs of
    their cells, the rule's difference is recomputed at the family's level, and the committed index shows it; a
    check that holds another arm's runs is refused."""
    from fairdp_core.audit.verdicts import claims_table, load_summaries
    from fairdp_core.reporting.claims import CLAIMS_SOURCES, planned_rows
    from fairdp_core.reporting.claims_page import ROBUSTNESS, robustness_notes

    robust = ROOT / ROBUSTNESS
    checks = sorted(p for p in robust.iterdir() if p.is_dir())
    assert checks, "no robustness check committed"
    summaries = load_summaries(None, files=_tracked_summaries())
    k = planned_rows([ROOT / p for _, p in CLAIMS_SOURCES])
    html = robustness_notes(robust, summaries, k)
    page = (ROOT / "reports" / "index.html").read_text()
    assert html and html in page
    listed = 0
    for d in checks:
        alt = load_summaries(None, files=sorted(d.glob("*.json")))
        cells = {(s["dataset"], float(s["epsilon"])) for s in alt}
        mixed = [s for s in summaries if (s["dataset"], float(s["epsilon"] or 0)) in cells
                 and s["algorithm"] != "dpsgd"] + alt
        df = claims_table(mixed, family=k)
        lr_alt = {s["plan"]["train"]["spec"]["lr"] for s in alt}
        same = df[df.lr_rule.isin(lr_alt)]  # the rules at the rerun's lr: the pair differs in the rule alone
        assert len(same), d
        for r in same.itertuples():
            assert f"{r.diff_cross_fit:+.2f} [{r.lo_bonf_cross_fit:+.2f}, {r.hi_bonf_cross_fit:+.2f}] cross-fitted" in html
            assert f"ε = {r.epsilon:g}" in html and r.verdict in html
        listed += len(same)
    assert html.count("<li>") == listed  # and no rule at another lr than the rerun's
    other = next(s for s in summaries if s["algorithm"] != "dpsgd")
    (tmp_path / "check").mkdir()
    (tmp_path / "check" / "a.json").write_text(json.dumps(other))
    with pytest.raises(ValueError, match="DP-SGD's reruns only"):
        robustness_notes(tmp_path, summaries, k)


def test_the_forest_plot_is_scaled_to_the_decided_cells():
    """A cell of 2 seeds has a Bonferroni interval of hundreds of pp; the forest plot's x range is the decided
    cells', so they are not squeezed onto the zero line (the faint interval is cut at the panel's edge)."""
    import pandas as pd

    from fairdp_core.reporting import plots

    base = dict(model="lr", epsilon=10.0, rule="dpsgd_s_paper")
    rows = [dict(base, dataset="adult", verdict="contradicted", diff_in_sample=0.17, lo_bonf_in_sample=0.13,
                 hi_bonf_in_sample=0.21, diff_cross_fit=0.16, lo_bonf_cross_fit=0.11, hi_bonf_cross_fit=0.22),
            dict(base, dataset="utkface", verdict="not a like-for-like test", diff_in_sample=-0.03,
                 lo_bonf_in_sample=-257.0, hi_bonf_in_sample=257.0, diff_cross_fit=-0.13, lo_bonf_cross_fit=-167.0,
                 hi_bonf_cross_fit=167.0)]
    fig = plots.claims_forest(pd.DataFrame(rows), rules={"dpsgd_s_paper": "the rule"},
                              cell_label=lambda ds, model, eps: ds)
    lo, hi = fig.axes[0].get_xlim()
    assert -0.1 < lo <= 0.0 and 0.22 < hi < 0.3, (lo, hi)
    plots.plt.close(fig)


def test_verify_run_compares_every_field_but_commit_and_times(monkeypatch, claims_params, tmp_path):
    """`fairdp claims verify`: a rerun equal but for its commit and times reproduces; one that differs in any other
    field is named; a summary of another plan or numerics version is refused before any run."""
    import fairdp_core.study.claims as claims
    import fairdp_core.study.verify as verify
    from fairdp_core.config import ConfigError

    name = next(n for n, r in claims_params.runs.items() if r.algorithm == "dpsgd")
    plan_sha = claims.plan_hash(claims.effective_plan(claims_params, name))
    stored = {"run": name, "part": "p", "commit": "old", "plan_sha256": plan_sha, "numerics": claims.NUMERICS_VERSION,
              "accuracy": {"mean": 0.9}, "wall_s": {"total": 1.0}}
    again = {**stored, "commit": "new", "wall_s": {"total": 2.0}}
    ran = []
    monkeypatch.setattr(claims, "run_one", lambda params, n, part, work, *, commit, progress: ran.append(n) or again)
    assert verify.verify_run(claims_params, stored, tmp_path) == []
    again["accuracy"] = {"mean": 0.91}
    assert verify.verify_run(claims_params, stored, tmp_path) == ["accuracy"]
    again.pop("accuracy")
    assert verify.verify_run(claims_params, stored, tmp_path) == ["accuracy"]  # a field lost is a difference too
    again["accuracy"] = stored["accuracy"]
    stored["execution"] = {"threads": 1, "workers": 1, "MKL_CBWR": "COMPATIBLE"}  # a campaign worker's run
    again["execution"] = {"threads": 1, "workers": 2, "MKL_CBWR": "COMPATIBLE"}  # rerun with 2 shards: same bits
    assert verify.verify_run(claims_params, stored, tmp_path) == []
    again["execution"] = {"threads": 2, "workers": 2, "MKL_CBWR": "COMPATIBLE"}  # threads can move a CNN's bits
    assert verify.verify_run(claims_params, stored, tmp_path) == ["execution"]
    ran.clear()
    for bad in ({"plan_sha256": "0"}, {"numerics": claims.NUMERICS_VERSION + 1}, {"run": "no-such-run"}):
        with pytest.raises(ConfigError):
            verify.verify_run(claims_params, {**stored, **bad}, tmp_path)
    assert ran == []


def test_one_numerics_version_per_arm_and_cell():
    """A rule whose bits changed (its own numerics version) pools at its newest version where that is present,
    beside DP-SGD's unchanged runs; a cell without the new version keeps the old one; an explicit version wins."""
    from fairdp_core.audit.verdicts import one_version

    def s(ds, alg, v, seed):
        return {"dataset": ds, "model": "lr", "epsilon": 10.0, "algorithm": alg, "numerics": v, "seed": seed}

    runs = [s("law", "dpsgd", 1, 0), s("law", "dpsgd_s_paper", 1, 0), s("law", "dpsgd_s_paper", 2, 1),
            s("adult", "dpsgd_s_paper", 1, 0), s("adult", "dpsgd", 1, 0)]
    got = {(r["dataset"], r["algorithm"], r["numerics"]) for r in one_version(runs)}
    assert got == {("law", "dpsgd", 1), ("law", "dpsgd_s_paper", 2), ("adult", "dpsgd_s_paper", 1),
                   ("adult", "dpsgd", 1)}
    assert {r["numerics"] for r in one_version(runs, 1)} == {1} and len(one_version(runs, 1)) == 4


def test_numerics_version_follows_the_code_path():
    """The paper rules' version 2 is their one-pass group sums (the CNNs), version 5 the Gram matrix of the sums
    with the cached input pairs and numpy's float64 products (an LR or MLP run with more than two groups; 4 with
    MKL's products, 3 before the cache); with two groups the dense backend keeps K passes and the engine's version;
    DP-SGD is the engine's."""
    from fairdp_core.study.claims import NUMERICS_VERSION, numerics_of, summary_numerics

    assert numerics_of("dpsgd_s_paper", "lr", 2) == numerics_of("dpsgd_s_paper_code", "mlp", 2) == NUMERICS_VERSION
    assert numerics_of("dpsgd_s_paper", "cnn", 10) == numerics_of("dpsgd_s_paper_code", "cnn", 2) == 2
    assert numerics_of("dpsgd_s_paper", "mlp", 10) == numerics_of("dpsgd_s_paper_code", "lr", 3) == 5
    assert numerics_of("dpsgd", "mlp", 10) == numerics_of("dpsgd_s", "cnn", 10) == NUMERICS_VERSION
    law = json.loads((SUMMARIES / "law_paper-lr-dpsgd_s_paper-e10-s0.json").read_text())
    assert summary_numerics(law) == law["numerics"] == 1  # the committed LR runs stay current


def _stub_summary(params, name: str) -> dict:
    """A run's summary without training: Δ of the paper rule ±0.2 pp around DP-SGD's by seed parity (as in
    test_run_part_runs_seed_by_seed_until_its_target), so the blinded rule asks 10 seeds."""
    import fairdp_core.study.claims as claims

    r = params.runs[name]
    d = {"dpsgd": 0.0, "dpsgd_s_paper": 0.2 * (1 if r.seed % 2 else -1)}.get(r.algorithm, 0.0)
    return {**_run(r.dataset, r.algorithm, r.seed, 1.0 + d, 1.0 + d), "run": name, "plan_sha256": "x",
            "numerics": claims.numerics_of(r.algorithm, r.model, 2), "group_names": ["a", "b"],
            "wall_s": {"train": 0, "attack": 0, "total": 0}}


def _stub_task(params, name, part, commit):
    """A campaign worker's task without training (module level: loky workers import it)."""
    import os
    import signal
    import time

    if (params.base_dir / f"kill-{name}").exists():  # a file, not the environment: loky's workers outlive a test
        os.kill(os.getpid(), signal.SIGKILL)  # a worker killed mid-run
    time.sleep(0.05)
    return name, {**_stub_summary(params, name), "commit": commit}


def test_a_parallel_campaign_takes_the_sequential_decisions(monkeypatch, claims_params, tmp_path):
    """Two loky workers: the same waves (6 seeds, then the blinded target of 10), the same summaries in the same
    order as one after the other; nothing is rerun."""
    import fairdp_core.study.claims as claims

    monkeypatch.setattr(claims, "plan_hash", lambda plan: "x")
    monkeypatch.setattr(claims, "_prepare", lambda params, ds: None)

    def one_by_one(params, name, part, summaries, *, commit, progress=True):
        s = {**_stub_summary(params, name), "commit": commit}
        claims.summary_path(summaries, name).write_text(json.dumps(s))
        return s

    monkeypatch.setattr(claims, "run_one", one_by_one)
    (tmp_path / "seq").mkdir()
    seq = claims.run_part(claims_params, "law_paper-lr-e10", tmp_path / "seq", commit="c", log=lambda m: None)

    lines: list[str] = []
    pool = claims.CampaignPool(2, "loky", task=_stub_task)
    par = claims.run_part(claims_params, "law_paper-lr-e10", tmp_path / "par", commit="c", log=lines.append,
                          pool=pool)
    assert [s["run"] for s in par] == [s["run"] for s in seq] and len(par) == 40
    assert par == seq
    assert sorted(f.name for f in (tmp_path / "par").iterdir()) == sorted(f.name for f in (tmp_path / "seq").iterdir())
    assert sum("ETA" in m for m in lines) == 40 and "of 24 in this wave" in lines[0]  # 6 seeds x 4 arms first
    assert any("6 seeds done; the measured spreads need 10" in m for m in lines)
    lines.clear()
    assert claims.run_part(claims_params, "law_paper-lr-e10", tmp_path / "par", commit="c", log=lines.append,
                           pool=pool) == seq
    assert not any("ETA" in m for m in lines)  # every run read back


def test_a_killed_worker_leaves_no_summary_and_a_rerun_finishes(monkeypatch, claims_params, tmp_path):
    """kill -9 of the worker running one run: CampaignError names the run, no summary of it exists, the runs that
    finished before are written; the same command again runs only what is missing."""
    import fairdp_core.study.claims as claims

    monkeypatch.setattr(claims, "plan_hash", lambda plan: "x")
    monkeypatch.setattr(claims, "_prepare", lambda params, ds: None)
    victim = "law_paper-lr-dpsgd_s_paper-e10-s3"
    kill = claims_params.base_dir / f"kill-{victim}"
    kill.touch()
    pool = claims.CampaignPool(2, "loky", task=_stub_task)
    with pytest.raises(claims.CampaignError, match=rf"{victim}.*: a campaign worker failed .*SIGKILL.*run the same command"):
        claims.run_part(claims_params, "law_paper-lr-e10", tmp_path, commit="c", log=lambda m: None, pool=pool)
    written = {f.stem for f in tmp_path.glob("*.json")}
    assert victim not in written and not list(tmp_path.glob(".*"))  # no summary, no temporary
    kill.unlink()
    lines: list[str] = []
    got = claims.run_part(claims_params, "law_paper-lr-e10", tmp_path, commit="c", log=lines.append,
                          pool=claims.CampaignPool(2, "loky", task=_stub_task))
    assert len(got) == 40 and victim in {s["run"] for s in got}
    assert sum("ETA" in m for m in lines) == 40 - len(written)  # only the missing runs ran


def _law_smoke_part(tmp_path_factory, pool) -> dict[str, dict]:
    import fairdp_core.study.claims as claims

    p = _profile_params(tmp_path_factory, "smoke")
    out = p.base_dir / "summaries"
    claims.run_part(p, "law-lr-e10", out, commit="c", progress=False, log=lambda m: None, pool=pool)
    return {f.name: json.loads(f.read_text()) for f in sorted(out.glob("*.json"))}


@pytest.fixture(scope="module")
def law_smoke_sequential(mirror, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FAIRDP_DATA_MIRROR", str(mirror))
        return _law_smoke_part(tmp_path_factory, None)


def _assert_same_summaries(par: dict, seq: dict) -> None:
    assert sorted(seq) == ["law-lr-dpsgd-e10-s0.json", "law-lr-dpsgd_s-e10-s0.json"] and sorted(par) == sorted(seq)
    for f, s in seq.items():
        a, b = dict(par[f]), dict(s)
        assert a.pop("wall_s").keys() == b.pop("wall_s").keys()
        ea, eb = a.pop("execution"), b.pop("execution")
        assert ea["workers"] == 1 and {**ea, "workers": 0} == {**eb, "workers": 0}  # a worker never shards its bank
        assert a == b, f  # every other field, floats exactly


def test_parallel_summaries_equal_the_sequential_runs(law_smoke_sequential, mirror, tmp_path_factory, monkeypatch):
    """Real training and attacks (the smoke profile's Law LR part, DP-SGD and DP-SGD-S): the summaries two loky
    workers write are the ones a run in this process writes, field for field but for the wall times and the shard
    count of the execution record (a worker trains its bank in one process)."""
    import fairdp_core.study.claims as claims

    monkeypatch.setenv("FAIRDP_DATA_MIRROR", str(mirror))
    _assert_same_summaries(_law_smoke_part(tmp_path_factory, claims.CampaignPool(2, "loky")), law_smoke_sequential)


@pytest.mark.slow
def test_ray_campaign_summaries_equal_the_sequential_runs(law_smoke_sequential, mirror, tmp_path_factory,
                                                          monkeypatch):
    """The same part as Ray tasks on a local Ray (2 CPUs, started by the pool): the same summaries."""
    import ray

    import fairdp_core.study.claims as claims

    monkeypatch.setenv("FAIRDP_DATA_MIRROR", str(mirror))
    try:
        _assert_same_summaries(_law_smoke_part(tmp_path_factory, claims.CampaignPool(2, "ray")), law_smoke_sequential)
    finally:
        ray.shutdown()


def test_claims_runs_names_an_unknown_run_before_any_work(claims_params, tmp_path):
    """`fairdp claims runs NAME...`: a name the profile does not hold is one error naming it, before the checkout's
    commit is even read (the test's profile is not a git checkout) and before any run."""
    from fairdp_core.cli.campaign import claims_main
    from fairdp_core.config import ConfigError

    params = claims_params.base_dir / "params.yaml"
    with pytest.raises(ConfigError, match=r"law_paper-lr-dpsgd-e10-s99: not runs of profile 'claims'"):
        claims_main(["runs", "law_paper-lr-dpsgd-e10-s0", "law_paper-lr-dpsgd-e10-s99", "--params", str(params),
                     "--summaries", str(tmp_path)])
    assert not list(tmp_path.iterdir())


def test_numerics_shift_by_hand():
    """new − old per seed, its mean and t interval, by hand: differences 0.1, -0.1, 0.3 (mean 0.1, SD 0.2, 3 seeds:
    half-width t(0.975, 2) · 0.2 / √3 = 0.4968); an arm that moved by 1 pp on every seed does not hold 0; arms of
    another cell are not pooled; one pair gives no interval (None, not "moved"); a pair of another plan is refused."""
    from fairdp_core.study.verify import numerics_shift

    def s(alg, seed, d, acc=0.9, v=1, plan="p", ds="law"):
        return {"run": f"{ds}-{alg}-s{seed}", "dataset": ds, "model": "lr", "epsilon": 10, "algorithm": alg,
                "seed": seed, "numerics": v, "plan_sha256": plan, "accuracy": {"mean": acc},
                "attacks": {"alooa_cross_fit": {"delta_pp": d}, "alooa_in_sample": {"delta_pp": d + 1.0}}}

    old = [s("rule", i, 1.0) for i in range(3)] + [s("moved", i, 1.0) for i in range(3)] + [s("rule", 0, 5.0, ds="mn")]
    new = ([s("rule", i, 1.0 + x, v=2) for i, x in enumerate([0.1, -0.1, 0.3])]
           + [s("moved", i, 2.0 + 0.01 * i, acc=0.91, v=2) for i in range(3)] + [s("rule", 0, 5.0, v=2, ds="mn")]
           + [s("rule", 9, 1.0, v=2)])  # no old twin
    rows = {(r["dataset"], r["algorithm"], r["quantity"]): r for r in numerics_shift(old, new)}
    r = rows[("law", "rule", "Δ cross-fit (pp)")]
    assert r["seeds"] == 3 and r["unpaired"] == 1 and r["versions"] == "1 → 2" and r["holds_zero"]
    np.testing.assert_allclose([r["mean"], r["hi"] - r["mean"]], [0.1, 0.4968], atol=1e-4)
    assert rows[("law", "rule", "accuracy (pp)")]["mean"] == 0.0
    assert rows[("law", "moved", "Δ cross-fit (pp)")]["holds_zero"] is False
    np.testing.assert_allclose(rows[("law", "moved", "accuracy (pp)")]["mean"], 1.0)
    one = rows[("mn", "rule", "Δ cross-fit (pp)")]
    assert one["seeds"] == 1 and one["holds_zero"] is None
    with pytest.raises(ValueError, match="law-rule-s0: not the same plan"):
        numerics_shift(old, [s("rule", 0, 1.0, v=2, plan="q")])


def test_numerics_shift_works_as_printed(tmp_path, capsys):
    """`fairdp claims numerics-shift OLD NEW` (the CLI passes no --params to it: it compares two directories)."""
    import json

    from fairdp_core.cli import main

    for d, v, delta in (("old", 1, 1.0), ("new", 3, 1.2)):
        (tmp_path / d).mkdir()
        for seed in range(2):
            (tmp_path / d / f"r-s{seed}.json").write_text(json.dumps({
                "run": f"r-s{seed}", "dataset": "mnist", "model": "mlp", "epsilon": 10, "algorithm": "rule",
                "seed": seed, "numerics": v, "plan_sha256": "p", "accuracy": {"mean": 0.9},
                "attacks": {"alooa_cross_fit": {"delta_pp": delta + seed}, "alooa_in_sample": {"delta_pp": delta}}}))
    assert main(["claims", "numerics-shift", str(tmp_path / "old"), str(tmp_path / "new")]) == 0
    assert "| mnist mlp ε 10 | rule | Δ cross-fit (pp) | 1 → 3 | 2 | +0.200 |" in capsys.readouterr().out


def test_a_campaign_worker_trains_its_bank_in_its_own_process(monkeypatch, claims_params):
    """_run_task hands run_one a profile whose bank cannot shard (workers 1, shard_models []), whatever the
    profile's compute says, including shard_models null ("every model") and a Ray backend."""
    import fairdp_core.study.claims as claims

    seen = {}

    def fake(params, name, part, summaries, *, commit, progress):
        seen.update(workers=params.compute.workers, shard_models=params.compute.shard_models, summaries=summaries)
        return {"run": name}

    monkeypatch.setattr(claims, "run_one", fake)
    name = next(iter(claims_params.runs))
    for compute in ({"shard_models": None}, {"backend": "ray", "workers": 4}):
        p = claims_params.model_copy(update={"compute": claims_params.compute.model_copy(update=compute)})
        assert claims._run_task(p, name, "part", "c") == (name, {"run": name})
        assert seen == {"workers": 1, "shard_models": [], "summaries": None}


@pytest.mark.parametrize(("old_dir", "new_dir", "versions"), [("claims_mnist", "numerics/mnist_mlp_v3", "1 → 3"),
                                                                ("numerics/mnist_mlp_v3", "numerics/mnist_mlp_v4", "3 → 4"),
                                                                ("numerics/mnist_mlp_v4", "numerics/mnist_mlp_v5", "4 → 5")])
def test_the_committed_numerics_check_recomputes_and_holds_zero(old_dir, new_dir, versions):
    """The MNIST MLP numerics checks (reports/paper/numerics/): the paper's rule made DP rerun at numerics 3 (the Gram
    route) against its committed numerics-1 summaries, at 4 (the cached input pairs) against those at 3, and at 5
    (the float64 products through numpy's BLAS) against those at 4, seed by seed. The committed table is what numerics_shift gives from the committed summaries, and every interval holds 0
    (the bump moves no result beyond chance)."""
    import json

    from fairdp_core.study.verify import numerics_shift

    base = ROOT / "reports" / "paper"
    new = [json.loads(f.read_text()) for f in sorted((base / new_dir).glob("*.json"))]
    old = [json.loads(f.read_text()) for f in sorted((base / old_dir).glob("*.json"))]
    rule = [r for r in numerics_shift(old, new) if r["algorithm"] == "dpsgd_s_paper"]
    assert len(rule) == 3 and all(r["seeds"] >= 6 and r["versions"] == versions for r in rule)
    assert all(r["holds_zero"] for r in rule), [r for r in rule if not r["holds_zero"]]
    table = (base / "numerics" / "mnist_mlp.md").read_text()
    for r in rule:
        assert (f"| mnist mlp ε 10 | dpsgd_s_paper | {r['quantity']} | {r['versions']} | {r['seeds']} | "
                f"{r['mean']:+.3f} | [{r['lo']:+.3f}, {r['hi']:+.3f}] | yes |") in table, r
