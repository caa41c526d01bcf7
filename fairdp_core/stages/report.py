"""The ``report`` and ``index`` stages: run one report notebook (papermill) and render it; build the index page.

    python -m fairdp_core.stages.report NOTEBOOK     reports/<NOTEBOOK>.html and reports/figures/<NOTEBOOK>/

The index page has a stage of its own (:mod:`fairdp_core.stages.index`).
"""

from __future__ import annotations

import argparse

from ..config import load_params

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    from ..reporting.pages import run_notebook

    ap = argparse.ArgumentParser(prog="fairdp report", description=__doc__)
    ap.add_argument("notebook", help="a report of notebooks/ (without .py)")
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    params = load_params(args.params)
    print(run_notebook(params, args.notebook))
    return 0


if __name__ == "__main__":
    import sys

    from . import stage_main

    sys.exit(stage_main("report", main))
