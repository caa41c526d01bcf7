"""Profiles, the generated run grid, notebook parameters, and the audit command end to end on real data."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from fairdp_core.cli import main as cli_main
from fairdp_core.cli import use_profile, write_generated
from fairdp_core.config import ConfigError, GridEntry, expand_runs, load_params
from fairdp_core.reporting import NOTEBOOKS, build_index, notebook_parameters, paper_snapshot, run_notebook

from .conftest import ROOT


@pytest.fixture
def project(tmp_path, mirror, monkeypatch):
    """A copy of the project's params, profiles and notebooks in tmp_path, with the mirror pointed at."""
    shutil.copytree(ROOT / "profiles", tmp_path / "profiles")
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    shutil.copy(ROOT / "runs.yaml", tmp_path / "runs.yaml")
    monkeypatch.setenv("FAIRDP_DATA_MIRROR", str(mirror))
    return tmp_path


@pytest.fixture
def law_smoke(project, monkeypatch):
    """``project`` on the smoke profile, as the working directory, with law prepared and its design drawn."""
    use_profile("smoke", project / "params.yaml", project / "profiles")
    monkeypatch.chdir(project)
    assert cli_main(["prepare", "law"]) == 0
    assert cli_main(["design", "law-s0"]) == 0
    return project


@pytest.mark.parametrize("profile", ["smoke", "default", "pilot", "pilot_law", "pilot_mnist_cnn", "full", "paper",
                                     "gpu"])
def test_profiles_are_valid(project, profile):
    use_profile(profile, project / "params.yaml", project / "profiles")
    p = load_params(project / "params.yaml")
    assert p.profile == profile and len(p.runs) > 0
    assert set(p.designs) == {f"{r.dataset}-s{r.seed}" for r in p.runs.values()}
    if profile == "paper":
        assert p.audit.R == 200 and p.train.epochs == 20 and p.train.batch_size == 256 and p.train.lr == 0.1
        assert p.audit.m == "all" and p.train.clip == 5.0 and "law_paper" in p.data.datasets
        # 7 DP rules at ε 1 and 10 plus SGD, and DP-SGD at ε = 2 (issue 13), 16 seeds
        assert sum(1 for r in p.runs.values() if r.dataset == "adult") == 16 * (1 + 7 * 2 + 1)
    if profile == "gpu":  # the paper's full grid: every dataset of the paper, m = n, 2R = 400, on CUDA, sharded
        assert p.audit.m == "all" and p.audit.R == 200 and p.train.device == "cuda" and p.compute.workers > 1
        assert p.compute.shard_models is None  # its 400-model LR banks are sharded too (not the default's choice)
        assert {(g.dataset, g.model) for g in p.grid} == {(d, "lr") for d in ("adult", "bank", "credit", "law_paper",
                                                                              "compas")} | {
            ("mnist", "mlp"), ("mnist", "cnn"), ("utkface", "cnn")}
        membership = [g for g in p.grid if g.epsilons != [2]]  # the rest: issue 13's DP-SGD banks at ε = 2
        assert all(set(g.algorithms) == {"sgd", "dpsgd", "dpsgd_s"} and g.epsilons == [1, 10] for g in membership)
        assert all(g.algorithms == ["dpsgd"] for g in p.grid if g not in membership)
        assert {g.dataset: g.seeds for g in membership}["adult"] == 16 and min(g.seeds for g in p.grid) >= 6
        assert len(p.runs) == 5 * 16 * 5 + 3 * 6 * 5 + 3 * 16 + 3 * 6
    if profile == "default":  # both cores: MLP/CNN banks over 2 one-thread workers, LR banks (seconds) in-process
        assert p.compute.workers == 2 and p.compute.shard_models == ["mlp", "cnn", "cnn_relu"]
        # the 30-minute profile (issue 17): every paper dataset but UTKFace, SGD / DP-SGD / DP-SGD-S at ε 1 and 10
        assert {(r.dataset, r.model) for r in p.runs.values() if r.algorithm == "dpsgd_s" and r.epsilon == 1} == {
            (d, "lr") for d in ("adult", "law_paper", "bank", "credit", "compas")} | {("mnist", "mlp")}
        assert len(p.runs) == 65
    if profile == "full":  # the default profile's settings over the grid it had until issue 17
        assert len(p.runs) == 141 and {r.dataset for r in p.runs.values()} >= {"utkface", "law_paper_blind"}
    if profile in ("pilot", "pilot_law"):
        assert p.audit.m == "all" and p.audit.R == 50 and len(p.runs) == 8 * 4
    if profile == "pilot_mnist_cnn":
        # one lr for both arms (the default profile's per-algorithm lr would confound the paired difference)
        from fairdp_core.stages.plan import train_plan

        specs = [train_plan(p, name)["spec"] for name in p.runs]
        assert len(specs) == 8 * 3 and {(s["lr"], s["epochs"]) for s in specs} == {(0.2, 2)}
    if profile in ("pilot", "pilot_law", "paper", "gpu"):
        # the paper's lr and bound reach every run: the profile's `overrides: {}` clears the default profile's
        # per-dataset overrides (it once merged them in, and the first pilot ran Adult at lr 0.5)
        from fairdp_core.stages.plan import train_plan

        assert not p.train.overrides
        for name in p.runs:
            spec = train_plan(p, name)["spec"]
            assert spec["lr"] == 0.1 and spec["epochs"] == 20 and spec.get("clip", 5.0) == 5.0, name


