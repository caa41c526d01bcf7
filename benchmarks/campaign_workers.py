"""A campaign's runs one after the other (this process, one torch thread) against N one-thread worker processes.

    python benchmarks/campaign_workers.py [--part law_paper-lr-e10] [--runs 8] [--workers 2] [--rounds 1]

Builds a scratch project with the claims profile (datasets from FAIRDP_DATA_MIRROR, else ../shared/datasets),
prepares the part's dataset, then runs the part's first ``--runs`` runs (grid order: every arm of seed 0, then seed
1, ...) once in this process and once on ``CampaignPool(workers, "loky")``, each into its own scratch summaries
directory, in alternating order over ``--rounds``. It checks that both give the same summaries but for their wall
times, and writes ``campaign_workers.json`` and ``campaign_workers.md`` beside this file (the ratio is measured in
one run; the machine is noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", default="law_paper-lr-e10")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", default=str(Path(__file__).parent))
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"  # as `fairdp claims run` sets it, before any worker starts
    os.environ.setdefault("FAIRDP_DATA_MIRROR", str((ROOT.parent / "shared" / "datasets").resolve()))

    import torch

    from fairdp_core.atomic import jsonable
    from fairdp_core.cli import use_profile
    from fairdp_core.config import load_params
    from fairdp_core.study import claims

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="fairdp-campaign-bench-") as tmp:
        work = Path(tmp)
        shutil.copytree(ROOT / "profiles", work / "profiles")
        use_profile("claims", work / "params.yaml", work / "profiles")
        params = load_params(work / "params.yaml")
        names = [n for ns in claims.part_runs(params, args.part).values() for n in ns][: args.runs]
        claims._prepare(params, params.runs[names[0]].dataset)
        pool = claims.CampaignPool(args.workers, "loky")
        times: dict[str, list[float]] = {"sequential": [], "pool": []}
        got: dict[str, list[dict]] = {}
        for r in range(args.rounds):
            for how in (("sequential", "pool") if r % 2 == 0 else ("pool", "sequential")):
                out = work / f"summaries-{how}-{r}"
                t0 = time.perf_counter()
                got[how] = claims.run_wave(params, args.part, names, out, commit="bench", progress=False,
                                            log=lambda m: None, pool=pool if how == "pool" else None)
                times[how].append(time.perf_counter() - t0)
                print(f"round {r + 1}, {how}: {times[how][-1]:.1f} s", flush=True)

        def strip(ss: list[dict]) -> list[dict]:  # as the summary files hold them, but for the wall times
            return [{k: v for k, v in json.loads(json.dumps(jsonable(s))).items() if k != "wall_s"} for s in ss]

        same = strip(got["sequential"]) == strip(got["pool"])
    seq, par = statistics.median(times["sequential"]), statistics.median(times["pool"])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    rec = {"part": args.part, "runs": names, "workers": args.workers, "rounds": args.rounds, "commit": commit,
           "cpus": os.cpu_count(), "torch": torch.__version__, "sequential_s": times["sequential"],
           "pool_s": times["pool"], "speedup": round(seq / par, 2), "same_summaries": same}
    out = Path(args.out)
    (out / "campaign_workers.json").write_text(json.dumps(rec, indent=1) + "\n")
    (out / "campaign_workers.md").write_text(
        "# A campaign over worker processes\n\n"
        f"`python benchmarks/campaign_workers.py --part {args.part} --runs {args.runs} --workers {args.workers} "
        f"--rounds {args.rounds}` at {commit}, {os.cpu_count()} CPUs, torch {torch.__version__}: the part's first "
        f"{len(names)} runs (train and the claims attacks), one after the other in one process at one torch thread, "
        f"against {args.workers} one-thread worker processes (loky), medians of {args.rounds} round(s) in "
        "alternating order.\n\n"
        "| how | wall s (median) | runs per hour |\n|---|---|---|\n"
        f"| one after the other | {seq:.1f} | {3600 * len(names) / seq:.0f} |\n"
        f"| {args.workers} workers | {par:.1f} | {3600 * len(names) / par:.0f} |\n\n"
        f"Speed-up: {seq / par:.2f}×. The summaries are {'the same' if same else 'NOT the same'} but for their wall "
        "times.\n")
    print(json.dumps(rec))
    if not same:
        raise SystemExit("the pool's summaries differ from the sequential ones")


if __name__ == "__main__":
    main()
