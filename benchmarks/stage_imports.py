"""What each pipeline stage pays before it does any work: a fresh Python process importing its module.

    python benchmarks/stage_imports.py [--rounds 5] [--out benchmarks]

``dvc repro`` starts one process per stage, so a stage's import time is paid once per stage: at the paper's design
a Law run (train about 30 s, attacks about 60 s) pays it twice, and the gpu grid's ~900 runs pay it 1,800 times.
Per stage module: the median and range over ``--rounds`` interleaved rounds of ``python -c "import <module>"``,
beside a bare interpreter and ``import torch`` (the floor any training stage pays). Writes ``stage_imports.json``
and ``stage_imports.md``. Absolute seconds depend on the machine and its load: read them against the two baselines
measured in the same rounds.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("prepare", "design", "plan", "train", "attack", "report", "index")
BASELINES = {"python (bare)": "pass", "import torch": "import torch"}


def _time(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "benchmarks"))
    args = ap.parse_args(argv)
    cases = {**BASELINES, **{f"stage {s}": f"import fairdp_core.stages.{s}" for s in STAGES}}
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.rounds):  # interleaved: each round times every case once
        for name, code in cases.items():
            times[name].append(_time(code))
    rows = [{"case": k, "median_s": statistics.median(v), "min_s": min(v), "max_s": max(v)} for k, v in times.items()]
    out = Path(args.out)
    (out / "stage_imports.json").write_text(json.dumps({"rounds": args.rounds, "python": sys.version.split()[0],
                                                        "machine": platform.platform(), "rows": rows}, indent=1) + "\n")
    lines = ["# Stage start-up: a fresh process importing each stage's module", "",
             f"{args.rounds} interleaved rounds, `python benchmarks/stage_imports.py`; seconds.", "",
             "| case | median | min | max |", "|---|---|---|---|"]
    lines += [f"| {r['case']} | {r['median_s']:.2f} | {r['min_s']:.2f} | {r['max_s']:.2f} |" for r in rows]
    (out / "stage_imports.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
