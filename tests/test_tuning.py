"""`fairdp tune`: the validation design at m = n (each model on a stratified half, scored on part of the test split,
accuracy reported on the rest) and `--run`, which sweeps a run's own planned spec.

Toy data: 400 training and 200 test records, 6 features, two groups, LR, one epoch: the sweep's own code path."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import fairdp_core.engine as engine
from fairdp_core.config import ConfigError, load_params
from fairdp_core.data.base import GroupedData, Split
from fairdp_core.stages.plan import train_plan
from fairdp_core.study import tuning

ROOT = Path(__file__).resolve().parents[1]
RUN = "adult-lr-dpsgd_s_paper-e10-s0"  # a run of the committed default profile


def _toy(seed: int = 3) -> GroupedData:
    rng = np.random.default_rng(seed)

    def split(k: int) -> Split:
        g = (rng.random(k) < 0.3).astype(np.int64)
        X = rng.normal(0, 1, (k, 6)).astype(np.float32)
        y = (X[:, 1] + rng.normal(0, 0.5, k) > 0).astype(np.int64)
        return Split(X, y, g)

    return GroupedData("toy", split(400), split(200), ("a", "b"), ("0", "1"), tuple(f"f{i}" for i in range(6)), (6,),
                       "grp")


@pytest.fixture
def spy(monkeypatch) -> list[dict]:
    """Record what every bank of the sweep was trained on (the real training still runs)."""
    calls, real = [], engine.train_bank

    def wrapped(X, y, group, membership, spec, **kw):
        bank = real(X, y, group, membership, spec, **kw)
        calls.append({"X": X, "group": group, "membership": membership.copy(), "spec": spec, "bank": bank})
        return bank

    monkeypatch.setattr(engine, "train_bank", wrapped)
    return calls


BASE = {"batch_size": 32, "epochs": 1.0, "clip": 1.0, "delta": 1e-5, "accountant": "rdp"}


def test_validation_on_test_trains_stratified_halves_and_reports_the_rest(spy):
    torch.set_num_threads(1)
    data = _toy()
    rows = tuning.validation_sweep(data, "lr", grid={"lr": [0.1, 0.5]}, algorithms=["dpsgd"], epsilons=[10.0],
                                   base=BASE, seed=5, M=4, validation="test", progress=False)
    assert [r["lr"] for r in rows] == [0.1, 0.5]
    assert all(0.0 <= r["rest_accuracy"] <= 1.0 for r in rows)
    for call in spy:
        mem = call["membership"]
        assert call["X"] is data.train.X  # the whole training split, as audited at m = n
        assert mem.shape == (4, 400)
        # complementary stratified halves: every record in exactly one model of each pair, every group halved
        assert (mem[0] ^ mem[1]).all() and (mem[2] ^ mem[3]).all()
        for k in (0, 1):
            nk = (data.train.group == k).sum()
            assert np.all(np.abs(mem[:, data.train.group == k].sum(1) - nk / 2) <= 0.5)
    assert (spy[0]["membership"] == spy[1]["membership"]).all()  # one design for every setting
    # The choice is scored on one half of the test split and `rest_accuracy` on the other: recompute both by hand.
    val = np.zeros(200, bool)
    val[np.random.default_rng(5).permutation(200)[:40]] = True  # val_fraction 0.2 of the test split
    te = data.test
    for row, call in zip(rows, spy):
        correct = call["bank"].evaluate(te.X, te.y)[1].argmax(-1) == te.y
        assert row["val_accuracy"] == pytest.approx(correct[:, val].mean())
        assert row["rest_accuracy"] == pytest.approx(correct[:, ~val].mean())


def test_validation_on_test_follows_an_audit_of_m_records(spy):
    """With an audit set of m < n records, a tuning model trains as the run's audited models do: on every record
    outside the audit set and its own stratified half of it."""
    data = _toy()
    tuning.validation_sweep(data, "lr", grid={"lr": [0.5]}, algorithms=["dpsgd"], epsilons=[10.0], base=BASE,
                            seed=5, M=2, validation="test", m=100, min_per_group=10, progress=False)
    mem = spy[0]["membership"]
    always = mem.all(0)  # outside the audit set
    assert always.sum() == 300 and (mem[0] ^ mem[1])[~always].all()


def test_validation_on_train_keeps_the_old_design(spy):
    data = _toy()
    rows = tuning.validation_sweep(data, "lr", grid={"lr": [0.5]}, algorithms=["dpsgd"], epsilons=[10.0],
                                   base=BASE, seed=5, M=2, progress=False)
    assert "rest_accuracy" not in rows[0]
    assert spy[0]["membership"].all() and spy[0]["membership"].shape == (2, 320)  # 80% of the training split


def test_validation_must_be_train_or_test_and_its_share_a_fraction():
    with pytest.raises(ValueError, match="validation"):
        tuning.validation_sweep(_toy(), "lr", grid={}, algorithms=["dpsgd"], epsilons=[1.0], base=BASE, seed=0,
                                validation="holdout", progress=False)
    with pytest.raises(ValueError, match="val_fraction"):
        tuning.validation_sweep(_toy(), "lr", grid={}, algorithms=["dpsgd"], epsilons=[1.0], base=BASE, seed=0,
                                validation="test", val_fraction=1.0, progress=False)


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """The committed default profile's params and runs, with the toy data standing in for every dataset."""
    for f in ("params.yaml", "runs.yaml"):
        shutil.copy(ROOT / f, tmp_path / f)
    monkeypatch.setattr("fairdp_core.data.load", lambda path: _toy())
    return tmp_path


