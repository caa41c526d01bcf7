"""The ``index`` stage: reports/index.html, reports/metrics.json, reports/main_table.csv and reports/claims_table.csv.

The page opens with the paper's claims decided by the claims campaign (reports/paper/claims/,
reports/paper/claims_mnist/ and reports/paper/claims_mnist_cnn/,
rendered by :mod:`fairdp_core.claims_report`), then this profile's own runs
(:func:`fairdp_core.reporting.build_index`).
"""

from __future__ import annotations

import argparse

from ..config import load_params

__all__ = ["main", "write_index"]


def write_index(params):
    """Render the claims sections and build the index around them; returns the index's path."""
    from ..claims_report import (
        CLAIMS_SOURCES,
        ROBUSTNESS,
        claims_figure,
        claims_first_screen,
        claims_frame,
        claims_section,
        write_claims_csv,
    )
    from ..reporting import build_index

    claims_dir = [params.resolve(d) for d, _ in CLAIMS_SOURCES]
    profile = [params.resolve(p) for _, p in CLAIMS_SOURCES]
    frame = claims_frame(claims_dir, profile)  # read and computed once for the three renderings
    # the index first: it fails (before writing anything) when a run's results are missing
    first = (claims_first_screen(claims_dir, profile, frame=frame)
             + claims_figure(frame, params.resolve("reports/figures") / "index"))
    out = build_index(params, first_screen=first, claims=claims_section(claims_dir, profile, frame=frame,
                                                                          robust_dir=params.resolve(ROBUSTNESS)))
    write_claims_csv(claims_dir, params.resolve("reports") / "claims_table.csv", profile, frame=frame)
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