def test_default_profile_is_a_subset_of_full(project):
    """Every default-profile run is in the full profile with the same effective settings (train and attack plans),
    so `make repro PROFILE=full` after the default retrains only what the default left out (DVC's run cache)."""
    from fairdp_core.stages.plan import attack_plan, train_plan

    def plans(profile):
        use_profile(profile, project / "params.yaml", project / "profiles")
        p = load_params(project / "params.yaml")
        return {name: (train_plan(p, name), attack_plan(p, name)) for name in p.runs}

    default, full = plans("default"), plans("full")
    assert set(default) < set(full) and len(full) - len(default) == 141 - 65
    assert {name: full[name] for name in default} == default


def test_committed_params_are_the_default_profile(project):
    """params.yaml as committed is exactly what `fairdp use-profile default` writes."""
    use_profile("default", project / "params.yaml", project / "profiles")
    assert (project / "params.yaml").read_text() == (ROOT / "params.yaml").read_text()
    assert (project / "runs.yaml").read_text() == (ROOT / "runs.yaml").read_text()


def test_stale_runs_are_refused_until_regenerated(project):
    path = project / "params.yaml"
    text = path.read_text().replace("epsilons: [1, 10], seeds: 1}", "epsilons: [1, 5], seeds: 1}", 1)
    path.write_text(text)
    with pytest.raises(ConfigError, match="out of date with grid and sweep"):
        load_params(path)
    write_generated(path)
    assert any(k.endswith("-e5-s0") for k in load_params(path).runs)


def test_changing_one_epsilon_changes_only_its_runs():
    g = [GridEntry(dataset="adult", model="lr", algorithms=["sgd", "dpsgd", "dpsgd_s"], epsilons=[1, 10]),
         GridEntry(dataset="law", model="lr", algorithms=["dpsgd"], epsilons=[10])]
    before = expand_runs(g, None)
    g[0] = g[0].model_copy(update={"epsilons": [1, 5]})
    after = expand_runs(g, None)
    gone, new = set(before) - set(after), set(after) - set(before)
    assert gone == {"adult-lr-dpsgd-e10-s0", "adult-lr-dpsgd_s-e10-s0"}
    assert new == {"adult-lr-dpsgd-e5-s0", "adult-lr-dpsgd_s-e5-s0"}
    assert all(before[k] == after[k] for k in set(before) & set(after))
    assert all("." not in k for k in expand_runs(g, None))  # DVC reads runs.<name> as a key path


def test_bad_grid_is_refused_and_params_untouched(project):
    path = project / "params.yaml"
    original = path.read_text()
    path.write_text(original.replace("{dataset: bank, model: lr,", "{dataset: bank, model: lrr,", 1))
    broken = path.read_text()
    runs = (project / "runs.yaml").read_text()
    with pytest.raises(ConfigError):
        write_generated(path)
    assert path.read_text() == broken  # nothing half-written
    assert (project / "runs.yaml").read_text() == runs


def test_generated_keys_are_refused_in_params(project):
    path = project / "params.yaml"
    path.write_text(path.read_text() + "\nruns: {}\n")
    with pytest.raises(ConfigError, match="runs.yaml"):
        load_params(path)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_parameters_match_parameters_cell(name):
    import nbformat
    import papermill as pm

    from fairdp_core.reporting import read_notebook

    params = load_params(ROOT / "params.yaml")
    src = ROOT / "notebooks" / f"{name}.py"
    tmp = src.parent / f".{name}.inspect.ipynb"
    try:
        nbformat.write(read_notebook(src), tmp)
        declared = set(pm.inspect_notebook(str(tmp)))
    finally:
        tmp.unlink(missing_ok=True)
    assert declared == set(notebook_parameters(params, name))


