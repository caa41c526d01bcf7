"""Atomic outputs: write to a temporary sibling, then rename, so a killed stage never leaves a plausible half file."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_dir", "atomic_path", "write_text"]


@contextmanager
def atomic_path(final: str | os.PathLike, *, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path beside ``final``; on success it becomes ``final`` (mode 0644), else it is removed."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=suffix)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        tmp_path.chmod(0o644)
        os.replace(tmp_path, final)
    finally:
        tmp_path.unlink(missing_ok=True)


@contextmanager
def atomic_dir(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside ``final``; on success it replaces ``final`` (mode 0755)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp"))
    try:
        yield tmp
        tmp.chmod(0o755)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_text(final: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``final`` atomically."""
    with atomic_path(final) as tmp:
        tmp.write_text(text)
