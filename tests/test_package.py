"""The package's surface: exported names exist, and the conda and pip environments agree."""

from __future__ import annotations

import importlib
import re

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

import pytest
import yaml

from .conftest import ROOT, fairdp_imports, module_file

MODULES = ["fairdp_core", "fairdp_core.config", "fairdp_core.data", "fairdp_core.data.base",
           "fairdp_core.data.sources", "fairdp_core.data.loaders", "fairdp_core.cli", "fairdp_core.models",
           "fairdp_core.engine", "fairdp_core.engine.accounting", "fairdp_core.engine.backends",
           "fairdp_core.rules.policy", "fairdp_core.engine.sampling", "fairdp_core.engine.shard",
           "fairdp_core.engine.trainer",
           "fairdp_core.opacus_compat", "fairdp_core.audit", "fairdp_core.reporting.helpers", "fairdp_core.stages",
           "fairdp_core.stages.plan", "fairdp_core.stages.train", "fairdp_core.stages.attack",
           "fairdp_core.stages.design", "fairdp_core.stages.prepare", "fairdp_core.stages.report"]


@pytest.mark.parametrize("name", MODULES)
def test_all_exports_exist(name):
    mod = importlib.import_module(name)
    assert mod.__all__, name
    missing = [n for n in mod.__all__ if not hasattr(mod, n)]
    assert not missing, f"{name}.__all__ names missing attributes: {missing}"


def test_every_subpackage_module_is_an_attribute_without_an_explicit_import():
    """`import fairdp_core` then `fairdp_core.audit.custom` (and .synth, .beyond, .study.clip_tuning, audit.pooling, ...) works
    without importing the submodule first (PEP 562, fairdp_core._lazy_exports), in a fresh interpreter; an unknown
    name is still an AttributeError."""
    import pkgutil
    import subprocess
    import sys

    import fairdp_core

    pairs = [("fairdp_core", m.name) for m in pkgutil.iter_modules(fairdp_core.__path__)]
    for pkg in ("audit", "data", "reporting", "study"):
        sub = importlib.import_module(f"fairdp_core.{pkg}")
        pairs += [(f"fairdp_core.{pkg}", m.name) for m in pkgutil.iter_modules(sub.__path__)]
    assert {("fairdp_core.audit", "custom"), ("fairdp_core", "synth"), ("fairdp_core.audit", "pooling"),
            ("fairdp_core.reporting", "plots"), ("fairdp_core.study", "claims")} <= set(pairs)
    code = "import importlib\n" + "".join(
        f"assert getattr(importlib.import_module({pkg!r}), {name!r}).__name__ == {pkg + '.' + name!r}\n"
        for pkg, name in pairs) + "import fairdp_core\ntry:\n    fairdp_core.nope\nexcept AttributeError:\n    pass\n" \
        "else:\n    raise SystemExit('fairdp_core.nope did not raise')\n"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]


