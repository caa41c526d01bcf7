"""Where one paper-design run spends its wall time under `dvc repro`: train / signals / attacks / overhead, per stage,
for two or more checkouts of the code, interleaved round by round (the machine is noisy: compare within a round).

    git worktree add --detach ../pd-before <commit>; git worktree add --detach ../pd-after HEAD
    (cd ../pd-before && fairdp use-profile paper && dvc repro attack@law_paper-lr-dpsgd-e10-s0)   # and pd-after
    python benchmarks/paper_run.py ../pd-before ../pd-after [--run law_paper-lr-dpsgd-e10-s0] [--rounds 2]

Each checkout must be on the paper profile (m = n, 2R = 400, n_null 10, n_perm 200) with the run's upstream stages
done. Per round and checkout it forces the run's train stage and then its attack stage (`dvc repro -f -s`), and runs
each stage's command once more outside DVC; it reads the stage's own timings (results/timings/). The split:

- compute: the stage's timed work under DVC (train: training + signals; attack: the sum of the attacks);
- overhead: the `dvc repro -f -s` wall time less that compute, split into
  - process: the command run alone, less its own compute (interpreter start, imports, reading and writing files);
  - dvc: the rest (DVC's start, hashing, the dvc.lock rewrite).

Prints one JSON line per (round, checkout, stage). Writes in the checkouts only: the stages' outputs and timings
(results/), their dvc.lock entries and DVC's cache. The stages rewrite the same bytes (same params and seed); after
each lone run, `dvc status` of the stage must be clean, or the script stops and says so (a stage whose outputs
changed would leave the checkout out of step with its dvc.lock).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

PYTHON = shutil.which("python") or sys.executable  # the interpreter DVC's `python -m ...` commands find on PATH


def _run(cmd: list[str], cwd: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{' '.join(cmd)} failed in {cwd}:\n{r.stderr[-2000:]}")
    return time.perf_counter() - t0, r.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkouts", nargs="+", type=Path)
    ap.add_argument("--run", default="law_paper-lr-dpsgd-e10-s0")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    for c in args.checkouts:
        if not (c / "results" / "timings" / f"train-{args.run}.json").is_file():
            ap.error(f"{c}: no results/timings/train-{args.run}.json: run `dvc repro attack@{args.run}` there first")
    for rnd in range(args.rounds):
        order = args.checkouts if rnd % 2 == 0 else args.checkouts[::-1]
        for c in order:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=c, capture_output=True,
                                    text=True).stdout.strip() or "unknown"
            for stage in ("train", "attack"):
                dvc_wall = _run(["dvc", "repro", "-f", "-s", f"{stage}@{args.run}"], c)[0]
                parts = _compute(c, stage, args.run)
                cmd_wall = _run([PYTHON, "-m", f"fairdp_core.stages.{stage}", args.run], c)[0]
                process = cmd_wall - sum(_compute(c, stage, args.run).values())  # the lone run's own compute
                status = _run(["dvc", "status", f"{stage}@{args.run}"], c)[1]
                if "changed" in status or "modified" in status:
                    sys.exit(f"{c}: {stage}@{args.run} wrote other outputs when run alone (not reproducible?):\n"
                             f"{status}")
                overhead = dvc_wall - sum(parts.values())
                print(json.dumps({"round": rnd + 1, "checkout": str(c), "commit": commit, "stage": stage,
                                  "dvc_repro_wall_s": round(dvc_wall, 2), **parts,
                                  "overhead_s": round(overhead, 2), "process_s": round(process, 2),
                                  "dvc_s": round(overhead - process, 2), "load_avg": round(os.getloadavg()[0], 2)}),
                      flush=True)


def _compute(c: Path, stage: str, run: str) -> dict[str, float]:
    """The stage's timed work, from the timings it wrote: train and signals, or the attacks' sum."""
    tim = json.loads((c / "results" / "timings" / f"{stage}-{run}.json").read_text())
    if stage == "train":  # a PA-LOOA run's coupled bank counts as training
        return {"train_s": tim["train_s"] + tim.get("looa_s", 0.0), "signals_s": tim["signals_s"]}
    return {"attacks_s": round(sum(v for k, v in tim.items() if k.endswith("_s")), 3)}


if __name__ == "__main__":
    main()
