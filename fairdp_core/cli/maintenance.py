"""Maintenance: the reader checks of the rendered reports, and dvc.lock's stale entries."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _cmd_check_reports(args: argparse.Namespace) -> int:
    from ..reporting.checks import MAX_FIRST_SCREEN_WORDS, MAX_HEIGHT_PX, check_reports, first_screen_words, page_heights

    problems = check_reports(args.reports)
    if args.heights:
        heights = page_heights(args.reports, shots_dir=args.screenshots)
        if not heights:
            problems.append("--heights: no Chromium found (Debian: apt install chromium)")
        for page, h in heights.items():
            print(f"{page}: {h:,} px tall at 1,400 px wide")
            if h > MAX_HEIGHT_PX:
                problems.append(f"{page}: {h:,} px tall, over {MAX_HEIGHT_PX:,} px")
        index = Path(args.reports) / "index.html"
        words = first_screen_words(index) if heights and index.is_file() else None
        if words is not None:
            print(f"index.html: {words} words on the first screen (1,400 × 900)")
            if words > MAX_FIRST_SCREEN_WORDS:
                problems.append(f"index.html: {words} words on the first screen, over {MAX_FIRST_SCREEN_WORDS}")
    for p in problems:
        print(p, file=sys.stderr)
    print(f"fairdp check-reports: {len(problems)} problem{'s' if len(problems) != 1 else ''} in {args.reports}")
    return 1 if problems else 0


def _cmd_prune_lock(args) -> int:
    from ..study.lockfile import prune_lock

    root = Path(args.params).resolve().parent
    dropped = prune_lock(root)
    print(f"dvc.lock: {len(dropped)} entr{'y' if len(dropped) == 1 else 'ies'} of stages dvc.yaml no longer defines "
          f"removed{': ' + ', '.join(dropped[:5]) + (' ...' if len(dropped) > 5 else '') if dropped else ''}")
    return 0


def register(add) -> None:
    """Add the maintenance commands (``add(audience, name, help=...)`` makes a subparser)."""
    ck = add("maintenance", "check-reports", help="read the rendered reports like a reader: stderr, machine paths, nan "
                        "cells, uncaptioned tables, unreferenced figures, colours (--heights: page heights)")
    ck.add_argument("reports", nargs="?", default="reports", help="the reports directory (default reports)")
    ck.add_argument("--heights", action="store_true", help="measure page heights with headless Chromium")
    ck.add_argument("--screenshots", default=None, help="keep the screenshots in this directory")
    ck.set_defaults(func=_cmd_check_reports)
    pk = add("maintenance", "prune-lock", help="remove dvc.lock's entries of stages dvc.yaml no longer defines "
                        "(make repro runs it after dvc repro)")
    pk.set_defaults(func=_cmd_prune_lock)
