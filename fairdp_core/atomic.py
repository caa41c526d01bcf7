"""Atomic outputs: write to a temporary sibling, then rename, so a killed stage never leaves a plausible half file.

A temporary is named ``.<final>.<pid>.<random>.<suffix>``: a process killed with SIGKILL cannot clean up, so the next
writer of the same ``final`` removes temporaries whose process is gone before it starts.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_dir", "atomic_path", "sweep_stale", "write_text"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(final: str | os.PathLike) -> list[Path]:
    """Remove the temporaries beside ``final`` left by writers that no longer run; return what was removed."""
    final = Path(final)
    if not final.parent.is_dir():
        return []
    pattern = re.compile(rf"^\.{re.escape(final.name)}\.(\d+)\.[a-z0-9_]{{8}}\.[a-z]+$")
    removed = []
    for p in final.parent.iterdir():
        m = pattern.match(p.name)
        if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def _prefix(final: Path) -> str:
    return f".{final.name}.{os.getpid()}."


@contextmanager
def atomic_path(final: str | os.PathLike, *, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path beside ``final``; on success it becomes ``final`` (mode 0644), else it is removed."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale(final)
    fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=_prefix(final), suffix=suffix)
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
    sweep_stale(final)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=_prefix(final), suffix=".tmp"))
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
