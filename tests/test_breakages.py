"""The breakage harness itself (tests/privacy_breakages.py): a hinted test settles a breakage only by failing; a
hint that passes, or names a test that no longer exists, falls back to the whole suite, so hints never change a
verdict. Run on a two-test toy project (no torch), a few seconds."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("privacy_breakages", Path(__file__).with_name("privacy_breakages.py"))
pb = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("privacy_breakages", pb)  # its dataclass looks its module up there
_spec.loader.exec_module(pb)


@pytest.fixture
def toy(tmp_path, monkeypatch):
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "__init__.py").write_text("VALUE = 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_toy.py").write_text(
        "from toy import VALUE\n\n\ndef test_unrelated():\n    assert True\n\n\ndef test_value():\n    assert VALUE == 1\n")
    monkeypatch.setattr(pb, "_SUITE", ["tests/test_toy.py"])
    return tmp_path


BROKEN = pb.Breakage("VALUE changed", "toy/__init__.py", "VALUE = 1", "VALUE = 2")
HARMLESS = pb.Breakage("a comment added", "toy/__init__.py", "VALUE = 1", "VALUE = 1  # same")


def test_a_failing_hint_catches_alone(toy):
    verdict, msg, failed = pb._try(toy, BROKEN, {BROKEN.name: ["tests/test_toy.py::test_value"]})
    assert verdict == "caught" and "its hinted test" in msg and failed == ["tests/test_toy.py::test_value"]
    assert (toy / "toy" / "__init__.py").read_text() == "VALUE = 1\n"  # restored


@pytest.mark.parametrize("hint", [["tests/test_toy.py::test_unrelated"], ["tests/test_toy.py::test_gone"], []])
def test_a_passing_or_stale_hint_falls_back_to_the_suite(toy, hint):
    verdict, msg, failed = pb._try(toy, BROKEN, {BROKEN.name: hint} if hint else {})
    assert verdict == "caught" and "the suite" in msg and failed == ["tests/test_toy.py::test_value"]


def test_a_harmless_edit_survives_whatever_the_hint(toy):
    for hints in ({}, {HARMLESS.name: ["tests/test_toy.py::test_value"]}, {HARMLESS.name: ["tests/test_toy.py::x"]}):
        verdict, msg, _ = pb._try(toy, HARMLESS, hints)
        assert verdict == "SURVIVED", (hints, msg)


def test_every_hint_names_a_breakage_and_a_suite_test():
    hints = pb._load_hints()
    names = {b.name for b in pb.BREAKAGES}
    assert set(hints) <= names, set(hints) - names
    assert all(h.split("::", 1)[0] in pb.SUITE for v in hints.values() for h in v)