def test_report_with_unknown_parameter_fails_before_running(project):
    nb_path = project / "notebooks" / "group_gpr.py"
    nb_path.write_text(nb_path.read_text().replace("alpha = None\n", "alpha = None\nextra_knob = 3\n", 1))
    with pytest.raises(ConfigError, match="extra_knob"):
        run_notebook(load_params(project / "params.yaml"), "group_gpr")
    assert not (project / "reports" / "group_gpr.html").exists()


# ------------------------------------------------------------------------------ end to end, real data

def test_overfit_sgd_leaks_more_than_dpsgd_eps1(mirror):
    """Adult (800 training records), MLP, 100 epochs, batch 50, lr 0.5, 2R = 16 models, m = 400: SGD overfits
    and its per-group GPR (cross-fitted) is clearly above DP-SGD's at ε = 1 with the same design and streams.
    Measured with these seeds: SGD [0.135, 0.078], DP-SGD [0.006, 0.022]."""
    from fairdp_core.audit import audit_design, cross_fit_advantage, gpr
    from fairdp_core.config import DatasetOptions
    from fairdp_core.data import Sources, load_dataset
    from fairdp_core.engine import TrainSpec, train_bank

    d = load_dataset("adult", DatasetOptions(train_size=800), Sources(raw_dir=mirror, mirror=None), seed=1)
    design = audit_design(d.train.group, m=400, R=8, min_per_group=50, rng=np.random.default_rng(0))
    out = {}
    for alg, eps in (("sgd", None), ("dpsgd", 1.0)):
        spec = TrainSpec(algorithm=alg, model="mlp", epochs=100, batch_size=50, lr=0.5, target_epsilon=eps)
        bank = train_bank(d.train.X, d.train.y, d.train.group, design.training_membership(), spec, n_classes=2, n_groups=2,
                          seed=3, progress=False)
        loss, _ = bank.evaluate(d.train.X[design.audit_idx], d.train.y[design.audit_idx])
        adv = cross_fit_advantage(-loss.astype(float), design.membership)
        out[alg] = gpr(adv, design.audit_group, 2)
    print("GPR SGD", out["sgd"], "DP-SGD eps=1", out["dpsgd"])
    assert (out["sgd"] > 0.05).all()
    assert (out["sgd"] - out["dpsgd"] > 0.04).all()
    assert (np.abs(out["dpsgd"]) < 0.05).all()


def test_audit_command_writes_every_artifact_atomically(law_smoke, monkeypatch, capsys):
    """plan + train + attack through the CLI on the smoke profile's smallest run; a failure mid-run leaves nothing."""
    project = law_smoke
    name = "law-lr-dpsgd-e10-s0"
    assert cli_main(["audit", name, "--quiet"]) == 0
    out = project / "results" / "audit" / name
    assert {p.name for p in (project / "results" / "train" / name).iterdir()} == {"bank.pt", "signals.npz",
                                                                                  "train.json"}
    assert {p.name for p in out.iterdir()} == {"records.csv", "groups.csv", "summary.json"}
    assert (project / "results" / "timings" / f"train-{name}.json").is_file()  # outside the tracked outputs
    s = json.loads((out / "summary.json").read_text())
    assert set(s["attacks"]) == {"alooa_cross_fit", "alooa_in_sample", "alooa_null_corrected", "ga", "gba",
                                 "lira_online", "lira_offline", "rmia"}
    acct = s["accounting"]
    assert acct["epsilon"] <= 10 and acct["accountant"] == "rdp" and acct["sampling"] == "poisson"
    assert {"sigma_g", "sample_rate", "steps", "delta"} <= set(acct)
    for name_, a in s["attacks"].items():
        assert a["null_floor_pp"] >= 0
        if name_ in ("alooa_in_sample", "alooa_null_corrected"):  # point estimates: no coverage-checked interval
            assert a["delta_lo"] is None and a["p_delta_gt_0"] is None and a["interval"] is None
        elif name_ == "gba":  # per-group thresholds: Δ > 0 without leakage, so no test of it
            assert a["p_delta_gt_0"] is None and a["p_perm"] is None and a["delta_lo"] <= a["delta_hi"]
        else:
            assert a["delta_lo"] <= a["delta_pp"] <= a["delta_hi"] and 0 < a["p_delta_gt_0"] <= 1
            assert 0 < a["p_perm"] <= 1
            c = a["contrast"]  # two groups: the signed contrast with its interval
            assert c["lo_pp"] <= c["diff_pp"] <= c["hi_pp"] and abs(c["diff_pp"]) == pytest.approx(a["delta_pp"])
    assert set(s["low_fpr"]) == {"White", "non-White"}

    import fairdp_core.stages.attack as attack_mod

    def boom(*a, **k):
        raise KeyboardInterrupt("killed mid-stage")

    monkeypatch.setattr(attack_mod, "studentized_permutation_pvalue", boom)
    name2 = "law-lr-dpsgd_s-e10-s0"
    with pytest.raises(KeyboardInterrupt):
        cli_main(["audit", name2, "--quiet"])
    assert not (project / "results" / "audit" / name2).exists()
    assert not [p for p in (project / "results" / "audit").iterdir() if p.name.startswith(".")]
    capsys.readouterr()


