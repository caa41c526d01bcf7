"""`fairdp exp run -S KEY=VALUE -n NAME [--queue]` as the README documents it: the assignments are applied by fairdp
(grid and sweep keys regenerate runs.yaml) before dvc sees the workspace, dvc gets only its own options, and
--queue restores params.yaml and runs.yaml. A stand-in `dvc` on PATH records what it was called with and the
params it saw."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest
import yaml

from fairdp_core.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]

FAKE_DVC = """#!{python}
import json, pathlib, sys
p = pathlib.Path("params.yaml").read_text()
r = pathlib.Path("runs.yaml").read_text()
with open("dvc-calls.jsonl", "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "params": p, "runs": r}}) + "\\n")
"""


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    for f in ("params.yaml", "runs.yaml"):
        shutil.copy(ROOT / f, tmp_path / f)
    shutil.copytree(ROOT / "profiles", tmp_path / "profiles")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "dvc").write_text(FAKE_DVC.format(python=sys.executable))
    (bindir / "dvc").chmod((bindir / "dvc").stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _calls(ws: Path) -> list[dict]:
    return [json.loads(x) for x in (ws / "dvc-calls.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("key, value, check", [
    ("train.lr", "0.2", lambda p, r: p["train"]["lr"] == 0.2),
    ("grid.0.seeds", "3", lambda p, r: "adult-lr-sgd-s2" in r["runs"]),
    ("sweep.taus", "[0.5]", lambda p, r: any("-t0p5-" in k for k in r["runs"]) and not any("-t4-" in k
                                                                                          for k in r["runs"])),
])
def test_exp_run_applies_every_kind_of_key_before_dvc(workspace, key, value, check):
    before = {f: (workspace / f).read_text() for f in ("params.yaml", "runs.yaml")}
    assert cli_main(["exp", "run", "-S", f"{key}={value}", "-n", "try-it"]) == 0
    (call,) = _calls(workspace)
    assert call["argv"] == ["exp", "run", "-n", "try-it"]  # no -S for dvc: fairdp applied it
    assert check(yaml.safe_load(call["params"]), yaml.safe_load(call["runs"]))
    # without --queue the workspace keeps the experiment's params (as dvc exp run does)
    assert (workspace / "params.yaml").read_text() != before["params.yaml"]


def test_exp_run_queue_restores_params_and_passes_dvc_options(workspace):
    before = {f: (workspace / f).read_text() for f in ("params.yaml", "runs.yaml")}
    assert cli_main(["exp", "run", "-S", "grid.0.seeds=3", "-S", "train.lr=0.3", "--queue", "-n", "q1",
                     "--message", "hello"]) == 0
    assert cli_main(["exp", "run", "-S", "train.lr=0.4", "--queue", "-n", "q2"]) == 0
    first, second = _calls(workspace)
    assert first["argv"] == ["exp", "run", "--queue", "-n", "q1", "--message", "hello"]
    assert "adult-lr-sgd-s2" in first["runs"] and yaml.safe_load(first["params"])["train"]["lr"] == 0.3
    # the second experiment starts from the restored workspace: the first one's grid change is gone
    assert "adult-lr-sgd-s2" not in second["runs"] and yaml.safe_load(second["params"])["train"]["lr"] == 0.4
    assert {f: (workspace / f).read_text() for f in before} == before


def test_a_failed_experiment_restores_params_byte_for_byte(workspace):
    """dvc exits 1: params.yaml (its comments included) and runs.yaml are restored byte for byte."""
    before = {f: (workspace / f).read_bytes() for f in ("params.yaml", "runs.yaml")}
    (workspace / "bin" / "dvc").write_text(FAKE_DVC.format(python=sys.executable) + "sys.exit(1)\n")
    assert cli_main(["exp", "run", "-S", "grid.0.seeds=3", "-S", "train.lr=0.3", "-n", "fails"]) == 1
    (call,) = _calls(workspace)
    assert yaml.safe_load(call["params"])["train"]["lr"] == 0.3  # dvc saw the experiment's params
    assert {f: (workspace / f).read_bytes() for f in before} == before


def test_dvc_is_found_beside_python_or_named_before_any_edit(workspace, monkeypatch, capsys):
    """Without dvc on PATH, the one beside this Python (the venv's) runs; with none anywhere, one line naming dvc,
    and params.yaml untouched."""
    from fairdp_core.cli.params import dvc_executable

    venv_bin = workspace / "venv-bin"
    venv_bin.mkdir()
    (workspace / "bin" / "dvc").rename(venv_bin / "dvc")
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    monkeypatch.setenv("PATH", "/nonexistent")
    assert dvc_executable() == str(venv_bin / "dvc")
    assert cli_main(["exp", "run", "-S", "train.lr=0.2", "-n", "x"]) == 0 and len(_calls(workspace)) == 1
    (venv_bin / "dvc").unlink()
    before = (workspace / "params.yaml").read_bytes()
    assert cli_main(["exp", "run", "-S", "train.lr=0.3", "-n", "y"]) == 2
    assert "dvc: not found" in capsys.readouterr().err
    assert (workspace / "params.yaml").read_bytes() == before


@pytest.fixture(scope="module")
def profile_texts(tmp_path_factory):
    """params.yaml as committed, and as `fairdp use-profile` writes every profile."""
    from fairdp_core.study.params_files import profile_names, use_profile

    d = tmp_path_factory.mktemp("profiles")
    texts = {"params.yaml": (ROOT / "params.yaml").read_text()}
    for name in profile_names(ROOT / "profiles"):
        use_profile(name, d / "params.yaml", ROOT / "profiles")
        texts[name] = (d / "params.yaml").read_text()
    return texts


@pytest.mark.parametrize("keys", [("train.dpsgd_s.tau", "2.5"), ("audit.R", "3"), ("seed", "7")])
def test_a_bare_dvc_exp_run_set_changes_only_that_line(tmp_path, profile_texts, keys):
    """`dvc exp run -S KEY=VALUE` rewrites params.yaml with DVC's own writer (dvc.utils.hydra.apply_overrides, which
    `dvc exp run` calls before it runs anything): every profile's params.yaml is a fixed point of it, so the set
    changes one line, comments and layout stay, and setting the old value back restores the file byte for byte."""
    import difflib

    from dvc.utils.hydra import apply_overrides

    key, value = keys
    path = tmp_path / "params.yaml"
    for name, text in profile_texts.items():
        old = yaml.safe_load(text)
        for part in key.split("."):
            old = old[part]
        path.write_text(text)
        apply_overrides(path, [f"{key}={value}"])
        changed = [ln for ln in difflib.unified_diff(text.splitlines(), path.read_text().splitlines(), n=0, lineterm="")
                   if ln[:1] in "+-" and ln[:3] not in ("---", "+++")]
        assert len(changed) == 2 and changed[1].split("#")[0].rstrip().endswith(f" {value}"), (name, changed[:6])
        apply_overrides(path, [f"{key}={old}"])
        assert path.read_text() == text, name


def test_fairdp_set_changes_only_that_line(tmp_path):
    """`fairdp set` (what `fairdp exp run -S` applies) writes as DVC does: one line changes, the rest stays."""
    from fairdp_core.cli import set_params

    params = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params)
    shutil.copy(ROOT / "runs.yaml", tmp_path / "runs.yaml")
    text = params.read_text()
    set_params(params, ["train.dpsgd_s.tau=2.0"])
    old, new = text.splitlines(), params.read_text().splitlines()
    assert len(new) == len(old) and [b for a, b in zip(old, new) if a != b] == ["    tau: 2.0"]
    set_params(params, ["train.dpsgd_s.tau=1.0"])
    assert params.read_text() == text


def _state(rev, tau, metrics, name=None, experiments=None, epsilons=(1, 10)):
    """One entry of `dvc exp show --json` (dvc.repo.experiments.serialize.ExpState), as DVC 3 writes it: a queued
    experiment has its params and no metrics."""
    data = {"rev": rev, "params": {"params.yaml": {"data": {
        "seed": 1, "train": {"dpsgd_s": {"tau": tau}, "lr": 0.1},
        "grid": [{"dataset": "adult", "epsilons": list(epsilons)}, {"dataset": "law", "epsilons": [10]}]}}},
            "metrics": {} if metrics is None else {"reports/metrics.json": {"data": metrics}}}
    return {"rev": rev, "name": name, "data": data, "error": None, "experiments": experiments}


def test_exp_table_shows_changed_parameters_first_then_differing_cells_with_intervals():
    """`fairdp exp show`: one column per experiment; the changed parameter first; only the configurations whose
    accuracy or Δ moved (with Δ's interval); queued experiments named below; --all lists every configuration."""
    from fairdp_core.cli.params import exp_table

    same = {"accuracy": 0.84203, "delta_pp": 0.1409, "delta_lo": 0.0, "delta_hi": 1.79}
    base = {"adult-lr-sgd": same, "adult-lr-dpsgd_s-e10": {"accuracy": 0.83449, "delta_pp": 1.6234,
                                                          "delta_lo": 0.0, "delta_hi": 3.9}}
    moved = {**base, "adult-lr-dpsgd_s-e10": {"accuracy": 0.8351, "delta_pp": 1.2, "delta_lo": 0.1, "delta_hi": 2.5}}
    exps = [{"revs": [_state("e1", 2.0, moved, name="tau2")], "executor": None, "name": "tau2"},
            {"revs": [_state("e2", 4.0, None)], "executor": {"state": "queued"}, "name": "tau4"}]
    states = [_state("workspace", 1.0, base), _state("abc1234def", 1.0, base, name="main", experiments=exps)]
    text = exp_table(states)
    lines = text.splitlines()
    assert lines[0].split() == ["main", "tau2"]  # the workspace is main: one column
    assert lines[1] == "parameters that differ:" and lines[2].split() == ["train.dpsgd_s.tau", "1.0", "2.0"]
    assert lines[3].startswith("accuracy and Δ")
    assert "83.45% Δ 1.62 [0.00, 3.90]" in lines[4] and "83.51% Δ 1.20 [0.10, 2.50]" in lines[4]
    assert "adult-lr-sgd" not in text and "seed" not in text and "grid" not in text
    assert lines[-1] == "without results yet: tau4 (queued)"
    assert max(map(len, lines)) < 100  # fits a terminal
    exps.append({"revs": [_state("e3", 1.0, base, name="eps5", epsilons=(1, 5))], "executor": None, "name": "eps5"})
    text = exp_table(states)  # a grid edit: one row, grid.0.epsilons, not the whole grid in a cell
    assert [ln.split()[0] for ln in text.splitlines()[2:4]] == ["grid.0.epsilons", "train.dpsgd_s.tau"]
    assert text.splitlines()[2].split()[-2:] == ["[1,", "5]"] and "grid.1" not in text
    exps.pop()
    assert "adult-lr-sgd" in exp_table(states, all_rows=True)
    states[0]["data"]["params"]["params.yaml"]["data"]["train"]["lr"] = 0.2  # an edited workspace: its own column
    assert exp_table(states).splitlines()[0].split() == ["workspace", "main", "tau2"]


def test_exponent_floats_and_ambiguous_strings_survive_both_writers(tmp_path):
    """DVC's writer (YAML 1.2) writes `dvc exp run -S train.delta=1e-6` as `delta: 1e-06`, which a YAML 1.1 reader
    takes for a string: params.yaml's reader reads it as the float; `fairdp set` parses 1e-6 alike; and a string
    such as 'on' is written quoted, so it reads back as the string, not True."""
    from dvc.utils.hydra import apply_overrides

    from fairdp_core.cli import set_params
    from fairdp_core.config import load_params

    params = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params)
    shutil.copy(ROOT / "runs.yaml", tmp_path / "runs.yaml")
    apply_overrides(params, ["train.delta=1e-6"])
    assert "delta: 1e-06" in params.read_text() and load_params(params).train.delta == 1e-6
    set_params(params, ["train.delta=2e-6", "compute.backend=ray", "compute.ray_address='on'"])
    text = params.read_text()
    assert "ray_address: 'on'" in text and yaml.safe_load(text)["compute"]["ray_address"] == "on"
    assert load_params(params).train.delta == 2e-6
