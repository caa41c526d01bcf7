"""Each DVC stage depends on exactly the code it imports, and its results do not depend on execution knobs.

For every stage of dvc.yaml: the fairdp_core modules that its entry point (``python -m <module>``) loads in a
fresh interpreter, and the static import closure of that module (function-level imports included, plus the
report notebook's own imports for report stages), must all be covered by the stage's declared code deps; and
every declared code dep must be in that closure (no stage reruns for code it never imports; for the report
stages, which share one deps list through ``foreach``, in the union of their notebooks' closures).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from fairdp_core.reporting.pages import foreach_items
from fairdp_core.stages.code import SELF as CODE_SELF  # the code stages' own module: their dep, not fingerprinted

from .conftest import ROOT, fairdp_imports, module_file

PKG = ROOT / "fairdp_core"
DVC = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
REPORTS = foreach_items(ROOT, DVC["report"]["foreach"])  # ${pages}: runs.yaml, from the report registry


def _code_deps(deps: list[str]) -> list[str]:
    """The declared fairdp_core deps, a code fingerprint (results/code/<family>.json) standing for the modules its
    stage code_<family> lists (fairdp_core/stages/code.py)."""
    out = [d for d in deps if d.startswith("fairdp_core")]
    for d in deps:
        if d.startswith("results/code/"):
            out += [c for c in DVC[f"code_{Path(d).stem}"]["deps"] if c != CODE_SELF]
    return out


def _stages() -> list[tuple[str, str, list[str], str | None]]:
    """(stage name, entry module, declared fairdp_core deps, notebook path or None); the code stages, which list
    another stage family's code, are checked apart."""
    out = []
    for name, st in DVC.items():
        if name.startswith("code_"):
            continue
        body = st.get("do", st)
        module = body["cmd"].split()[2]
        deps = _code_deps(body["deps"])
        if name == "report":
            for item in REPORTS:
                out.append((f"report@{item}", module, deps, f"notebooks/{item}.py"))
        elif module == "fairdp_core.stages.report" and not body["cmd"].split()[3].startswith("-"):
            # a report stage of its own (the quickstart, beyond_membership): the notebook it names
            out.append((name, module, deps, f"notebooks/{body['cmd'].split()[3]}.py"))
        else:
            out.append((name, module, deps, None))
    return out


