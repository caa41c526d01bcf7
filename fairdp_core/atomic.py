"""Atomic outputs: write to a temporary sibling, then rename, so a killed stage never leaves a plausible half file.

A temporary is named ``.<final>.<pid>.<random>.<suffix>``: a process killed with SIGKILL cannot clean up, so the next
writer of the same ``final`` removes temporaries whose process is gone before it starts.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["MANIFEST", "OutputDirError", "atomic_dir", "atomic_path", "check_output_dir", "jsonable", "sweep_stale",
           "write_managed_dir", "write_text"]


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


MANIFEST = ".fairdp-manifest.json"


class OutputDirError(ValueError):
    """An output directory fairdp may not write into: it holds files fairdp did not write, or a previous output
    that only ``force`` may replace."""


def check_output_dir(out: str | os.PathLike, *, force: bool = False, protect: tuple = (), flag: str = "--force") -> None:
    """Refuse, before any work, an output directory that would lose something: one that holds a file fairdp did not
    write there (anything not in its manifest), one of ``protect`` (e.g. the input), or a previous output without
    ``force``. A directory that does not exist, or is empty, is fine."""
    import json

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputDirError(f"{out}: exists and is not a directory")
    for p in protect:
        p = Path(p).resolve()
        if out.resolve() == p or out.resolve() in p.parents:
            raise OutputDirError(f"{out}: holds the input {p.name}; write the audit to a new directory")
    if not out.is_dir():
        return
    present = sorted(p.name for p in out.iterdir() if p.name != MANIFEST and not re.match(r"^\..*\.tmp$", p.name))
    if not present and not (out / MANIFEST).exists():
        return
    ours: set[str] = set()
    if (out / MANIFEST).is_file():
        try:
            ours = set(json.loads((out / MANIFEST).read_text())["files"])
        except (ValueError, KeyError, TypeError):
            ours = set()
    foreign = [n for n in present if n not in ours]
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise OutputDirError(f"{out}: holds files fairdp did not write ({shown}); choose a new or empty directory "
                             "(nothing was written)")
    if not force:
        raise OutputDirError(f"{out}: holds a previous fairdp output; pass {flag} to replace its files, or choose "
                             "another directory")


def write_managed_dir(out: str | os.PathLike, write: Callable[[Path], None], *, force: bool = False,
                      protect: tuple = (), flag: str = "--force") -> Path:
    """Write an output directory through ``write(tmp)`` (which fills a temporary directory) and a manifest of the
    files it wrote. A new directory appears whole (rename); an existing one (only with ``force``, and only when
    every file in it is in fairdp's manifest) has exactly the manifest's files replaced, each by rename, the
    manifest first marked incomplete and completed last; no other file is touched."""
    import json

    out = Path(out)
    check_output_dir(out, force=force, protect=protect, flag=flag)
    staging_parent = out if out.is_dir() else out.parent
    staging_parent.mkdir(parents=True, exist_ok=True)
    sweep_stale(staging_parent / f"{out.name}.staging")
    tmp = Path(tempfile.mkdtemp(dir=staging_parent, prefix=_prefix(staging_parent / f"{out.name}.staging"),
                                suffix=".tmp"))
    try:
        write(tmp)
        names = sorted(p.name for p in tmp.iterdir())
        if not out.is_dir():
            (tmp / MANIFEST).write_text(json.dumps({"files": names, "complete": True}, indent=1) + "\n")
            tmp.chmod(0o755)
            os.replace(tmp, out)
            return out
        old = set()
        if (out / MANIFEST).is_file():
            old = set(json.loads((out / MANIFEST).read_text())["files"])
        write_text(out / MANIFEST, json.dumps({"files": sorted(old | set(names)), "complete": False}, indent=1) + "\n")
        for n in sorted(names, key=lambda n: n == "summary.json"):  # the summary last
            os.replace(tmp / n, out / n)
        for n in sorted(old - set(names)):
            (out / n).unlink(missing_ok=True)
        write_text(out / MANIFEST, json.dumps({"files": names, "complete": True}, indent=1) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def jsonable(x):
    """``x`` with numpy scalars and arrays as plain Python, non-finite floats as None (strict JSON)."""
    import numpy as np

    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        return None if not np.isfinite(float(x)) else float(x)
    if isinstance(x, np.integer):
        return int(x)
    return x