def _norm(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


PIP_ONLY = {"dp-accounting"}  # no conda-forge build known; a test dependency only


def test_environment_yml_matches_pyproject():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = py["optional-dependencies"]
    wanted = {_norm(r) for r in py["dependencies"] + extras["train"] + extras["study"] + extras["dev"]
              if not r.startswith("fairdp_core")}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda, pip = set(), set()
    for d in env["dependencies"]:
        if isinstance(d, dict):
            pip |= {_norm(r) for r in d["pip"] if not r.startswith("-e")}
            assert pip <= PIP_ONLY, f"environment.yml installs {pip - PIP_ONLY} with pip: take them from conda-forge"
        else:
            conda.add(_norm(d))
    conda.discard("python")
    conda.discard("pip")
    conda = {{"pytorch": "torch", "ray-core": "ray"}.get(c, c) for c in conda}
    assert conda | pip == wanted, f"only in environment.yml: {(conda | pip) - wanted}; only in pyproject: {wanted - (conda | pip)}"


def test_environment_yml_uses_conda_forge_only():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge", "nodefaults"]


def test_every_command_and_option_has_help():
    """`fairdp --help` lists every subcommand with a line of help, and every option of every subcommand has help."""
    import argparse

    from fairdp_core import cli

    seen = {}

    def grab(self, args=None, namespace=None):
        seen["parser"] = self
        raise SystemExit(0)

    mp = pytest.MonkeyPatch()
    mp.setattr(argparse.ArgumentParser, "parse_known_args", grab)
    try:
        with pytest.raises(SystemExit):
            cli.main(["check-params"])
    finally:
        mp.undo()
    sub = next(a for a in seen["parser"]._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    assert len(sub.choices) >= 22 and "audit-custom" in sub.choices and "claims" in sub.choices
    missing = [name for name in sub.choices if not helps.get(name)]
    missing += [f"{name} {a.option_strings or a.dest}" for name, sp in sub.choices.items() for a in sp._actions
                if not isinstance(a, argparse._HelpAction) and not a.help]
    assert not missing, missing
    text = seen["parser"].format_help()
    assert all(name in text for name in sub.choices)


def test_help_lists_every_command_and_every_profile(capsys):
    """`fairdp --help` lists every subcommand on a line of its own under one of the audiences, and
    `fairdp use-profile --help` names every profiles/*.yaml (a command or a profile file added later is listed
    without anyone editing the help)."""
    import argparse

    from fairdp_core import cli

    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert len(sub.choices) >= 22
    missing = [name for name in sub.choices if not re.search(rf"^  {re.escape(name)} ", text, re.M)]
    assert not missing, f"not in `fairdp --help`: {missing}"
    unsorted = [name for name, sp in sub.choices.items() if sp.get_default("audience") not in cli.AUDIENCES]
    assert not unsorted, f"commands without an audience of cli.AUDIENCES: {unsorted}"
    assert all(f"\n{title}:\n" in text for title in cli.AUDIENCES.values())

    with pytest.raises(SystemExit):
        cli.main(["use-profile", "--help"])
    flat = " ".join(capsys.readouterr().out.split())
    listed = re.search(r"a profile of profiles/: (.*?) options:", flat)
    assert listed, flat
    profiles = sorted(p.stem for p in (ROOT / "profiles").glob("*.yaml"))
    assert "default" in profiles and "smoke" in profiles
    assert listed.group(1).split(", ") == profiles


def test_the_audit_library_needs_no_pipeline_package():
    """Importing the audit (fairdp_core.audit.custom, the engine, the attacks) loads none of the study's extra packages
    (dvc, papermill, jupyter, fairlearn, ruamel), so `pip install fairdp_core` without [study] suffices for it."""
    import subprocess
    import sys

    code = ("import sys, fairdp_core.audit.custom, fairdp_core.engine, fairdp_core.audit.run, fairdp_core.opacus_compat; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('fairdp_core.stages')) "
            "+ sorted({m.split('.')[0] for m in sys.modules})))")
    mods = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    assert not mods & {"dvc", "papermill", "jupyterlab", "jupytext", "nbconvert", "fairlearn", "ruamel"}, mods
    # one audit entry point (fairdp_core.audit.run): the library does not import the pipeline's stages
    assert not {m for m in mods if m.startswith("fairdp_core.stages")}, mods


# Python started with torch, opacus and torchvision unimportable, as in `pip install fairdp_core` without [train]
_NO_TORCH = """
import importlib.abc, sys
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("torch", "opacus", "torchvision"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _Block())
"""


def test_the_scores_audit_runs_without_torch(tmp_path):
    """The light install (no `train` extra): `fairdp audit-one --scores` and `custom.audit_bank` from losses run
    with torch unimportable; a command that trains says, in one line and before any output, what to install."""
    import subprocess
    import sys

    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    n = 1200
    g, mem = rng.choice(["f", "m"], n), rng.integers(0, 2, n)
    pd.DataFrame({"loss": rng.exponential(1.0, n) - 0.6 * mem * (g == "f"), "member": mem, "sex": g}).to_csv(
        tmp_path / "s.csv", index=False)
    cli = _NO_TORCH + "from fairdp_core.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    run = [sys.executable, "-c", cli]
    one = subprocess.run(run + ["audit-one", "--scores", "s.csv", "--loss", "loss", "--group", "sex", "--out", "one",
                                "--n-null", "10"], cwd=tmp_path, capture_output=True, text=True)
    assert one.returncode == 0 and "Riskier for f than for m" in one.stdout, one.stderr[-2000:]
    bank = _NO_TORCH + """
import numpy as np
from fairdp_core.audit.custom import audit_bank
rng = np.random.default_rng(0)
half = rng.integers(0, 2, (8, 400)).astype(bool)
mem = np.repeat(half, 2, 0); mem[1::2] = ~mem[1::2]
g = rng.integers(0, 2, 400)
res = audit_bank(rng.exponential(1, (16, 400)) - 0.5 * mem * (g == 0), mem, g, group_names=["a", "b"])
print(res.headline()[0])
res.write(sys.argv[1])  # report.md, the tables and the ROC figure
"""
    out = subprocess.run([sys.executable, "-c", bank, str(tmp_path / "bank")], capture_output=True, text=True)
    assert out.returncode == 0 and "Yes: Δ" in out.stdout, out.stderr[-2000:]
    assert {"report.md", "roc.png", "summary.json"} <= {p.name for p in (tmp_path / "bank").iterdir()}
    train = subprocess.run(run + ["audit-custom", "--data", "s.csv", "--label", "member", "--group", "sex", "--out",
                                  "custom"], cwd=tmp_path, capture_output=True, text=True)
    assert train.returncode == 2 and train.stderr.strip().count("\n") == 0, train.stderr[-2000:]
    assert "pip install 'fairdp_core[train]'" in train.stderr and not (tmp_path / "custom").exists()


@pytest.mark.slow
def test_the_light_install_resolves_without_torch(tmp_path):
    """pip's own resolver on `pip install fairdp_core` (no extras; a dry run from PyPI, nothing installed) takes no
    torch, no opacus and no CUDA package; with [train] it takes torch (the check can fail)."""
    import json
    import subprocess
    import sys

    def resolved(spec: str) -> set[str]:
        report = tmp_path / "report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                        "--report", str(report), spec], check=True, capture_output=True, text=True, timeout=600)
        return {i["metadata"]["name"].lower().replace("_", "-") for i in json.loads(report.read_text())["install"]}

    light = resolved(str(ROOT))
    assert "fairdp-core" in light and not {p for p in light if p in ("torch", "opacus") or p.startswith("nvidia")}
    assert {"torch", "opacus"} <= resolved(f"{ROOT}[train]")


def test_opacus_private_api_is_pinned_to_the_tested_range():
    """opacus_compat uses opacus.optimizers.optimizer._generate_noise (private): the installed Opacus is inside the
    range pyproject.toml declares, and the function still takes what opacus_compat passes it."""
    import inspect
    from importlib.metadata import version

    from opacus.optimizers.optimizer import _generate_noise

    spec = next(r for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
                ["train"] if r.startswith("opacus"))
    lo, hi = re.findall(r">=([\d.]+),<([\d.]+)", spec)[0]
    v = tuple(int(x) for x in version("opacus").split(".")[:2])
    assert tuple(map(int, lo.split(".")[:2])) <= v < tuple(map(int, hi.split(".")[:2])), (version("opacus"), spec)
    assert {"std", "reference", "generator", "secure_mode"} <= set(inspect.signature(_generate_noise).parameters)


def test_no_history_outside_git():
    """No issue numbers and no "the issue's" in what ships: the package, notebooks (the pages), profiles,
    params.yaml, tests, benchmarks (code, notes and baselines), the docs, the README and the committed reports (pages
    and prose). History belongs to git and the closing notes."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    files = [*root.glob("fairdp_core/**/*.py"), *root.glob("notebooks/*.py"), *root.glob("profiles/*.yaml"),
             root / "params.yaml", *root.glob("tests/*.py"), *root.glob("benchmarks/*.py"), *root.glob("benchmarks/*.md"),
             *root.glob("benchmarks/*.json"), *root.glob("reports/*.html"),
             *root.glob("docs/*.md"), root / "README.md", *root.glob("reports/**/*.md")]
    pattern = re.compile(r"\bissue[- ]?\d+|\bthe issue's\b|\bissues? \d+", re.IGNORECASE)
    me = Path(__file__).resolve()
    hits = [f"{f.relative_to(root)}:{i}: {line.strip()[:80]}" for f in files if f.resolve() != me
            for i, line in enumerate(f.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, hits


def test_the_front_door_names_the_audits_the_rules_and_the_trainer():
    """`fairdp_core.__all__` names what users call, each the object of its home module, and `import fairdp_core`
    alone loads none of them (no torch, no pandas) until one is used."""
    import subprocess
    import sys

    import fairdp_core
    from fairdp_core import opacus_compat, rules
    from fairdp_core.audit import custom, one
    from fairdp_core.engine import trainer

    assert fairdp_core.audit_model is custom.audit_model and fairdp_core.audit_bank is custom.audit_bank
    assert fairdp_core.audit_one is one.audit_one and fairdp_core.RULES is rules.RULES
    assert fairdp_core.train_bank is trainer.train_bank
    assert fairdp_core.make_private_dpsgd_s is opacus_compat.make_private_dpsgd_s
    code = "import sys, fairdp_core; print(sorted(m for m in ('torch', 'pandas', 'opacus') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def _package_imports() -> dict[str, set[str]]:
    """fairdp_core's modules (dotted names) -> the fairdp_core modules each imports anywhere in its file (module
    level or inside a function; :func:`tests.conftest.fairdp_imports`, as the stage-deps tests read them). The lazy
    front door (``fairdp_core`` itself) is left out: it names every export and imports none of them until used. A
    registry's discovery (``importlib.import_module`` over rules/, audit/mia/, data/sets/) draws no edge: a cycle
    that closes only through it is not seen here."""
    graph = {}
    for p in (ROOT / "fairdp_core").rglob("*.py"):
        parts = p.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = name if p.name == "__init__.py" else name.rsplit(".", 1)[0]
        graph[name] = {m for m in fairdp_imports(p, package) if m not in (name, "fairdp_core") and module_file(m)}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (a list of its nodes, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        state[n] = 2
        path.pop()
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


# The package's layers, bottom up (docs/library.md): a module imports only from its own layer or one listed before it.
LAYERS = ("versions", "atomic", "schema", "seeding", "models", "fairness", "data", "config", "rules", "engine",
          "opacus_compat", "audit", "synth", "reporting", "beyond", "stages", "study", "cli")


def _upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The imports of ``graph`` from a module to one of a later layer of :data:`LAYERS`."""
    def rank(m: str) -> int:
        return LAYERS.index(m.split(".")[1])

    return [(a, b) for a, bs in sorted(graph.items()) for b in sorted(bs) if rank(b) > rank(a)]


def test_every_import_points_down_the_layers():
    """No module imports one of a layer above its own (function-level imports included): the audit draws its figures
    without the reporting layer, the rules without the engine. Every top-level name of the package is in a layer, and
    the checker finds a planted upward import (the user's audit reading the reports' plots, as it once did)."""
    graph = _package_imports()
    assert {m.split(".")[1] for m in graph if m != "fairdp_core"} == set(LAYERS)
    assert _upward(graph) == []
    planted = {**graph, "fairdp_core.audit.custom_result": graph["fairdp_core.audit.custom_result"]
               | {"fairdp_core.reporting.plots"}}
    assert _upward(planted) == [("fairdp_core.audit.custom_result", "fairdp_core.reporting.plots")]


def test_the_package_has_no_import_cycle_and_no_module_over_500_lines():
    """The layout's two measurable promises (docs/library.md): no module imports, directly or through others, a
    module that imports it back (function-level imports included), and none is over 500 lines. The checker is shown
    to find a planted cycle."""
    graph = _package_imports()
    assert len(graph) > 100 and "fairdp_core.rules" in graph["fairdp_core.engine.trainer"]
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph))}"
    planted = {**graph, "fairdp_core.rules.base": graph["fairdp_core.rules.base"] | {"fairdp_core.engine.trainer"}}
    assert _cycle(planted) is not None  # the trainer imports the rules: a rule importing the trainer closes a cycle
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "fairdp_core").rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 500}
    assert not long, f"modules over 500 lines: {long}"
