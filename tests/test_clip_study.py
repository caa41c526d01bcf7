"""The clip study (`fairdp clip-study`): paired arms, the quantile's ε charged, the output files.

Everything runs on two tiny synthetic datasets (400 training records, 6 features, two groups) saved as prepared data
in a temporary project, with 2R = 4 models and 20 permutations: the study's own code path, at toy size. The
accounting checks recompute ε from each bank's σ, independently of the numbers the study reports.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from fairdp_core.audit.design import audit_design
from fairdp_core.config import Params
from fairdp_core.data.base import GroupedData, Split, load, save
from fairdp_core.engine import epsilon as engine_epsilon
from fairdp_core.seeding import derive_rng, derive_seed
from fairdp_core.study import clip_study as cs
from fairdp_core.study.clip_tuning import composed_epsilon

# A budget where the quantile's share is large (ε_q = 0.5 of ε = 4: σ differs by 7% from DP-SGD's at the full ε), so
# that charging it or not is far outside the calibration tolerance. At the study's ε = 10, ε_q = 0.1 the release
# costs only about 0.012 of ε under RDP composition, close to the calibration's slack (test_cli_... checks it there).
EPS, EPS_Q = 4.0, 0.5
SEEDS = 2
RAW = {"seed": 7, "data": {"datasets": {"adult": {}, "compas": {}}, "prepared_dir": "prepared"},
       "train": {"epochs": 2.0, "batch_size": 32, "lr": 0.5, "threads": 1, "overrides": {"compas-lr": {"epochs": 3.0}}},
       "audit": {"m": 60, "R": 2, "min_per_group": 10, "n_perm": 20, "n_null": 5}}


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _toy(name: str, n: int, seed: int) -> GroupedData:
    rng = np.random.default_rng(seed)

    def split(k: int) -> Split:
        g = (rng.random(k) < 0.35).astype(np.int64)
        X = rng.normal(0, 1, (k, 6)).astype(np.float32)
        X[:, 0] += g
        y = (X[:, 1] + 0.5 * X[:, 2] + rng.normal(0, 1, k) > 0).astype(np.int64)
        return Split(X, y, g)

    return GroupedData(name, split(n), split(n // 4), ("a", "b"), ("0", "1"), tuple(f"f{i}" for i in range(6)), (6,),
                       "grp")


def _project(root: Path) -> Params:
    for i, d in enumerate(RAW["data"]["datasets"]):
        save(_toy(d, 400, i), root / "prepared" / d)
    return Params.model_validate({**RAW, "base_dir": root})


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Params:
    return _project(tmp_path_factory.mktemp("clip_study"))


@pytest.fixture(scope="module")
def study(toy) -> dict:
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # module fixtures start before the per-test one below
    try:
        return cs.clip_study(toy, ["adult", "compas"], seeds=SEEDS, epsilon=EPS, epsilon_q=EPS_Q, progress=False)
    finally:
        torch.set_num_threads(n)


def assert_budget(res: dict, eps: float, eps_q: float) -> None:
    """Arm A spends the target ε; arm B's quantile release plus training compose to the target and training alone
    spends less. Recomputed from each bank's own σ, q and T (its accounting), not from the study's ε columns.

    "Spends the target": at most the target, and a σ 0.3% smaller would overspend it (the engine's and tune_clip's
    σ are each the upper end of a bisection of relative width 1e-3)."""
    for r in res["configs"]:
        a, b = r["arms"]["A"]["accounting"], r["arms"]["B"]["accounting"]
        q, T, delta = a["sample_rate"], a["steps"], a["delta"]
        assert (b["sample_rate"], b["steps"], b["delta"]) == (q, T, delta)
        # arm A: the full target
        assert a["target_epsilon"] == eps
        eps_a = engine_epsilon(a["sigma_eff"], sample_rate=q, steps=T, delta=delta)
        assert eps_a <= eps < engine_epsilon(a["sigma_eff"] / 1.003, sample_rate=q, steps=T, delta=delta)
        # arm B: trained to the target less the quantile release, and the two composed meet the target
        assert b["target_epsilon"] == pytest.approx(r["eps_B_training_planned"], abs=0) and b["target_epsilon"] < eps
        total = composed_epsilon(b["sigma_eff"], sample_rate=q, steps=T, delta=delta, epsilon_q=eps_q)
        assert total <= eps * (1 + 1e-9), (r["dataset"], r["seed"], total)
        assert composed_epsilon(b["sigma_eff"] / 1.003, sample_rate=q, steps=T, delta=delta, epsilon_q=eps_q) > eps
        alone = engine_epsilon(b["sigma_eff"], sample_rate=q, steps=T, delta=delta)
        assert alone < total <= eps
        assert abs(b["sigma_eff"] / r["sigma_B_tune_clip"] - 1) <= cs.SIGMA_RTOL
        assert r["eps_B_total"] == pytest.approx(total, rel=1e-12)


@pytest.mark.slow
def test_arm_b_charges_the_quantile_and_arm_a_spends_the_target(study):
    assert_budget(study, EPS, EPS_Q)
    for r in study["configs"]:  # the quantile's share is visible: B trains with more noise than A
        assert r["sigma_B"] > r["sigma_A"] * 1.02 and r["eps_B_training"] < r["eps_A"]


@pytest.mark.slow
@pytest.mark.parametrize("eps,eps_q", [(EPS, EPS_Q), (10.0, 0.1)])
def test_training_arm_b_at_the_full_epsilon_is_caught(toy, monkeypatch, eps, eps_q):
    """The quantile release not charged (arm B trained at the full ε): the study refuses to report it, and the
    budget check above fails on its banks, at the toy budget and at the study's own (ε = 10, ε_q = 0.1)."""
    orig = cs.arm_specs

    def uncharged(spec, *, clip_b, epsilon_training):
        return orig(spec, clip_b=clip_b, epsilon_training=eps)

    monkeypatch.setattr(cs, "arm_specs", uncharged)
    with pytest.raises(RuntimeError, match="arm B"):
        cs.clip_study(toy, ["adult"], seeds=SEEDS, epsilon=eps, epsilon_q=eps_q, progress=False)
    # and with the study's own guard removed, the independent check catches the banks
    monkeypatch.setattr(cs, "_guard_budget", lambda *a, **k: None)
    params = cs.study_params(toy, ["adult"], seeds=SEEDS, epsilon=eps)
    data = load(toy.resolve(toy.data.prepared_dir) / "adult")
    row = cs._config(params, "adult", 0, data, model="lr", epsilon=eps, epsilon_q=eps_q, quantile=0.5)
    with pytest.raises(AssertionError):
        assert_budget({"configs": [row]}, eps, eps_q)