def _closure(start: set[str]) -> set[Path]:
    """Files of the modules in ``start`` and of everything they import, with every parent package's __init__."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        mod = todo.pop()
        parts = mod.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__
            todo.append(".".join(parts[:i])) if ".".join(parts[:i]) not in seen and i < len(parts) else None
        if mod in seen:
            continue
        seen.add(mod)
        f = module_file(mod)
        if f is None:
            continue
        package = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
        todo.extend(m for m in fairdp_imports(f, package) - seen if (mod, m) not in VALIDATION_ONLY)
        if mod in DISCOVERS:  # a registry imports every module of its package by name at run time
            found = module_file(DISCOVERS[mod]).parent
            todo.extend(f"{DISCOVERS[mod]}.{q.stem}" for q in sorted(found.glob("*.py")) if not q.stem.startswith("_"))
    return {module_file(m).relative_to(ROOT) for m in seen if module_file(m)}


# Registries that import every module of a package at run time (pkgutil), which no import statement names: the
# attacks (audit/mia/) and the datasets (data/sets/).
DISCOVERS = {"fairdp_core.audit.mia": "fairdp_core.audit.mia", "fairdp_core.data.loaders": "fairdp_core.data.sets"}


# Imports that only validate params and feed nothing into a stage's outputs: params.yaml's dataset names and groups
# are checked against the dataset registry, but a dataset's code reaches every other stage through data/prepared
# (its prepare stage's outputs). Declaring it would rerun every train and attack stage of every dataset after an edit
# to one dataset's module.
VALIDATION_ONLY = {("fairdp_core.config.sections", "fairdp_core.data.loaders")}


def _covered(path: Path, deps: list[str]) -> bool:
    return any(path == Path(d) or Path(d) in path.parents for d in deps)


@pytest.mark.slow
@pytest.mark.parametrize(("stage", "module", "deps", "notebook"), _stages(), ids=[s[0] for s in _stages()])
def test_stage_deps_are_exactly_the_code_itfairdp_imports(stage, module, deps, notebook):
    start = {module}
    if notebook:
        start |= fairdp_imports(ROOT / notebook, "")
    static = _closure(start)
    code = f"import importlib, sys; importlib.import_module({module!r})"
    if notebook:
        code += "".join(f"; importlib.import_module({m!r})" for m in sorted(start - {module}))
    code += "; print('\\n'.join(sorted(m.__file__ for n, m in sys.modules.items() if n.startswith('fairdp_core'))))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    dynamic = {Path(p).resolve().relative_to(ROOT) for p in loaded.stdout.split()}
    missing = sorted(str(p) for p in (static | dynamic) if not _covered(p, deps))
    assert not missing, f"{stage} imports code it does not declare in dvc.yaml: {missing}"
    if notebook and stage.startswith("report@"):  # the foreach shares one deps list: the union over its notebooks
        static = set().union(*(_closure({module} | fairdp_imports(ROOT / f"notebooks/{n}.py", "")) for n in REPORTS))
    unused = [d for d in deps if not any(_covered(p, [d]) for p in static)]
    assert not unused, f"{stage} declares code it never imports (it would rerun for nothing): {unused}"


@pytest.mark.parametrize("family", [n.removeprefix("code_") for n in DVC if n.startswith("code_")])
def test_code_stage_fingerprints_exactly_its_deps(family, tmp_path):
    """code_<family> writes the md5 of every file of its declared deps (directories walked, caches skipped) and of
    nothing else: editing one of them changes results/code/<family>.json (so every stage of the family reruns),
    editing another module or a bytecode cache does not. Its stages depend on it, and on no module directly."""
    from fairdp_core.stages.code import fingerprint, stage_deps

    st = DVC[f"code_{family}"]
    assert st["cmd"] == f"python -m fairdp_core.stages.code {family}" and st["outs"] == [f"results/code/{family}.json"]
    deps = stage_deps(f"code_{family}", ROOT / "dvc.yaml")
    assert CODE_SELF in deps  # editing the fingerprint's code reruns the code stage
    users = [n for n, s in DVC.items() if f"results/code/{family}.json" in s.get("do", s).get("deps", [])]
    assert users and all(not any(d.startswith("fairdp_core") for d in DVC[n].get("do", DVC[n])["deps"]) for n in users)
    shutil.copytree(PKG, tmp_path / "fairdp_core", ignore=shutil.ignore_patterns("*.egg-info"))
    base = fingerprint(deps, tmp_path)
    listed = {f for f in base}
    expected = {p.relative_to(tmp_path).as_posix() for d in deps if d != CODE_SELF
                for p in ([tmp_path / d] if (tmp_path / d).is_file() else (tmp_path / d).rglob("*"))
                if p.is_file() and p.suffix != ".pyc" and "__pycache__" not in p.parts}
    assert listed == expected
    inside = next(f for f in sorted(listed) if "/" in f.removeprefix("fairdp_core/"))
    (tmp_path / inside).write_text((tmp_path / inside).read_text() + "\n# edited\n")
    edited = fingerprint(deps, tmp_path)
    assert edited != base and {k for k in base if base[k] != edited[k]} == {inside}
    outside = next(p for p in sorted((tmp_path / "fairdp_core").rglob("*.py"))
                   if p.relative_to(tmp_path).as_posix() not in listed and p.name != "code.py")
    outside.write_text(outside.read_text() + "\n# edited\n")
    cache = tmp_path / Path(inside).parent / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "x.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / CODE_SELF).write_text("# edited\n")
    assert fingerprint(deps, tmp_path) == edited


def test_prune_lock_removes_dead_entries_only(tmp_path):
    """fairdp prune-lock: dvc.lock keeps, byte for byte, the entries of the stages dvc.yaml defines and loses the
    others (DVC never removes one, and rewrites the whole lock after every stage); make repro runs it. The
    committed lock has no dead entry."""
    from fairdp_core.study.lockfile import prune_lock_text, stage_names

    names = stage_names(ROOT)
    committed = (ROOT / "dvc.lock").read_text()
    locked = set(yaml.safe_load(committed)["stages"])
    if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "dvc.lock", "params.yaml", "runs.yaml"], cwd=ROOT).returncode == 0:
        assert locked <= names, f"dead dvc.lock entries: {sorted(locked - names)[:5]} (run fairdp prune-lock)"
    live = sorted(names & locked)[:3]
    dead = "  train@gone-lr-dpsgd-e1-s0:\n    cmd: python -m fairdp_core.stages.train gone\n    deps:\n    - path: x\n"
    head, sep, rest = committed.partition("stages:\n")
    text = head + sep + dead + rest + dead.replace("gone", "also-gone")
    assert committed.endswith("\n") and live
    pruned, dropped = prune_lock_text(text, names & locked)
    assert dropped == ["train@gone-lr-dpsgd-e1-s0", "train@also-gone-lr-dpsgd-e1-s0"]
    assert pruned == committed
    assert yaml.safe_load(pruned)["schema"] == yaml.safe_load(committed)["schema"]
    assert "fairdp prune-lock" in (ROOT / "Makefile").read_text().split("\nrepro:")[1].split("\n\n")[0]


def test_results_do_not_depend_on_the_thread_count():
    """train.threads is an execution knob no stage tracks: one bank trained with 1 and with 2 torch threads gives
    bit-identical parameters (the per-model streams and the reduction order do not depend on it)."""
    import torch

    from fairdp_core.engine import TrainSpec, train_bank

    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 30)).astype(np.float32)
    y, g = rng.integers(0, 2, 600), rng.integers(0, 2, 600)
    spec = TrainSpec(algorithm="dpsgd_s", model="mlp", hidden=32, epochs=2, batch_size=60, target_epsilon=2.0,
                     sigma_b=5.0)
    before = torch.get_num_threads()
    out = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            out.append(train_bank(X, y, g, np.ones((3, 600), bool), spec, n_classes=2, n_groups=2, seed=1,
                                  progress=False).params)
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(out[0][k], out[1][k]) for k in out[0])


def _reexec_probe(tmp_path, name: str, source: str, unset: str):
    """``probe(**env)``: the stdout words of module ``name`` (``source``) run as a stage would run it, re-exec'd with
    the reproducibility settings where the environment (without ``unset``, plus ``env``) lacks one of them (then the
    probe runs in the new process; otherwise here, with no re-exec)."""
    (tmp_path / f"{name}.py").write_text(source)
    code = (f"from fairdp_core.stages import reexec_with_malloc_env as r; r({name!r}, []); "
            f"import runpy; runpy.run_module({name!r}, run_name='__main__')")

    def probe(**extra):
        env = {k: v for k, v in os.environ.items() if k not in (unset, "FAIRDP_NO_REEXEC")}
        env.update(extra, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              check=True).stdout.split()

    return probe


def test_a_stage_runs_torchs_avx2_kernels_wherever_the_cpu_has_them(tmp_path):
    """Kernels of another vector width round differently (docs/pipeline.md): a stage re-execs itself with
    ATEN_CPU_CAPABILITY=avx2 on a CPU with AVX2 (torch then reports AVX2 even on an AVX-512 machine), keeps a value
    the user set, and sets nothing on a CPU without AVX2 (torch does not check, and would crash there)."""
    from fairdp_core.stages import _has_avx2

    probe = _reexec_probe(tmp_path, "probe_capability", "import os, torch\nprint(os.environ.get("
                          "'ATEN_CPU_CAPABILITY'), torch.backends.cpu.get_cpu_capability())\n", "ATEN_CPU_CAPABILITY")
    if _has_avx2():
        assert probe() == ["avx2", "AVX2"]
    else:
        assert probe()[0] == "None"
    assert probe(ATEN_CPU_CAPABILITY="default") == ["default", "DEFAULT"]


def test_a_stage_runs_openblas_haswell_kernels_wherever_the_cpu_has_avx2(tmp_path):
    """numpy's OpenBLAS (the paper rules' float64 Gram products) also picks its kernels per CPU: a stage re-execs
    itself with OPENBLAS_CORETYPE=Haswell on a CPU with AVX2 (the kernels OpenBLAS then reports), keeps a value the
    user set (OpenBLAS runs that one), and sets nothing on a CPU without AVX2."""
    from fairdp_core.stages import _has_avx2

    probe = _reexec_probe(tmp_path, "probe_blas", "import os, numpy\nfrom threadpoolctl import threadpool_info\n"
                          "print(os.environ.get('OPENBLAS_CORETYPE'), *[i.get('architecture') for i in "
                          "threadpool_info() if i['internal_api'] == 'openblas'])\n", "OPENBLAS_CORETYPE")
    if _has_avx2():
        assert probe() == ["Haswell", "Haswell"]
    else:
        assert probe()[0] == "None"
    assert probe(OPENBLAS_CORETYPE="Sandybridge") == ["Sandybridge", "Sandybridge"]


def test_no_stage_tracks_execution_knobs():
    for name, st in DVC.items():
        params = [p for p in (st.get("do", st).get("params") or []) if isinstance(p, str)]
        for knob in ("train.threads", "train.device", "audit.eval_batch"):
            assert knob not in params, (name, knob)
        assert not [p for p in params if p == "compute" or p.startswith("compute.")], name  # sharding: tests/test_shard.py
    plan = json.loads(json.dumps(DVC["plan"]))
    assert "train" in plan["params"]  # plan reads train, but its outputs leave the knobs out:
    from fairdp_core.stages.plan import _SPEC_FROM_TRAIN

    assert not {"threads", "device"} & set(_SPEC_FROM_TRAIN)


def _plans(params_path: Path) -> dict[str, str]:
    from fairdp_core.config import load_params
    from fairdp_core.stages.plan import write_plans

    out = params_path.parent / "plan"
    write_plans(load_params(params_path), out)
    return {str(p.relative_to(out)): p.read_text() for p in sorted(out.rglob("*.json"))}


_RULES = {  # assignment -> (which train plans change: run name -> bool, do the attack plans change)
    "train.lr=0.05": (lambda r: False, False),             # every dataset of the default grid overrides lr
    "train.threads=1": (lambda r: False, False),           # an execution knob
    "audit.eval_batch=128": (lambda r: False, False),      # an execution knob
    "compute.workers=2": (lambda r: False, False),         # an execution knob (sharding a bank)
    "audit.n_perm=200": (lambda r: False, True),           # statistics only: no training
    "audit.n_boot=200": (lambda r: False, False),          # the outcome-fairness report's resamples only
    # τ: the DP-SGD-S runs (and the non-private variant) without their own τ; the sweep's runs carry theirs
    "train.dpsgd_s.tau=2.0": (lambda r: r.split("-")[2] in ("dpsgd_s", "dpsgd_s_nonprivate")
                              and "-t" not in r.split("-e")[-1], False),
    "train.overrides.law_paper-lr.lr=0.2": (lambda r: r.startswith("law_paper-lr-"), False),
    # an algorithm's own override wins over its dataset-model one, and reaches that algorithm only
    "train.overrides.mnist-cnn-dpsgd_s.lr=0.05": (lambda r: r.startswith("mnist-cnn-dpsgd_s-"), False),
    "train.overrides.mnist-cnn.lr=0.7": (lambda r: r.startswith("mnist-cnn-")
                                         and not r.startswith("mnist-cnn-dpsgd_s-"), False),
    # γ: DP-SGD-S's only (the paper rule and DP-SGD do not use it)
    "train.overrides.bank-lr.gamma=0.8": (lambda r: r.startswith("bank-lr-dpsgd_s-"), False),
}


@pytest.mark.parametrize("assignment", list(_RULES))
def test_a_key_changes_exactly_the_plans_whose_effective_value_changes(tmp_path, assignment):
    """`fairdp set KEY=VALUE` (what `fairdp exp run -S` applies) and the plan files the train/attack stages depend
    on: a key changes the plan of exactly the runs whose effective settings change, so DVC reruns only those."""
    from fairdp_core.cli import set_params

    params = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params)
    shutil.copy(ROOT / "runs.yaml", tmp_path / "runs.yaml")
    before = _plans(params)
    set_params(params, [assignment])
    after = _plans(params)
    assert set(before) == set(after)
    changed = {k for k in before if before[k] != after[k]}
    trains, attack = _RULES[assignment]
    want = {k for k in before if (k.startswith("train/") and trains(k[6:-5])) or (attack and k.startswith("attack/"))}
    assert changed == want, (sorted(changed - want)[:5], sorted(want - changed)[:5])
    assert changed or assignment.split("=")[0] in ("train.lr", "train.threads", "audit.eval_batch", "audit.n_boot",
                                                     "compute.workers")


def test_set_regenerates_runs_keeps_comments_and_names_bad_keys(tmp_path):
    from fairdp_core.cli import set_params
    from fairdp_core.config import ConfigError, load_params

    params = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params)
    shutil.copy(ROOT / "runs.yaml", tmp_path / "runs.yaml")
    set_params(params, ["grid.0.epsilons=[1,5]"])
    runs = load_params(params).runs
    assert "adult-lr-dpsgd_s-e5-s0" in runs and "adult-lr-dpsgd_s-e10-s0" not in runs
    assert "# every bank: Poisson sampling" in params.read_text()  # comments kept
    text = params.read_text()
    with pytest.raises(ConfigError, match="train.lrr"):
        set_params(params, ["train.lrr=0.1"])
    with pytest.raises(ConfigError, match="generated"):
        set_params(params, ["runs.x.seed=1"])
    assert params.read_text() == text  # nothing written


def test_exp_show_drops_dependency_and_generated_columns_only():
    """`fairdp exp show` keeps params and headline metrics, drops per-file deps and runs.yaml's per-run keys."""
    import re

    from fairdp_core.cli import EXP_SHOW_DROP

    drop = re.compile(EXP_SHOW_DROP).match  # as dvc/commands/experiments/show.py applies --drop
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    deps = {d if isinstance(d, str) else next(iter(d)) for s in stages.values() for d in (s.get("do", s).get("deps") or [])}
    deps |= {"results/train/adult-lr-sgd-s0", "results/plan/attack/adult-lr-sgd-s0"}  # ${...} resolved
    assert deps and all(drop(d) for d in deps)
    assert all(drop(c) for c in ("runs.adult-lr-sgd-s0.seed", "designs.adult-s0.dataset", "runs.yaml:runs.x"))
    metrics = json.loads((ROOT / "reports" / "metrics.json").read_text())
    kept = ["seed", "profile", "train.lr", "audit.n_boot", "sweep.taus", "data.datasets.adult.group",
            *(f"{cfg}.{k}" for cfg, v in metrics.items() for k in v)]
    assert not [c for c in kept if drop(c)]


