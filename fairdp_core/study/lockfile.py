"""``dvc.lock`` without the entries of stages that dvc.yaml no longer defines (``fairdp prune-lock``).

DVC never removes a stage's lock entry: after a profile switch (``make repro PROFILE=smoke``), a grid edit or a
removed stage, the old runs' entries stay, and DVC parses and rewrites them with the whole file after every stage
it runs (about 7 s per stage at the 0.76 MB that 64 dead entries and per-run module lists once made). ``make repro``
prunes after ``dvc repro``. Outputs, the cache and DVC's run cache are untouched: a pruned stage that comes back is
restored from the run cache as before.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..atomic import atomic_path

__all__ = ["prune_lock", "prune_lock_text", "stage_names"]

_ENTRY = re.compile(r"^  (\S.*):$")


def prune_lock_text(text: str, names: set[str]) -> tuple[str, list[str]]:
    """``text`` (a dvc.lock) without the entries under ``stages:`` whose name is not in ``names``, every other line
    kept byte for byte; and the names removed."""
    out, dropped, keep, in_stages = [], [], True, False
    for line in text.splitlines(keepends=True):
        if line.strip() and not line.startswith(" "):  # a top-level key: schema, stages
            in_stages, keep = line.rstrip() == "stages:", True
        elif in_stages and (m := _ENTRY.match(line.rstrip("\n"))):
            keep = m.group(1) in names
            if not keep:
                dropped.append(m.group(1))
        if keep:
            out.append(line)
    return "".join(out), dropped


def stage_names(root: Path) -> set[str]:
    """Every stage name dvc.yaml defines now (foreach expanded), from ``dvc stage list``."""
    dvc = shutil.which("dvc") or str(Path(sys.executable).parent / "dvc")
    res = subprocess.run([dvc, "stage", "list", "--name-only"], cwd=root, capture_output=True, text=True)
    if res.returncode != 0:
        raise ValueError(f"dvc stage list failed in {root}: {res.stderr.strip()}")
    return set(res.stdout.split())


def prune_lock(root: Path) -> list[str]:
    """Prune ``root/dvc.lock`` in place (temp file, then rename); returns the removed stage names."""
    lock = root / "dvc.lock"
    if not lock.is_file():
        return []
    text, dropped = prune_lock_text(lock.read_text(), stage_names(root))
    if dropped:
        with atomic_path(lock) as tmp:
            tmp.write_text(text)
    return dropped
