"""The ``report`` and ``index`` stages: run one report notebook (papermill) and render it; build the index page.

    python -m fairdp_core.stages.report NOTEBOOK     reports/<NOTEBOOK>.html and reports/figures/<NOTEBOOK>/
    python -m fairdp_core.stages.report --index      reports/index.html and reports/metrics.json
"""

from __future__ import annotations

import argparse

from ..config import load_params

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    from ..reporting import build_index, run_notebook

    ap = argparse.ArgumentParser(prog="fairdp report", description=__doc__)
    ap.add_argument("notebook", nargs="?", help="a report of notebooks/ (without .py)")
    ap.add_argument("--index", action="store_true", help="build the index page instead")
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    params = load_params(args.params)
    if args.index == bool(args.notebook):
        raise SystemExit("fairdp report: give a NOTEBOOK or --index")
    print(build_index(params) if args.index else run_notebook(params, args.notebook))
    return 0


if __name__ == "__main__":
    import sys

    from . import stage_main

    sys.exit(stage_main("report", main))