def test_beyond_stages_depend_only_on_the_banks_they_read(tmp_path):
    """beyond_attribute and beyond_inversion depend on their manifests, not on all of results/plan and results/train;
    the manifest (``beyond inputs``) lists exactly the beyond.algorithms runs of each part's datasets, and changes
    when one of their banks changes, never when a bank of another algorithm (DP-SGD-S's, after a τ edit) does."""

    from fairdp_core.config import load_params
    from fairdp_core.stages.beyond import beyond_runs, run_inputs

    for stage in ("beyond_attribute", "beyond_inversion"):
        deps = DVC[stage]["deps"]
        assert "results/train" not in deps and "results/plan" not in deps
        assert f"results/beyond/inputs/{stage.split('_')[1]}.json" in deps
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    shutil.copy(ROOT / "runs.yaml", tmp_path / "runs.yaml")
    params = load_params(tmp_path / "params.yaml")
    for name in params.runs:
        bank = tmp_path / "results/train" / name
        bank.mkdir(parents=True)
        (bank / "bank.pt").write_bytes(name.encode())
        (tmp_path / "results/plan/train").mkdir(parents=True, exist_ok=True)
        (tmp_path / "results/plan/train" / f"{name}.json").write_text(f'{{"run": "{name}"}}')
    out = tmp_path / "results/beyond/inputs"
    first = run_inputs(params, out)
    read = beyond_runs(params, params.beyond.attribute.datasets)
    assert read and sorted(first["attribute"]) == sorted(read)
    assert json.loads((out / "attribute.json").read_text()) == first["attribute"]
    other = next(n for n, r in params.runs.items() if r.algorithm not in params.beyond.algorithms)
    (tmp_path / "results/train" / other / "bank.pt").write_bytes(b"retrained")
    before = (out / "attribute.json").read_bytes(), (out / "inversion.json").read_bytes()
    run_inputs(params, out)
    assert ((out / "attribute.json").read_bytes(), (out / "inversion.json").read_bytes()) == before
    (tmp_path / "results/train" / read[0] / "bank.pt").write_bytes(b"retrained")
    run_inputs(params, out)
    assert (out / "attribute.json").read_bytes() != before[0]


