"""The ``fairdp`` command line: the stage commands that dvc.yaml runs."""

from __future__ import annotations

import argparse
import json
import sys

from .config import ConfigError, load_params
from .data import DataSourceError, prepare

__all__ = ["main"]


def _cmd_prepare(args: argparse.Namespace) -> int:
    params = load_params(args.params)  # validated before any work starts
    names = list(params.data.datasets) if args.all else args.names
    if not names:
        raise SystemExit("fairdp prepare: name at least one dataset, or --all")
    for name in names:
        data = prepare(params, name)
        print(json.dumps(data.summary()))
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    load_params(args.params)
    print(f"{args.params}: ok")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fairdp", description=__doc__)
    parser.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="verify raw files and write data/prepared/<name>")
    p.add_argument("names", nargs="*", help="datasets to prepare")
    p.add_argument("--all", action="store_true", help="every dataset configured in params.yaml")
    p.set_defaults(func=_cmd_prepare)
    c = sub.add_parser("check-params", help="validate params.yaml and exit")
    c.set_defaults(func=_cmd_check)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, DataSourceError, KeyError, ValueError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        print(f"fairdp {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