def test_sigkill_mid_audit_leaves_no_output_and_rerun_completes(law_smoke):
    """A literal kill -9 of the train stage's process group while it trains: no output directory appears (only a
    hidden temporary of a dead pid); the rerun removes that temporary and writes the complete directory."""
    project = law_smoke
    name = "law-lr-dpsgd_s-e10-s0"
    audit_dir = project / "results" / "train"
    assert cli_main(["plan"]) == 0
    proc = subprocess.Popen([sys.executable, "-m", "fairdp_core.stages.train", name], cwd=project,
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    temps: list = []
    while not temps and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
        temps = list(audit_dir.glob(f".{name}.{proc.pid}.*.tmp")) if audit_dir.exists() else []
    assert temps and proc.poll() is None, "the stage finished or failed before it could be killed"
    time.sleep(0.5)  # into training
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert not (audit_dir / name).exists()
    assert [p.name for p in audit_dir.iterdir()] == [temps[0].name]
    assert cli_main(["train", name, "--quiet"]) == 0
    assert sorted(p.name for p in audit_dir.iterdir()) == [name]
    assert {p.name for p in (audit_dir / name).iterdir()} == {"bank.pt", "signals.npz", "train.json"}
    info = json.loads((audit_dir / name / "train.json").read_text())
    assert info["run"] == name and info["plan"]["spec"]["algorithm"] == "dpsgd_s"


def test_sweep_stale_removes_only_dead_writers(tmp_path):
    from fairdp_core.atomic import atomic_path, sweep_stale

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    final = tmp_path / "out.csv"
    stale = tmp_path / f".out.csv.{dead.pid}.abcd_123.tmp"
    live = tmp_path / f".out.csv.{os.getppid()}.abcd_123.tmp"  # the parent: alive
    other = tmp_path / f".out.csv.5.{dead.pid}.abcd_123.tmp"  # not ours to judge (other final "out.csv.5")
    for p in (stale, live, other):
        p.write_text("partial")
    assert sweep_stale(final) == [stale]
    with atomic_path(final) as tmp:
        tmp.write_text("done")
    assert final.read_text() == "done" and live.exists() and other.exists()


def test_params_typo_in_audit_command_names_key(project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    text = (project / "params.yaml").read_text().replace("  n_boot: 1000", "  n_bot: 1000", 1)
    (project / "params.yaml").write_text(text)
    assert cli_main(["audit", "adult-lr-sgd-s0"]) == 2
    err = capsys.readouterr().err
    assert "audit.n_bot: unknown key" in err and "params.yaml" in err
    assert not (project / "results").exists()





def test_paper_snapshot_and_index_comparison(project):
    """Hand-chosen summaries for the paper profile's Adult grid at 5 seeds (25 runs): the snapshot holds the seed
    means and the paired DP-SGD-S − DP-SGD comparison (hand-computed: every seed's difference is −0.5 pp, so the
    exact sign-flip p over 5 seeds is 2/32), and the index shows them beside the paper's reported 0.27 → 0.17."""
    from fairdp_core.cli import set_params

    use_profile("paper", project / "params.yaml", project / "profiles")
    set_params(project / "params.yaml", ["grid=[{dataset: adult, model: lr, algorithms: [sgd, dpsgd, dpsgd_s], "
                                         "epsilons: [1, 10], seeds: 5}]"])
    params = load_params(project / "params.yaml")
    assert len(params.runs) == 25 and params.profile == "paper"
    with pytest.raises(ConfigError, match="paper"):
        paper_snapshot(load_params(ROOT / "params.yaml"))
    base = {"sgd": 5.0, "dpsgd": 1.0, "dpsgd_s": 0.5}
    for name, run in params.runs.items():
        d = base[run.algorithm] + 0.1 * run.seed
        attack = {"delta_pp": d, "delta_lo": d - 1, "delta_hi": d + 1, "null_floor_pp": 0.3, "p_delta_gt_0": 0.5}
        summary = {
            "accuracy": {"mean": 0.80 + 0.01 * run.seed - (0.005 if run.algorithm == "dpsgd_s" else 0.0)},
            "attacks": {"alooa_cross_fit": attack, "alooa_in_sample": {**attack, "delta_pp": d + 6}},
            "accounting": {"sigma_g": 1.0, "sigma_b": 12.8 if run.algorithm == "dpsgd_s" else None, "sigma_eff": 1.0,
                           "sample_rate": 0.0085, "steps": 2317, "delta": 1e-5, "accountant": "rdp",
                           "epsilon": float("inf") if run.algorithm == "sgd" else run.epsilon - 0.01,
                           "guaranteed": True},
            "n_models": 400, "m": 1000, "timings": {"train_s": 1.0}}
        out = project / "results" / "audit" / name
        out.mkdir(parents=True)
        (out / "summary.json").write_text(json.dumps(summary))
    snap = json.loads(paper_snapshot(params, wall_s=600).read_text())
    assert "2R = 400" in snap["note"] and "wall time 10.0 min" in snap["note"]
    rows = {(r["algorithm"], r["epsilon"]): r for r in snap["rows"]}
    assert set(rows) == {("sgd", None), ("dpsgd", 1.0), ("dpsgd", 10.0), ("dpsgd_s", 1.0), ("dpsgd_s", 10.0)}
    r = rows["dpsgd", 10.0]
    assert r["seeds"] == 5 and r["delta_pp"] == pytest.approx(1.2) and r["delta_in_sample_pp"] == pytest.approx(7.2)
    assert r["accuracy"] == pytest.approx(0.82)
    # five seeds: the t interval of the mean over seeds (Δ = 1.0 … 1.4, SD 0.1581, t(0.975, 4) = 2.7764), not the
    # mean of the banks' bounds (0.2 … 2.2)
    assert r["delta_lo"] == pytest.approx(1.2 - 2.7764 * 0.15811 / 5 ** 0.5, rel=1e-4)
    assert r["delta_hi"] == pytest.approx(1.2 + 2.7764 * 0.15811 / 5 ** 0.5, rel=1e-4)
    paired = {c["epsilon"]: c for c in snap["paired"]}
    assert set(paired) == {1.0, 10.0}
    for key, diff in (("delta_pp", -0.5), ("delta_in_sample_pp", -0.5), ("accuracy", -0.005)):
        c = paired[10.0][key]
        assert c["mean_diff"] == pytest.approx(diff) and c["lo"] == pytest.approx(diff) and c["hi"] == pytest.approx(diff)
        assert c["p_sign_flip"] == pytest.approx(2 / 32) and c["n_seeds"] == 5
    page = build_index(params).read_text()
    assert "The paper reports Δ 0.27 → 0.17 pp (-0.10)" in page
    assert "Δ (cross-fitted) -0.50 pp [-0.50, -0.50], sign-flip p = 0.062" in page
    assert "accuracy -0.50 pp" in page and "<td>Adult</td><td>LR</td><td>no DP</td>" in page
    # the verdicts table: every seed lowers Δ by 0.5 pp, but 5 seeds cannot make the exact test reject (smallest p
    # 2/32 = 0.0625), so the row stays inconclusive although its t interval excludes 0
    rows = page.split("The paper's claims: verdicts")[1].split("</table>")[0].split("<tr>")
    adult = [r for r in rows if r.startswith("<td>Adult, LR") and "quantile rule" in r]
    assert len(adult) == 1 and "-0.50 [-0.50, -0.50], p = 0.062" in adult[0]
    assert "<b>inconclusive</b>" in adult[0] and "reproduced" not in adult[0]
    # the first screen: the findings box (paper value, estimate with CI and seeds, verdict) before the main table,
    # which is grouped by dataset and states the accounting of every DP row (integers without decimals)
    assert page.index("<h2>Findings</h2>") < page.index("<h2>Main results</h2>") < page.index("verdicts</h2>")
    box = page.split("<h2>Findings</h2>")[1].split("</div>")[0]
    adult_box = next(r for r in box.split("<tr>") if r.startswith("<td>Adult, LR"))
    assert "0.27 → 0.17 pp (-0.10)" in adult_box and "-0.50 pp [-0.50, -0.50], 5 seeds (this run)" in adult_box
    assert "<b>inconclusive</b>" in adult_box and "Law (the paper's task), LR</td><td>0.59 → 0.41" in box
    assert "<tr class='ds'><th colspan='12'>Adult</th></tr>" in page
    assert "T = 2,317, Poisson sampling, RDP accountant, δ = 1e-05, ε spent = 9.990" in page
    assert "2317.0" not in page and ">nan<" not in page


def test_claim_verdicts_by_hand():
    """The verdict rules on hand-made paired differences: interval above 0 (and the sign-flip test rejecting)
    contradicts the paper's fall, below 0 reproduces its direction, too few seeds or across 0 is inconclusive with the MDE from the measured SD ((t(0.975, 7) + t(0.8, 7))
    · 0.13 / √8 = (2.3646 + 0.8960) · 0.04596 = 0.1499 pp); below 6 seeds no MDE; no evidence is "not run"."""
    from fairdp_core.reporting import claim_verdict

    exact = {"p_sign_flip": 0.0078, "p_min": 0.0078}
    assert claim_verdict({"n_seeds": 8, "sd": 0.13, "lo": 0.1, "hi": 0.3, **exact})[0] == "contradicted"
    assert claim_verdict({"n_seeds": 8, "sd": 0.13, "lo": -0.3, "hi": -0.1, **exact})[0] == "reproduced (direction)"
    # two seeds: a t interval may exclude 0, but the exact test cannot reject (p ≥ 0.5): no verdict
    assert claim_verdict({"n_seeds": 2, "sd": 0.05, "lo": 0.8, "hi": 1.2, "p_sign_flip": 0.5, "p_min": 0.5}
                         )[0] == "inconclusive"
    verdict, mde = claim_verdict({"n_seeds": 8, "sd": 0.13, "lo": -0.1, "hi": 0.1, "p_sign_flip": 0.9, "p_min": 0.0078})
    assert verdict == "inconclusive" and mde == pytest.approx(0.1499, abs=2e-4)
    # above 16 seeds there is no p_min (any α attainable): a verdict still needs p < α
    assert claim_verdict({"n_seeds": 20, "sd": 0.1, "lo": 0.1, "hi": 0.2, "p_sign_flip": 0.001, "p_min": None}
                         )[0] == "contradicted"
    assert claim_verdict({"n_seeds": 1, "mean_diff": -0.4}) == ("inconclusive", None)
    # fewer than 6 seeds: no power statement either (the verdict rule cannot reject at all)
    assert claim_verdict({"n_seeds": 5, "sd": 0.1, "lo": -0.3, "hi": -0.1, "p_sign_flip": 0.0625, "p_min": 0.0625}
                         ) == ("inconclusive", None)
    assert claim_verdict(None) == ("not run", None)


def test_train_and_attack_rerun_byte_identical(law_smoke):
    """The same params and seed: a second train and attack of a run write the same bytes in every tracked output
    (what DVC hashes into dvc.lock), timings going to results/timings/ only."""
    import hashlib

    name = "law-lr-dpsgd_s-e10-s0"
    assert cli_main(["audit", name, "--quiet"]) == 0

    def digest():
        return {str(p.relative_to(law_smoke)): hashlib.md5(p.read_bytes()).hexdigest()
                for d in ("results/train", "results/audit", "results/plan") for p in sorted((law_smoke / d).rglob("*"))
                if p.is_file()}

    first = digest()
    shutil.rmtree(law_smoke / "results" / "train" / name)
    shutil.rmtree(law_smoke / "results" / "audit" / name)
    assert cli_main(["audit", name, "--quiet"]) == 0
    assert digest() == first


def test_cli_tune_clip_names_an_unknown_dataset(capsys):
    assert cli_main(["--params", str(ROOT / "params.yaml"), "tune-clip", "--dataset", "adlt"]) == 2
    err = capsys.readouterr().err
    assert "'adlt' is not under data.datasets" in err and "params.yaml" in err