def test_dry_lists_the_runs_a_params_edit_reruns_with_their_time(tmp_path, capsys):
    """`fairdp dry` after `fairdp set train.dpsgd_s.tau=2.0`: exactly the runs whose train plan changes (DP-SGD-S's
    and the non-private reading's, as test_a_key_changes_exactly_the_plans... has it), each train + attack, with
    the seconds of its timings files summed (train 10 s + attack 2.5 s here); after `grid.0.seeds` grows, a new
    run is estimated from a run of the same dataset, model and algorithm; before any plan, one line says so."""
    from fairdp_core.cli import main, set_params
    from fairdp_core.config import load_params
    from fairdp_core.stages.plan import rerun_estimate, write_plans

    params_path = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params_path)
    shutil.copy(ROOT / "runs.yaml", tmp_path / "runs.yaml")
    assert main(["--params", str(params_path), "dry"]) == 0
    assert "no plans" in capsys.readouterr().out
    params = load_params(params_path)
    write_plans(params, tmp_path / "results/plan")
    (tmp_path / "results/timings").mkdir(parents=True)
    for name in params.runs:
        (tmp_path / "results/timings" / f"train-{name}.json").write_text('{"train_s": 9.5, "signals_s": 0.5, "workers": 1}')
        (tmp_path / "results/timings" / f"attack-{name}.json").write_text('{"ga_s": 2.0, "gba_s": 0.5}')
    assert rerun_estimate(load_params(params_path))["reruns"] == []
    set_params(params_path, ["train.dpsgd_s.tau=2.0"])
    est = rerun_estimate(load_params(params_path))
    names = {r[0] for r in est["reruns"]}
    assert names == {n for n in params.runs if _RULES["train.dpsgd_s.tau=2.0"][0](n)}, names
    assert all(parts == ["train", "attack"] and secs == 12.5 and src is None for _, parts, secs, src in est["reruns"])
    assert main(["--params", str(params_path), "dry", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"fairdp dry: `dvc repro` will rerun {len(names)} of {len(params.runs)} runs") and \
        f"... and {len(names) - 2} more" in out
    set_params(params_path, ["train.dpsgd_s.tau=1.0", "grid.0.seeds=3"])
    est = rerun_estimate(load_params(params_path))
    new = [r for r in est["reruns"] if r[0].endswith("-s2")]
    assert new and all(secs == 12.5 and src is not None and src.rsplit("-", 1)[0] == n.rsplit("-", 1)[0]
                       for n, _, secs, src in new)


# The code that only draws and writes the pages: editing it must rerun pages, never a bank
REPORT_CODE = ["fairdp_core/reporting/pages.py", "fairdp_core/reporting/index.py", "fairdp_core/reporting/plots.py",
               "fairdp_core/reporting/plots_beyond.py", "fairdp_core/reporting/claims_page.py",
               "fairdp_core/reporting/helpers.py",
               "fairdp_core/reporting/checks.py", "fairdp_core/reporting/claims.py", "fairdp_core/reporting/frontier.py",
               "fairdp_core/reporting/frontier_why.py", "fairdp_core/reporting/results.py", "fairdp_core/beyond/tables.py", "fairdp_core/synth/report.py",
               "fairdp_core/stages/report.py", "fairdp_core/stages/index.py",
               *(f"notebooks/{p.name}" for p in sorted((ROOT / "notebooks").glob("*.py")))]


def test_an_edit_to_reporting_code_reruns_no_training():
    """No stage that writes results/ or data/ (the prepared data, the banks, audits, attribute and inversion attacks,
    synthetic data) depends on the reporting code, directly, through a directory or through a code fingerprint, so
    editing it reruns only the pages (with
    test_stage_deps_are_exactly_the_code_it_imports, which ties each stage's deps to its imports). The quickstart is a
    page whose notebook trains its own small bank: it reruns, and is the one page that trains."""
    compute, pages = [], []
    for name, st in DVC.items():
        body = st.get("do", st)
        outs = [next(iter(o)) if isinstance(o, dict) else o for o in body.get("outs", [])]
        deps = [*_code_deps(body["deps"]), *(d for d in body["deps"] if d.startswith("notebooks/"))]
        if "foreach" in st:  # a notebook named by the item stands for every page of the list
            items = foreach_items(ROOT, st["foreach"])
            deps = [x for d in deps for x in ([d.replace("${item}", i) for i in items]
                                               if "${item}" in d and isinstance(items, list) else [d])]
        hit = [f for f in REPORT_CODE if _covered(Path(f), deps)]
        (compute if any(o.startswith(("results/", "data/")) for o in outs) else pages).append((name, hit))
    assert {"prepare", "train", "attack", "synth"} <= {n for n, _ in compute}
    assert all((ROOT / f).is_file() for f in REPORT_CODE)
    assert not [(n, h) for n, h in compute if h], [(n, h) for n, h in compute if h]
    assert {n for n, h in pages if h} >= {"report", "index", "quickstart"}  # the check sees a dependency