def test_the_arms_share_the_design_and_seeds(toy, study):
    """Per dataset and seed: one design (the design stage's <dataset>-s<seed>, drawn independently here), one bank
    seed (the plan's), the same spec but for C and the training ε; different seeds, different designs."""
    for r in study["configs"]:
        d, s = r["dataset"], r["seed"]
        a, b = r["arms"]["A"], r["arms"]["B"]
        assert a["design_sha"] == b["design_sha"] == r["design_sha"]
        assert a["bank_seed"] == b["bank_seed"] == derive_seed(toy.seed, "bank", d, "lr", s)
        assert {k: v for k, v in a["spec"].items() if k not in ("clip", "target_epsilon")} == \
            {k: v for k, v in b["spec"].items() if k not in ("clip", "target_epsilon")}
        assert a["spec"]["clip"] == 1.0 and b["spec"]["clip"] == r["clip_B"]
        assert r["design"] == f"{d}-s{s}"
        data = _toy(d, 400, list(RAW["data"]["datasets"]).index(d))
        aud = toy.audit
        own = audit_design(data.train.group, m=aud.m_for(len(data.train)), R=aud.R, min_per_group=aud.min_per_group,
                           rng=derive_rng(toy.seed, "design", d, s))
        assert cs._design_digest(own) == r["design_sha"]
    shas = {(r["dataset"], r["seed"]): r["design_sha"] for r in study["configs"]}
    assert shas[("adult", 0)] != shas[("adult", 1)]
    assert study["seeds"] == list(range(SEEDS))
    # the dataset's own override reaches both arms (compas: 3 epochs)
    assert {r["arms"]["A"]["spec"]["epochs"] for r in study["configs"] if r["dataset"] == "compas"} == {3.0}


