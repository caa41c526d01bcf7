"""The breakage harness itself (tests/privacy_breakages.py): a hinted test settles a breakage only by failing; a
hint that passes, or names a test that no longer exists, falls back to the whole suite, so hints never change a
verdict. Run on a two-test toy project (no torch), a few seconds."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("privacy_breakages", Path(__file__).with_name("privacy_breakages.py"))
pb = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("privacy_breakages", pb)  # its dataclass looks its module up there
_spec.loader.exec_module(pb)


@pytest.fixture
def toy(tmp_path, monkeypatch):
    root = tmp_path / "project"
    root.mkdir()
    (root / "toy").mkdir()
    (root / "toy" / "__init__.py").write_text("VALUE = 1\n")
    (root / "tests").mkdir()
    # test_order_dependent passes after test_unrelated (as in the suite) and fails alone
    (root / "tests" / "test_toy.py").write_text(
        "from toy import VALUE\n\nSTATE = []\n\n\ndef test_unrelated():\n    STATE.append(1)\n\n\n"
        "def test_value():\n    assert VALUE == 1\n\n\ndef test_order_dependent():\n    assert STATE\n")
    monkeypatch.setattr(pb, "_SUITE", ["tests/test_toy.py"])
    monkeypatch.setattr(pb, "_alone", {})
    shutil.copytree(root, tmp_path / "unbroken")  # the copy no breakage touches
    monkeypatch.setattr(pb, "_UNBROKEN", pb._Unbroken(tmp_path / "unbroken"))
    return root


BROKEN = pb.Breakage("VALUE changed", "toy/__init__.py", "VALUE = 1", "VALUE = 2")
HARMLESS = pb.Breakage("a comment added", "toy/__init__.py", "VALUE = 1", "VALUE = 1  # same")


@pytest.mark.slow
def test_a_failing_hint_catches_alone(toy):
    verdict, msg, failed = pb._try(toy, BROKEN, {BROKEN.name: ["tests/test_toy.py::test_value"]})
    assert verdict == "caught" and "its hinted test" in msg and failed == ["tests/test_toy.py::test_value"]
    assert (toy / "toy" / "__init__.py").read_text() == "VALUE = 1\n"  # restored


@pytest.mark.slow
@pytest.mark.parametrize("hint", [["tests/test_toy.py::test_unrelated"], ["tests/test_toy.py::test_gone"], []])
def test_a_passing_or_stale_hint_falls_back_to_the_suite(toy, hint):
    verdict, msg, failed = pb._try(toy, BROKEN, {BROKEN.name: hint} if hint else {})
    assert verdict == "caught" and "the suite" in msg and failed == ["tests/test_toy.py::test_value"]


@pytest.mark.slow
def test_the_whole_suite_runs_unbroken_only_when_a_breakage_needs_it(toy):
    pb._try(toy, BROKEN, {BROKEN.name: ["tests/test_toy.py::test_value"]})
    assert not pb._UNBROKEN.ran  # caught by its hint: the suite never ran
    pb._try(toy, BROKEN, {})
    assert pb._UNBROKEN.ran and pb._UNBROKEN.passes()


@pytest.mark.slow
def test_a_suite_that_fails_unbroken_catches_nothing(toy):
    with open(toy.parent / "unbroken" / "tests" / "test_toy.py", "a") as f:  # the suite fails without any breakage
        f.write("\n\ndef test_always_fails():\n    assert False\n")
    for hints in ({}, {BROKEN.name: ["tests/test_toy.py::test_unrelated"]}):
        verdict, msg, _ = pb._try(toy, BROKEN, hints)
        assert verdict == "UNSOUND" and "unbroken" in msg, (hints, msg)


@pytest.mark.slow
def test_a_harmless_edit_survives_whatever_the_hint(toy):
    for hints in ({}, {HARMLESS.name: ["tests/test_toy.py::test_value"]}, {HARMLESS.name: ["tests/test_toy.py::x"]}):
        verdict, msg, _ = pb._try(toy, HARMLESS, hints)
        assert verdict == "SURVIVED", (hints, msg)


def test_every_hint_names_a_breakage_and_a_suite_test():
    hints = pb._load_hints()
    names = {b.name for b in pb.BREAKAGES}
    assert set(hints) <= names, set(hints) - names
    assert all(h.split("::", 1)[0] in pb.SUITE for v in hints.values() for h in v)


@pytest.mark.slow
def test_a_hint_that_fails_on_its_own_settles_nothing(toy):
    """A hinted test that fails alone even on the unbroken code (order-dependent) must not count as catching: the
    harmless edit survives, the broken one is caught by the suite."""
    hints = {HARMLESS.name: ["tests/test_toy.py::test_order_dependent"], BROKEN.name: ["tests/test_toy.py::test_order_dependent"]}
    verdict, msg, _ = pb._try(toy, HARMLESS, hints)
    assert verdict == "SURVIVED" and "fails alone on the unbroken code" in msg, msg
    verdict, msg, failed = pb._try(toy, BROKEN, hints)
    assert verdict == "caught" and failed == ["tests/test_toy.py::test_value"], msg


def test_a_hung_run_is_not_caught(toy, monkeypatch):
    hung = (pb.TIMEOUT, "timed out after 900 s", [])
    monkeypatch.setattr(pb, "_run_suite", lambda work, files=None: hung if work == toy else (0, "1 passed", []))
    assert pb._try(toy, BROKEN, {})[0] == "TIMEOUT"
    monkeypatch.setattr(pb, "_UNBROKEN", pb._Unbroken(toy.parent / "unbroken"))
    monkeypatch.setattr(pb, "_run_suite", lambda work, files=None: hung)  # hung on the unbroken code too
    assert pb._try(toy, BROKEN, {})[0] == "UNSOUND"


def test_every_breakage_still_applies_to_the_code():
    """Each breakage's text occurs exactly once in its file: an edit of the guarded code that moves it makes the
    breakage STALE, which `make breakages` (CI) reports as a failure; this says so in `make test`, in a second."""
    stale = [f"{b.name}: {(pb.ROOT / b.path).read_text().count(b.old)} matches in {b.path}" for b in pb.BREAKAGES
             if (pb.ROOT / b.path).read_text().count(b.old) != 1]
    assert not stale, stale


def test_a_breakage_the_harness_cannot_try_is_not_caught(monkeypatch, capsys):
    """A breakage whose try raises (the harness, not the suite, failed) counts as not caught, and the run fails."""
    monkeypatch.setattr(pb, "_copy_project", lambda dst: dst.mkdir(parents=True))
    monkeypatch.setattr(pb, "_run_suite", lambda work, files=None: (0, "1 passed", []))
    monkeypatch.setattr(pb, "_load_hints", lambda: {})

    def boom(*a, **k):
        raise OSError("no space left on device")

    monkeypatch.setattr(pb, "_try", boom)
    monkeypatch.setattr(pb, "BREAKAGES", (BROKEN, HARMLESS))
    monkeypatch.setattr(pb, "_UNBROKEN", pb._Unbroken())
    monkeypatch.setattr(sys, "argv", ["privacy_breakages.py", "--jobs", "2"])
    assert pb.main() == 1
    out = capsys.readouterr().out
    assert "0 of 2 breakages caught" in out and "ERROR" in out and "not needed" not in out
