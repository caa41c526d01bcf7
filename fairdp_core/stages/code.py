"""Stage ``code_<family>``: one small file that fingerprints the code of a per-run stage family (train, attack).

``python -m fairdp_core.stages.code train`` writes ``results/code/train.json``: the md5 of every file among the deps
that dvc.yaml declares for the stage ``code_train`` (directories walked, ``__pycache__``/``*.pyc`` skipped as
``.dvcignore`` skips them) except this module's own (a dep of every code stage, so that editing it reruns
them, but not part of what they fingerprint), and nothing else. Every ``train@<run>`` stage depends on that one
file instead of listing its ~13 modules itself.

Why: DVC rewrites the whole ``dvc.lock`` after every stage it runs (a round-trip YAML parse and dump: about 7 s for
the 0.76 MB lock of the default profile's 391 stages, measured here), and the per-run module lists were over half
of that file. The reruns stay exactly what they were: editing a module that train imports changes a hash in
``train.json``, so every train stage reruns; editing this module reruns only the code stages, whose outputs
are then unchanged, so DVC reruns nothing downstream; editing any other file reruns nothing.
tests/test_stages.py checks the fingerprinted stages' code deps against their imports as before, through their
code stage.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from ..atomic import atomic_path
from . import stage_main

SKIP_DIRS, SKIP_SUFFIXES = {"__pycache__"}, {".pyc"}
SELF = "fairdp_core/stages/code.py"  # a dep of every code stage (it reruns them), never in a fingerprint


def stage_deps(stage: str, dvc_yaml: Path) -> list[str]:
    """The deps dvc.yaml declares for ``stage`` (a plain stage, not a foreach)."""
    import yaml

    stages = yaml.safe_load(dvc_yaml.read_text())["stages"]
    if stage not in stages:
        raise KeyError(f"{dvc_yaml}: no stage {stage!r} (known code stages: "
                       f"{', '.join(s for s in stages if s.startswith('code_')) or 'none'})")
    return list(stages[stage].get("deps", []))


def fingerprint(paths: list[str], root: Path) -> dict[str, str]:
    """``relative file path -> md5`` of every file under ``paths`` (files, or directories walked), sorted."""
    out: dict[str, str] = {}
    for p in paths:
        if p == SELF:
            continue
        full = root / p
        if not full.exists():
            raise FileNotFoundError(f"{full}: a code dependency that does not exist")
        files = [full] if full.is_file() else sorted(
            f for f in full.rglob("*") if f.is_file() and f.suffix not in SKIP_SUFFIXES
            and not SKIP_DIRS & set(f.relative_to(full).parts))
        for f in files:
            out[f.relative_to(root).as_posix()] = hashlib.md5(f.read_bytes()).hexdigest()
    return dict(sorted(out.items()))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m fairdp_core.stages.code FAMILY   (train, attack: the stage code_FAMILY)",
              file=sys.stderr)
        return 2
    family, root = argv[0], Path.cwd()  # DVC runs stage commands in the project root
    hashes = fingerprint(stage_deps(f"code_{family}", root / "dvc.yaml"), root)
    out = root / "results" / "code" / f"{family}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        tmp.write_text(json.dumps(hashes, indent=1) + "\n")
    print(f"{out.relative_to(root)}: {len(hashes)} files")
    return 0


if __name__ == "__main__":
    sys.exit(stage_main("code", main))