def test_the_output_files_have_the_stated_columns(study, tmp_path):
    js, md = cs.write_clip_study(study, tmp_path / "tuning")
    assert (js.name, md.name) == ("clip_study.json", "clip_study.md")
    res = json.loads(js.read_text())
    assert [s["dataset"] for s in res["datasets"]] == ["adult", "compas"]
    for s in res["datasets"]:
        assert set(cs.SUMMARY_COLUMNS) <= set(s), set(cs.SUMMARY_COLUMNS) - set(s)
        assert s["seeds"] == SEEDS and s["eps_B_total"] <= EPS and s["eps_A"] <= EPS
        d = [r["delta_B_pp"] - r["delta_A_pp"] for r in res["configs"] if r["dataset"] == s["dataset"]]
        assert s["diff_delta_pp"] == pytest.approx(np.mean(d))
        lo, hi = s["diff_delta_ci_pp"]
        assert lo <= s["diff_delta_pp"] <= hi and s["diff_delta_mde_pp"] > 0
        assert f"{SEEDS} seeds" in s["verdict"] and "changes Δ by" in s["verdict"]
    assert len(res["configs"]) == 2 * SEEDS
    for r in res["configs"]:
        assert set(cs.CONFIG_COLUMNS) <= set(r), set(cs.CONFIG_COLUMNS) - set(r)
    text = md.read_text()
    for needle in ("| dataset | seeds | C (A) | C (B, DP median) | non-private median (tuning outside ε) |",
                   "ε (B: quantile + training)", "Δ: B − A (pp)", "MDE Δ (pp)", "accuracy: B − A (pp)",
                   "The median's ε is charged", "RDP accountant", "2R = 4 models", "Seeds 0, 1",
                   "- **adult**: a per-dataset C", "- **compas**: a per-dataset C"):
        assert needle in text, needle
    assert not re.search(r"\bnan\b", text, flags=re.I)
    assert not list((tmp_path / "tuning").glob(".*"))  # atomic writes leave no temporaries


def test_a_missing_dataset_is_named(toy, tmp_path):
    with pytest.raises(KeyError, match="'adlt'"):
        cs.clip_study(toy, ["adult", "adlt"], seeds=2, progress=False)
    p = toy.model_copy(update={"data": toy.data.model_copy(update={"datasets": {**toy.data.datasets,
                                                                                **{"credit": toy.data.datasets["adult"]}}})})
    with pytest.raises(FileNotFoundError, match="'credit'"):
        cs.clip_study(p, ["credit"], seeds=2, progress=False)
    with pytest.raises(ValueError, match="at least 2"):
        cs.clip_study(toy, ["adult"], seeds=1, progress=False)


@pytest.mark.slow
def test_cli_runs_the_study_at_the_studys_budget(tmp_path, capsys):
    """`fairdp clip-study` on a params.yaml of the toy project, at the study's ε = 10 and ε_q = 0.1: both files
    written, and the budget holds there too."""
    from fairdp_core.cli import main as cli_main
    from fairdp_core.cli import write_generated

    _project(tmp_path)
    raw = {k: v for k, v in RAW.items()}
    raw["data"] = {**RAW["data"], "mirror": None}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    write_generated(tmp_path / "params.yaml")
    out = tmp_path / "reports" / "tuning"
    rc = cli_main(["--params", str(tmp_path / "params.yaml"), "clip-study", "--datasets", "compas", "--seeds", "2",
                   "--out", str(out), "--quiet", "--threads", "1"])
    assert rc == 0
    stdout = capsys.readouterr().out
    assert "compas: a per-dataset C" in stdout and "clip_study.md" in stdout
    res = json.loads((out / "clip_study.json").read_text())
    assert (res["epsilon"], res["epsilon_q"], res["datasets_run"]) == (10.0, 0.1, ["compas"])
    assert_budget(res, 10.0, 0.1)
    assert (out / "clip_study.md").is_file()


def test_cli_names_an_unknown_dataset(capsys):
    from fairdp_core.cli import main as cli_main

    root = Path(__file__).resolve().parents[1]
    assert cli_main(["--params", str(root / "params.yaml"), "clip-study", "--datasets", "adult", "adlt"]) == 2
    err = capsys.readouterr().err
    assert "'adlt' is not under data.datasets" in err and "fairdp clip-study: error" in err


def test_arm_specs_changes_only_c_and_the_training_epsilon():
    spec = {"algorithm": "dpsgd", "model": "lr", "epochs": 2.0, "batch_size": 32, "lr": 0.5, "clip": 1.0,
            "target_epsilon": 10.0, "delta": 1e-5, "accountant": "rdp"}
    a, b = cs.arm_specs(spec, clip_b=2.5, epsilon_training=9.97)
    assert (a.clip, a.target_epsilon, b.clip, b.target_epsilon) == (1.0, 10.0, 2.5, 9.97)
    assert {k: v for k, v in asdict(a).items() if k not in ("clip", "target_epsilon")} == \
        {k: v for k, v in asdict(b).items() if k not in ("clip", "target_epsilon")}
