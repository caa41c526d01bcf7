"""The ``design`` stage: draw the audit design (membership matrix) of a dataset and seed.

``results/designs/<dataset>-s<seed>.npz`` is shared by every run of that dataset and seed, so algorithms are
compared on the same membership draws.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ..audit.design import AuditDesign, audit_design
from ..config import Params, load_params
from ..data.base import load
from ..seeding import derive_rng

__all__ = ["main", "write_design"]


def write_design(params: Params, key: str, path: str | os.PathLike) -> AuditDesign:
    """Draw the audit design for ``designs[key]`` and save it (atomically) to ``path``."""
    spec = params.designs[key]
    data = load(params.resolve(params.data.prepared_dir) / spec["dataset"])
    a = params.audit
    rng = derive_rng(params.seed, "design", spec["dataset"], spec["seed"])
    d = audit_design(data.train.group, m=a.m_for(len(data.train)), R=a.R, min_per_group=a.min_per_group, rng=rng)
    d.save(path)
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fairdp design", description=__doc__)
    ap.add_argument("key", help="a key of runs.yaml's designs, e.g. adult-s0")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    params = load_params(args.params)
    if args.key not in params.designs:
        raise KeyError(f"design {args.key!r} is not in runs.yaml designs (known: {', '.join(params.designs)})")
    out = Path(args.out or params.resolve("results/designs") / f"{args.key}.npz")
    d = write_design(params, args.key, out)
    print(json.dumps({"design": args.key, "m": len(d.audit_idx), "R": d.R}))
    return 0


if __name__ == "__main__":
    import sys

    from . import stage_main

    sys.exit(stage_main("design", main))
