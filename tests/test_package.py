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

from .conftest import ROOT

MODULES = ["fairdp_core", "fairdp_core.config", "fairdp_core.data", "fairdp_core.data.base",
           "fairdp_core.data.sources", "fairdp_core.data.loaders", "fairdp_core.cli", "fairdp_core.models",
           "fairdp_core.engine", "fairdp_core.engine.accounting", "fairdp_core.engine.backends",
           "fairdp_core.engine.policies", "fairdp_core.engine.sampling", "fairdp_core.engine.shard",
           "fairdp_core.engine.trainer",
           "fairdp_core.opacus_compat", "fairdp_core.audit", "fairdp_core.report_helpers", "fairdp_core.stages",
           "fairdp_core.stages.plan", "fairdp_core.stages.train", "fairdp_core.stages.attack",
           "fairdp_core.stages.design", "fairdp_core.stages.prepare", "fairdp_core.stages.report"]


@pytest.mark.parametrize("name", MODULES)
def test_all_exports_exist(name):
    mod = importlib.import_module(name)
    assert mod.__all__, name
    missing = [n for n in mod.__all__ if not hasattr(mod, n)]
    assert not missing, f"{name}.__all__ names missing attributes: {missing}"


def _norm(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_matches_pyproject():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_norm(r) for r in py["dependencies"] + py["optional-dependencies"]["dev"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda, pip = set(), set()
    for d in env["dependencies"]:
        if isinstance(d, dict):
            pip |= {_norm(r) for r in d["pip"] if not r.startswith("-e")}
            assert not pip, f"environment.yml installs {pip} with pip: take them from conda-forge"
        else:
            conda.add(_norm(d))
    conda.discard("python")
    conda.discard("pip")
    conda = {{"pytorch": "torch", "ray-core": "ray"}.get(c, c) for c in conda}
    assert conda | pip == wanted, f"only in environment.yml: {(conda | pip) - wanted}; only in pyproject: {wanted - (conda | pip)}"


def test_environment_yml_uses_conda_forge_only():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge", "nodefaults"]
