"""The ``index`` stage: reports/index.html, reports/metrics.json, reports/main_table.csv, reports/claims_table.csv and
reports/frontier_table.csv.

The page opens with the paper's claims decided by the claims campaign (reports/paper/claims/,
reports/paper/claims_mnist/ and reports/paper/claims_mnist_cnn/,
rendered by :mod:`fairdp_core.reporting.claims`) and, beside them, each rule against DP-SGD's accuracy–Δ frontier
(reports/paper/frontier/, :mod:`fairdp_core.reporting.frontier`), then this profile's own runs
(:func:`fairdp_core.reporting.index.build_index`).
"""

from __future__ import annotations

import argparse

from ..config import load_params

__all__ = ["main", "write_index"]


def write_index(params):
    """Render the claims sections and build the index around them; returns the index's path."""
    from ..config import ConfigError
    from ..reporting.claims import CLAIMS_SOURCES, claims_first_screen, claims_frame
    from ..reporting.claims_page import ROBUSTNESS, claims_figure, claims_section, write_claims_csv
    from ..reporting.frontier import (
        FRONTIER_CLAIMS,
        FRONTIER_SOURCES,
        cell_progress,
        frontier_answer,
        frontier_cells,
        frontier_figure,
        frontier_frame,
        frontier_only,
        frontier_quoted,
        frontier_section,
        write_frontier_csv,
    )
    from ..reporting.index import build_index
    from ..reporting.pages import foreach_items
    from ..reporting.registry import REPORT_STAGE_PAGES

    pages = foreach_items(params.base_dir, "${pages}")  # the report stage's pages as DVC read them (runs.yaml)
    if pages is not None and list(pages) != list(REPORT_STAGE_PAGES):
        raise ConfigError(f"runs.yaml's pages {pages} are not the report registry's {list(REPORT_STAGE_PAGES)}: a page "
                          "would have no stage; regenerate runs.yaml with `fairdp grid --write` (make repro does this)")
    claims_dir = [params.resolve(d) for d, _ in CLAIMS_SOURCES]
    profile = [params.resolve(p) for _, p in CLAIMS_SOURCES]
    frame = claims_frame(claims_dir, profile)  # read and computed once for the three renderings
    points, table, planned = frontier_frame([params.resolve(d) for d, _ in FRONTIER_SOURCES],
                                            [params.resolve(d) for d in FRONTIER_CLAIMS],
                                            [params.resolve(p) for _, p in FRONTIER_SOURCES])
    cells = [c for _, prof in FRONTIER_SOURCES for c in frontier_cells(params.resolve(prof))]
    figures = params.resolve("reports/figures") / "index"
    # the index first: it fails (before writing anything) when a run's results are missing
    # the cells not run or in progress; the rest: "not planned"
    flagged = frontier_only(points, table, planned)
    quoted = {c: cell_progress(points, c).split(":")[0] for c in cells} | frontier_quoted(table, flagged)
    first = (claims_first_screen(claims_dir, profile, frame=frame, quoted_extra=quoted,
                                 equal_accuracy=frontier_answer(table, len(cells), flagged))
             + claims_figure(frame, figures))
    sections = (claims_section(claims_dir, profile, frame=frame, robust_dir=params.resolve(ROBUSTNESS))
                + frontier_section(points, table, cells, planned, flagged)
                + frontier_figure(points, cells, figures, planned))
    out = build_index(params, first_screen=first, claims=sections)
    write_claims_csv(claims_dir, params.resolve("reports") / "claims_table.csv", profile, frame=frame)
    write_frontier_csv(table, params.resolve("reports") / "frontier_table.csv")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fairdp index", description=__doc__)
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    print(write_index(load_params(args.params)))
    return 0


if __name__ == "__main__":
    import sys

    from . import stage_main

    sys.exit(stage_main("index", main))
