"""One Law run of the paper's design, its wall time split into training, signals and the attack stage.

    fairdp use-profile claims                                   # in a scratch checkout or worktree: m = n, 2R = 400
    python benchmarks/law_design.py train                       # trains law_paper-lr-dpsgd-e10-s0 once (results/)
    python benchmarks/law_design.py attack [--n-null 10] [--n-perm 200] [--rounds 1]

``attack`` runs the attack stage's ``run_attack`` on that bank with EVERY attack of the registry (the claims profile
itself runs a subset) at the paper profile's n_null and n_perm, and prints its wall time, each attack's time and a
hash of the summary's attacks and one of records.csv and groups.csv (every record's advantages, every group's rows
and the low-FPR view): the same hashes from two versions of the code mean the same results. To compare code versions
on one bank, run ``attack`` with ``PYTHONPATH`` set to each checkout in turn (docs/performance.md, 'The attack
stage'). Prints JSON lines; writes nothing but ``results/`` of the checkout and a scratch audit directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from pathlib import Path

RUN = "law_paper-lr-dpsgd-e10-s0"


def main() -> None:
    t_start = time.perf_counter()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("train", "attack"))
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--n-null", type=int, default=10, help="the paper profile's 10 (the default profile's: 50)")
    ap.add_argument("--n-perm", type=int, default=200, help="the paper profile's 200 (the default profile's: 1000)")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()

    from fairdp_core.config import load_params
    from fairdp_core.study.claims import effective_plan

    params = load_params(args.params)
    if RUN not in params.runs:
        ap.error(f"{args.params} has no run {RUN}: run `fairdp use-profile claims` in this checkout first")
    plan = effective_plan(params, RUN)
    design_path = params.resolve("results/designs") / f"{plan['train']['design']}.npz"
    train_dir = params.resolve("results/train") / RUN
    if args.what == "train":
        from fairdp_core.data.pipeline import prepare
        from fairdp_core.stages.design import write_design
        from fairdp_core.stages.train import run_train

        dataset = params.runs[RUN].dataset
        if not (params.resolve(params.data.prepared_dir) / dataset / "meta.json").is_file():
            prepare(params, dataset)
        write_design(params, plan["train"]["design"], design_path)
        t0 = time.perf_counter()
        run_train(params, RUN, train_dir, plan=plan["train"], design_path=design_path, progress=False)
        tim = json.loads((params.resolve("results/timings") / f"train-{RUN}.json").read_text())
        print(json.dumps({"run": RUN, "train_stage_wall_s": round(time.perf_counter() - t0, 1), **tim}))
        return

    from fairdp_core.audit.run import ATTACKS
    from fairdp_core.stages.attack import run_attack

    attack_plan = dict(plan["attack"], n_null=args.n_null, n_perm=args.n_perm)
    startup = time.perf_counter() - t_start
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            summary, tim = run_attack(RUN, Path(tmp) / RUN, plan=attack_plan, train_dir=train_dir,
                                      design_path=design_path, attacks=ATTACKS)
            wall = time.perf_counter() - t0
            files = b"".join((Path(tmp) / RUN / f).read_bytes() for f in ("records.csv", "groups.csv"))
        blob = json.dumps(summary["attacks"], sort_keys=True, default=str).encode()
        print(json.dumps({"run": RUN, "round": r + 1, "n_null": args.n_null, "n_perm": args.n_perm,
                          "attack_stage_wall_s": round(wall, 2), "startup_s": round(startup, 2),
                          "summary_sha256": hashlib.sha256(blob).hexdigest()[:16],
                          "records_groups_sha256": hashlib.sha256(files).hexdigest()[:16],
                          "per_attack_s": {k: round(v, 2) for k, v in tim.items()}}), flush=True)


if __name__ == "__main__":
    main()
