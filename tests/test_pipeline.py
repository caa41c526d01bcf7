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
from fairdp_core.reporting.pages import NOTEBOOKS, notebook_parameters, run_notebook

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
                                     "gpu", "claims_mnist_pilot", "claims_mnist", "claims_mnist_cnn",
                                     "claims_utkface_pilot", "claims_utkface"])
def test_profiles_are_valid(project, profile):
    use_profile(profile, project / "params.yaml", project / "profiles")
    p = load_params(project / "params.yaml")
    assert p.profile == profile and len(p.runs) > 0
    assert set(p.designs) == {f"{r.dataset}-s{r.seed}" for r in p.runs.values()}
    if profile == "paper":
        assert p.audit.R == 200 and p.train.epochs == 20 and p.train.batch_size == 256 and p.train.lr == 0.1
        assert p.audit.m == "all" and p.train.clip == 5.0 and "law_paper" in p.data.datasets
        # 7 DP rules at ε 1 and 10 plus SGD, and DP-SGD at ε = 2, 16 seeds
        assert sum(1 for r in p.runs.values() if r.dataset == "adult") == 16 * (1 + 7 * 2 + 1)
    if profile == "gpu":  # the paper's full grid: every dataset of the paper, m = n, 2R = 400, on CUDA, sharded
        assert p.audit.m == "all" and p.audit.R == 200 and p.train.device == "cuda" and p.compute.workers > 1
        assert p.compute.shard_models is None  # its 400-model LR banks are sharded too (not the default's choice)
        assert {(g.dataset, g.model) for g in p.grid} == {(d, "lr") for d in ("adult", "bank", "credit", "law_paper",
                                                                              "compas")} | {
            ("mnist", "mlp"), ("mnist", "cnn"), ("utkface", "cnn")}
        membership = [g for g in p.grid if g.epsilons != [2]]  # the rest: the beyond-membership DP-SGD banks at ε = 2
        assert all(set(g.algorithms) == {"sgd", "dpsgd", "dpsgd_s"} and g.epsilons == [1, 10] for g in membership)
        assert all(g.algorithms == ["dpsgd"] for g in p.grid if g not in membership)
        assert {g.dataset: g.seeds for g in membership}["adult"] == 16 and min(g.seeds for g in p.grid) >= 6
        assert len(p.runs) == 5 * 16 * 5 + 3 * 6 * 5 + 3 * 16 + 3 * 6
    if profile == "default":  # both cores: MLP/CNN banks over 2 one-thread workers, LR banks (seconds) in-process
        assert p.compute.workers == 2 and p.compute.shard_models == ["mlp", "cnn", "cnn_relu"]
        # the 30-minute profile: every paper dataset but UTKFace, SGD / DP-SGD / DP-SGD-S at ε 1 and 10
        assert {(r.dataset, r.model) for r in p.runs.values() if r.algorithm == "dpsgd_s" and r.epsilon == 1} == {
            (d, "lr") for d in ("adult", "law_paper", "bank", "credit", "compas")} | {("mnist", "mlp")}
        assert len(p.runs) == 65
    if profile == "full":  # the default profile's settings over the grid it had before the 30-minute profile
        assert len(p.runs) == 141 and {r.dataset for r in p.runs.values()} >= {"utkface", "law_paper_blind"}
    if profile in ("pilot", "pilot_law"):
        assert p.audit.m == "all" and p.audit.R == 50 and len(p.runs) == 8 * 4
    if profile == "pilot_mnist_cnn":
        # one lr for both arms (the default profile's per-algorithm lr would confound the paired difference)
        from fairdp_core.stages.plan import train_plan

        specs = [train_plan(p, name)["spec"] for name in p.runs]
        assert len(specs) == 8 * 3 and {(s["lr"], s["epochs"]) for s in specs} == {(0.2, 2)}
    if profile == "claims_mnist_pilot":  # the claims design on MNIST (C = 10 as in the paper's config), 2R = 32
        from fairdp_core.stages.plan import train_plan

        assert p.audit.m == "all" and p.audit.R == 16 and len(p.runs) == 2 * 3 * 2
        assert {(r.dataset, r.model, r.epsilon) for r in p.runs.values()} == {("mnist", "mlp", 10), ("mnist", "cnn", 10)}
        specs = [train_plan(p, name)["spec"] for name in p.runs]
        # one lr for every arm: the default profile's per-algorithm lr must not reach the quantile arm
        assert {(s["lr"], s["epochs"], s["batch_size"]) for s in specs} == {(0.1, 20, 256)}
        assert {s["clip"] for s in specs if "clip" in s} == {10.0}
    if profile == "claims_utkface_pilot":  # UTKFace's config: C = 10, Adam, every arm at the tuned lr 0.005; whole split
        from fairdp_core.stages.plan import train_plan

        assert p.audit.m == "all" and p.audit.R == 16 and len(p.runs) == 2 * 2
        assert p.data.datasets["utkface"].train_size is None
        specs = [train_plan(p, name)["spec"] for name in p.runs]
        assert {(s["lr"], s["epochs"], s["batch_size"], s["clip"], s["optimizer"]) for s in specs} == {
            (0.005, 20, 256, 10.0, "adam")}
    if profile == "claims_utkface":  # the CPU design: 2R = 8, 6 paired seeds, both arms at the tuned Adam lr 0.005
        from fairdp_core.stages.plan import train_plan

        assert p.audit.m == "all" and p.audit.R == 4 and len(p.runs) == 2 * 6
        assert p.data.datasets["utkface"].train_size is None
        assert {r.algorithm for r in p.runs.values()} == {"dpsgd", "dpsgd_s_paper"}
        specs = [train_plan(p, name)["spec"] for name in p.runs]
        assert {(s["lr"], s["epochs"], s["batch_size"], s["clip"], s["optimizer"]) for s in specs} == {
            (0.005, 20, 256, 10.0, "adam")}
    if profile == "claims_mnist":  # the design the pilot chose: 2R = 64, DP-SGD against the paper's rule made DP
        from fairdp_core.stages.plan import train_plan

        assert p.audit.m == "all" and p.audit.R == 32 and len(p.runs) == 12 * 2
        assert {(r.dataset, r.model, r.epsilon, r.algorithm) for r in p.runs.values()} == {
            ("mnist", "mlp", 10, "dpsgd"), ("mnist", "mlp", 10, "dpsgd_s_paper")}
        specs = [train_plan(p, name)["spec"] for name in p.runs]
        assert {(s["lr"], s["epochs"], s["batch_size"], s["clip"]) for s in specs} == {(0.1, 20, 256, 10.0)}
    if profile == "claims_mnist_cnn":  # the CNN on 2 cores: 2R = 64, each arm at its tuned lr
        from fairdp_core.stages.plan import train_plan

        assert p.audit.m == "all" and p.audit.R == 32 and len(p.runs) == 12 * 2
        lrs = {r.algorithm: train_plan(p, name)["spec"]["lr"] for name, r in p.runs.items()}
        assert lrs == {"dpsgd": 0.1, "dpsgd_s_paper": 0.2}
        specs = [train_plan(p, name)["spec"] for name in p.runs]
        assert {(s["model"], s["epochs"], s["batch_size"], s["clip"]) for s in specs} == {("cnn", 20, 256, 10.0)}
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
    old = path.read_text()
    text = old.replace("- dataset: bank\n  model: lr\n  algorithms:\n  - sgd\n  - dpsgd\n  - dpsgd_s\n  epsilons:\n"
                       "  - 1\n  - 10\n", "- dataset: bank\n  model: lr\n  algorithms:\n  - sgd\n  - dpsgd\n"
                       "  - dpsgd_s\n  epsilons:\n  - 1\n  - 5\n", 1)
    assert text != old  # the edit happened
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
    path.write_text(original.replace("- dataset: bank\n  model: lr\n", "- dataset: bank\n  model: lrr\n", 1))
    broken = path.read_text()
    assert broken != original
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

    from fairdp_core.reporting.pages import read_notebook

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

