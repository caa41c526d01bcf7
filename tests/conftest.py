"""Shared fixtures: the dataset mirror and a params file written into a temporary project."""

from __future__ import annotations

import ast
import os
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def module_file(mod: str) -> Path | None:
    """The file of a dotted module name of this repository (``a.b`` -> a/b.py or a/b/__init__.py), or None."""
    rel = Path(*mod.split("."))
    for p in (ROOT / rel.with_suffix(".py"), ROOT / rel / "__init__.py"):
        if p.is_file():
            return p
    return None


def fairdp_imports(path: Path, package: str) -> set[str]:
    """Absolute names of the fairdp_core modules ``path`` imports anywhere (module level or inside functions)."""
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("fairdp_core")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("fairdp_core"):
                continue
            out.add(mod)
            for a in node.names:  # "from .stages import plan": plan may be a submodule
                if module_file(f"{mod}.{a.name}"):
                    out.add(f"{mod}.{a.name}")
    return out


def mirror_dir() -> Path:
    env = os.environ.get("FAIRDP_DATA_MIRROR")
    return Path(env) if env else (ROOT.parent / "shared" / "datasets").resolve()


@pytest.fixture(scope="session")
def mirror() -> Path:
    """The dataset mirror. Without one, the data-dependent tests are skipped with the reason (the rest run);
    with FAIRDP_REQUIRE_DATA=1 (CI) a missing mirror fails them instead, so nothing is silently skipped."""
    m = mirror_dir()
    if not (m / "adult" / "SOURCE.md").is_file():
        msg = (f"dataset mirror not found at {m}: set FAIRDP_DATA_MIRROR to a copy of shared/datasets to run the "
               "tests that need the real data")
        if os.environ.get("FAIRDP_REQUIRE_DATA") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return m


@pytest.fixture
def write_params(tmp_path, mirror, monkeypatch):
    """Write a params.yaml (the project's own, with overrides) into tmp_path and return its path."""
    monkeypatch.delenv("FAIRDP_DATA_MIRROR", raising=False)

    def write(overrides: dict | None = None, text: str | None = None) -> Path:
        p = tmp_path / "params.yaml"
        shutil.copy(ROOT / "runs.yaml", tmp_path / "runs.yaml")  # the generated runs of the grid as committed
        if text is None:
            base = yaml.safe_load((ROOT / "params.yaml").read_text())
            base["data"]["mirror"] = str(mirror)
            for dotted, value in (overrides or {}).items():
                node = base
                *head, last = dotted.split(".")
                for k in head:
                    node = node.setdefault(k, {})
                node[last] = value
            text = yaml.safe_dump(base, sort_keys=False)
        p.write_text(text)
        return p

    return write


@pytest.fixture(scope="session")
def chromium() -> str:
    """Headless Chromium for the tests that measure rendered pages. Skipped without it; with
    FAIRDP_REQUIRE_CHROMIUM=1 (CI installs it first) a missing one fails them instead."""
    exe = next((c for c in ("chromium", "chromium-browser", "google-chrome") if shutil.which(c)), None)
    if exe is None:
        msg = "no headless Chromium (Debian: apt install chromium) to render the pages"
        if os.environ.get("FAIRDP_REQUIRE_CHROMIUM") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return exe


def own_settings(algorithm: str, **settings) -> dict:
    """Of ``settings`` (TrainSpec rule fields), those ``algorithm``'s rule has: what a test parametrized over rules
    passes, since a spec refuses another rule's setting."""
    from fairdp_core.engine.spec import stored_fields

    return {k: v for k, v in settings.items() if k in stored_fields(algorithm)}
