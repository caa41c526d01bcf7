"""A run profile other than the default runs in a directory of its own, never over the committed study.

``make repro PROFILE=smoke`` (any profile but ``default``) prepares ``profile-runs/<name>/``: a copy of the
checkout's tracked files with its own ``params.yaml`` (the profile), ``results/``, ``reports/`` and ``dvc.lock``, the
checkout's virtual environments linked in, then runs the pipeline there. The checkout's ``params.yaml`` (comments
included), its committed reports and its ``dvc.lock`` are never touched. Run again, the directory is refreshed: the
code is copied anew, while its results, reports, lock and DVC cache stay, so DVC reruns only what changed.
``make repro PROFILE=... IN_PLACE=1`` runs the profile in the checkout itself instead (CI does, in a throwaway copy).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["main", "prepare_profile_dir"]

# Outputs of the pipeline run there: copied from the checkout the first time only (the committed reports hold inputs
# of later stages too, e.g. reports/paper/claims), then the profile's own.
KEEP = ("reports", "dvc.lock", "params.yaml", "runs.yaml")


def _tracked(root: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def prepare_profile_dir(root: str | os.PathLike, name: str, dest: str | os.PathLike | None = None) -> Path:
    """Create or refresh the profile's directory (default ``<root>/profile-runs/<name>``) and make its params.yaml
    the profile; returns the directory."""
    from ..config import ConfigError
    from .params_files import profile_names, use_profile

    root = Path(root).resolve()
    if not (root / "profiles" / f"{name}.yaml").is_file():
        known = profile_names(root / "profiles")
        raise ConfigError(f"unknown profile {name!r}: no profiles/{name}.yaml (known: {', '.join(known)})")
    dest = Path(dest) if dest is not None else root / "profile-runs" / name
    first = not dest.exists()
    dest.mkdir(parents=True, exist_ok=True)
    for rel in _tracked(root):
        if not first and rel.split("/")[0] in KEEP:
            continue
        src, dst = root / rel, dest / rel
        if not src.exists():  # deleted in the working tree, not yet committed
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    for venv in (".venv", ".venv-synth"):
        link = dest / venv
        if (root / venv).exists() and not link.exists():
            link.symlink_to(root / venv)
    if not (dest / ".git").exists():  # DVC wants a repository; the profile's directory is its own
        subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    use_profile(name, dest / "params.yaml", dest / "profiles")  # the profile as it is now (it may have changed)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fairdp_core.study.profile_dir", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", help="a profile of profiles/ other than default")
    ap.add_argument("--root", default=".", help="the checkout (default: the current directory)")
    args = ap.parse_args(argv)
    from ..config import ConfigError

    if args.name == "default":
        print("the default profile is the committed study: it runs in the checkout itself", file=sys.stderr)
        return 2
    try:
        print(prepare_profile_dir(args.root, args.name))
    except ConfigError as e:
        print(f"fairdp profile: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