@pytest.mark.slow
def test_overfit_sgd_leaks_more_than_dpsgd_eps1(mirror):
    """Adult (800 training records), MLP, 100 epochs, batch 50, lr 0.5, 2R = 16 models, m = 400: SGD overfits
    and its per-group GPR (cross-fitted) is clearly above DP-SGD's at ε = 1 with the same design and streams.
    Measured with these seeds: SGD [0.135, 0.078], DP-SGD [0.006, 0.022]."""
    from fairdp_core.audit import audit_design, cross_fit_advantage, gpr
    from fairdp_core.config.sections import DatasetOptions
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


@pytest.mark.slow
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
                                 "lira_online", "lira_offline", "rmia", "rmia_offline"}
    from fairdp_core.versions import package_versions

    assert s["versions"] == package_versions() and set(s["versions"]) == {"torch", "opacus", "numpy", "fairdp"}
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

    import fairdp_core.audit.run as attack_mod

    def boom(*a, **k):
        raise KeyboardInterrupt("killed mid-stage")

    monkeypatch.setattr(attack_mod, "studentized_permutation_pvalue", boom)
    name2 = "law-lr-dpsgd_s-e10-s0"
    assert cli_main(["audit", name2, "--quiet"]) == 130  # Ctrl-C: one line, exit status 130
    assert not (project / "results" / "audit" / name2).exists()
    assert not [p for p in (project / "results" / "audit").iterdir() if p.name.startswith(".")]
    capsys.readouterr()


@pytest.mark.slow
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







@pytest.mark.slow
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
