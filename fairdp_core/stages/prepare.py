"""The ``prepare`` stage: verify a dataset's raw files and write ``data/prepared/<name>`` (arrays + meta)."""

from __future__ import annotations

import argparse
import json

from ..config import load_params
from ..data.pipeline import prepare

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fairdp prepare", description=__doc__)
    ap.add_argument("names", nargs="*", help="datasets to prepare")
    ap.add_argument("--all", action="store_true", help="every dataset configured in params.yaml")
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    params = load_params(args.params)  # validated before any work starts
    names = list(params.data.datasets) if args.all else args.names
    if not names:
        raise SystemExit("fairdp prepare: name at least one dataset, or --all")
    for name in names:
        print(json.dumps(prepare(params, name).summary()))
    return 0


if __name__ == "__main__":
    import sys

    from ..data.sources import DataSourceError
    from . import stage_main

    def _run(argv):
        try:
            return main(argv)
        except DataSourceError as e:
            print(f"fairdp prepare: error: {e}", file=sys.stderr)
            return 2

    sys.exit(stage_main("prepare", _run))