def test_run_sweeps_the_runs_planned_spec(project, monkeypatch):
    seen = {}

    def fake_sweep(data, model, **kw):
        seen.update(kw, model=model)
        return []

    monkeypatch.setattr(tuning, "validation_sweep", fake_sweep)
    out = project / "t.json"
    assert tuning.main(["--params", str(project / "params.yaml"), "--run", RUN, "--lr", "0.05", "0.2",
                        "--validation", "test", "--out", str(out)]) == 0
    plan = train_plan(load_params(project / "params.yaml"), RUN)["spec"]
    assert seen["algorithms"] == [plan["algorithm"]] and seen["model"] == plan["model"]
    assert seen["epsilons"] == [plan["target_epsilon"]]
    expected = {k: v for k, v in plan.items() if k not in ("algorithm", "model", "target_epsilon", "lr")}
    assert seen["base"] == expected  # the rule's own settings and the run's clip/epochs, not the global defaults
    assert seen["grid"] == {"lr": [0.05, 0.2]} and seen["validation"] == "test" and seen["val_fraction"] == 0.5
    params = load_params(project / "params.yaml")  # the profile's audit design: m = min(audit.m, n), its group floor
    assert (seen["m"], seen["min_per_group"]) == (params.audit.m_for(400), params.audit.min_per_group)
    assert '"run": "' + RUN + '"' in out.read_text()


def test_run_unknown_is_a_config_error(project):
    with pytest.raises(ConfigError, match="no run 'nope'"):
        tuning.main(["--params", str(project / "params.yaml"), "--run", "nope", "--lr", "0.1"])
    with pytest.raises(ConfigError, match="--val-fraction"):
        tuning.main(["--params", str(project / "params.yaml"), "--run", RUN, "--lr", "0.1", "--val-fraction", "0"])


def test_without_a_run_each_rule_sweeps_at_its_own_settings(project, monkeypatch):
    """`fairdp tune --dataset`: every algorithm trains with its own rule's settings from params (Global-Adapt's
    initial Z 100 and η 1, AdaClip's γ), never DP-SGD-S's constants stored under the same field names (q_init 1,
    η 0.2); a swept key is left to the grid; DP-SGD gets no rule fields at all."""
    seen = {}

    def fake_sweep(data, model, **kw):
        seen.update(kw)
        return []

    monkeypatch.setattr(tuning, "validation_sweep", fake_sweep)
    assert tuning.main(["--params", str(project / "params.yaml"), "--dataset", "law_paper", "--algorithms", "dpsgd",
                        "global_adapt", "adaclip", "dpsgd_s", "--gamma", "0.8", "--out",
                        str(project / "t.json")]) == 0
    from fairdp_core.rules import get as get_rule

    t = load_params(project / "params.yaml").train
    ga, ac, ds = (get_rule(r).settings_of(t) for r in ("global_adapt", "adaclip", "dpsgd_s"))
    assert (ga.z_init, ga.eta, ac.c_max) == (100.0, 1.0, 100.0) and ds.q_init == 1.0  # they differ: a mix-up shows
    assert not set(seen["base"]) & {"q_init", "tau", "gamma", "eta_q", "q_max"}
    own = seen["rule_fields"]
    assert own["dpsgd"] == {}
    assert (own["global_adapt"]["q_init"], own["global_adapt"]["eta_q"]) == (ga.z_init, ga.eta)
    assert own["adaclip"]["q_max"] == ac.c_max and own["dpsgd_s"]["q_max"] == ds.q_max
    assert "gamma" not in own["adaclip"] and seen["grid"] == {"gamma": [0.8]}


def test_a_rule_setting_is_swept_only_for_the_rules_that_have_it(spy, monkeypatch, capsys, project):
    """A γ grid over SGD, DP-SGD and DP-SGD-S: DP-SGD-S trains once per γ, each at that γ; SGD and DP-SGD, which have
    no γ, train once per ε, with no γ in their rows (not once per γ at an identical spec); the printed table reads
    "—" for them."""
    torch.set_num_threads(1)
    rows = tuning.validation_sweep(_toy(), "lr", grid={"gamma": [0.5, 0.75]}, algorithms=["sgd", "dpsgd", "dpsgd_s"],
                                   epsilons=[10.0], base=BASE, seed=5, M=2, progress=False)
    assert [(r["algorithm"], r.get("gamma")) for r in rows] == [("sgd", None), ("dpsgd", None), ("dpsgd_s", 0.5),
                                                              ("dpsgd_s", 0.75)]
    assert [c["spec"].gamma for c in spy] == [None, None, 0.5, 0.75]
    monkeypatch.setattr(tuning, "validation_sweep", lambda data, model, **kw: rows)
    assert tuning.main(["--params", str(project / "params.yaml"), "--dataset", "law_paper", "--gamma", "0.5", "0.75",
                        "--out", str(project / "t.json")]) == 0
    assert "gamma=—" in capsys.readouterr().out
