"""Time one paper-scale bank of every (dataset, model) pair of a profile, then extrapolate the profile's training.

    python benchmarks/gpu_timing.py                          # on CUDA (exits without it): benchmarks/gpu_timing.{json,md}
    python benchmarks/gpu_timing.py --device cpu --steps 3 --workers 1   # this CPU: benchmarks/cpu_timing.{json,md}

The prepared script for a GPU machine (it needs only this project and its pure-Python dependencies: the
data are synthetic). For every (dataset, model) pair of the profile's grid (default profiles/gpu.yaml: Adult, Bank,
Credit, Law, COMPAS with LR; MNIST 10,000 with the MLP and the CNN; UTKFace's whole training split with the CNN), one
DP-SGD-S bank of the profile's 2R models, each on a random half of n records of the dataset's shape (SHAPES below,
checked against the prepared data by tests/test_benchmarks.py; the values are random: a step's time does not depend
on them), σ_eff = 1, the profile's batch size, trained for ``--steps`` steps (LR: ``--lr-steps``) after a 1-step
warm-up bank, over the profile's ``compute.workers`` processes (or ``--workers``). DP-SGD-S is the costliest of the
profile's algorithms (DP-SGD's step plus its counts); SGD's step is cheaper, so using it for every run overstates.

The EXTRAPOLATION: every run of the profile takes T = round(epochs · n/2 / B) steps of its pair's measured time per
step. The time per step is the training loop's in one process; over several workers, the wall time of a bank of
2·steps minus that of a bank of ``steps``, over ``steps`` (starting the workers cancels out). Not included: starting
each bank's workers, the signals and attacks after training, the beyond-membership and synthetic-data stages, and
preparing the data.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MKL_CBWR", "COMPATIBLE")

from fairdp_core.atomic import write_text  # noqa: E402
from fairdp_core.cli import use_profile  # noqa: E402
from fairdp_core.config import load_params  # noqa: E402
from fairdp_core.engine import TrainSpec, train_bank_sharded  # noqa: E402

# (training records n, input shape, classes, groups) of each dataset as the gpu profile prepares it
SHAPES: dict[str, tuple[int, tuple[int, ...], int, int]] = {
    "adult": (30_162, (105,), 2, 2),
    "bank": (36_168, (51,), 2, 2),
    "credit": (23_999, (33,), 2, 2),
    "law_paper": (16_432, (10,), 2, 2),
    "compas": (4_937, (18,), 2, 2),
    "mnist": (10_000, (1, 28, 28), 10, 10),
    "utkface": (18_964, (1, 48, 48), 2, 5),
}


def profile_params(name: str):
    """The profile's params (profiles/default.yaml overlaid with profiles/<name>.yaml) with its runs."""
    with tempfile.TemporaryDirectory() as tmp:
        use_profile(name, Path(tmp) / "params.yaml", ROOT / "profiles")
        return load_params(Path(tmp) / "params.yaml")


def bank_seconds(dataset: str, model: str, *, M: int, steps: int, batch_size: int, device: str, workers: int,
                 hidden: int, seed: int = 0) -> float:
    """Wall seconds of a DP-SGD-S bank of M models on synthetic data of the dataset's shape, ``steps`` steps."""
    n, shape, C, K = SHAPES[dataset]
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, *shape)).astype(np.float32)
    y, g = rng.integers(0, C, n), rng.integers(0, K, n)
    mem = rng.random((M, n)) < 0.5
    spec = TrainSpec(algorithm="dpsgd_s", model=model, epochs=steps * batch_size / mem.sum(1).mean(),
                     batch_size=batch_size, lr=0.1, clip=5.0, noise_multiplier=1.0, hidden=hidden)
    t0 = time.perf_counter()
    bank = train_bank_sharded(X, y, g, mem, spec, n_classes=C, n_groups=K, seed=seed, device=device, progress=False,
                              workers=workers)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    if bank.steps != steps:
        raise RuntimeError(f"{dataset}/{model}: trained {bank.steps} steps, asked for {steps}")
    return wall if workers > 1 else bank.seconds


def seconds_per_step(dataset: str, model: str, *, steps: int, workers: int, **kw) -> float:
    """One process: the training loop's seconds over ``steps``. Several workers: the wall time of a bank of 2·steps
    minus that of a bank of ``steps``, over ``steps`` (what starting the workers and splitting the bank cost is the
    same in both and cancels), after a warm-up call that starts the worker pool."""
    if workers == 1:
        return bank_seconds(dataset, model, steps=steps, workers=1, **kw) / steps
    bank_seconds(dataset, model, steps=1, workers=workers, **kw)
    t1 = bank_seconds(dataset, model, steps=steps, workers=workers, **kw)
    t2 = bank_seconds(dataset, model, steps=2 * steps, workers=workers, **kw)
    if t2 <= t1:
        raise RuntimeError(f"{dataset}/{model}: {2 * steps} steps took {t2:.2f} s, no longer than {steps} steps "
                           f"({t1:.2f} s): too noisy to difference; rerun with more --steps")
    return (t2 - t1) / steps


def write_report(p, env: dict, per_step: dict, *, out: Path, stem: str, cmd: str, only: bool = False) -> str:
    """Write ``<stem>.json`` and ``<stem>.md`` from the times per step measured so far; returns the table's text."""
    B, E, M, workers = p.train.batch_size, p.train.epochs, env["models"], env["workers"]
    rows = []
    for (d, m), t in per_step.items():
        runs = [r for r in p.runs.values() if (r.dataset, r.model) == (d, m)]
        T = int(round(E * (SHAPES[d][0] / 2) / B))
        rows.append({"dataset": d, "model": m, "per_step_s": t, "steps_per_run": T, "per_run_s": t * T,
                     "runs": len(runs), "total_h": t * T * len(runs) / 3600})
    total_h = sum(r["total_h"] for r in rows)
    all_pairs = {(r.dataset, r.model) for r in p.runs.values()}
    complete = not only and set(per_step) == all_pairs
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / f"{stem}.json",
               json.dumps({"environment": env, "rows": rows, "total_h": total_h, "complete": complete}, indent=1))
    lines = [f"Training time of the `{env['profile']}` profile on {env['device']} (torch {env['torch']}, "
             f"{env['threads']} threads): {M} models per bank over {workers} worker(s), batch {B}, {E:g} epochs. "
             f"Each row's time per step is MEASURED ({env['lr_steps_timed']} steps (LR) or {env['steps_timed']} of one "
             f"DP-SGD-S bank on synthetic data of the dataset's shape{'' if workers == 1 else '; 2·steps minus steps'});"
             " the per-run and total times are an EXTRAPOLATION (T = epochs · n/2 / B steps per run; training only: no "
             f"signals, attacks, beyond or synthetic-data stages). `{cmd}`.", "",
             "| dataset | model | s per step (measured) | steps per run | per run | runs | total (extrapolated) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['model']} | {r['per_step_s']:.4f} | {r['steps_per_run']:,} | "
                     f"{r['per_run_s'] / 60:.1f} min | {r['runs']} | {r['total_h']:.2f} h |")
    lines.append(f"| **all** | | | | | {sum(r['runs'] for r in rows)} | **{total_h:.1f} h** |")
    if only:
        lines.append("\nOnly some of the profile's pairs were timed (`--only`): the total covers those.")
    elif not complete:
        untimed = sorted(all_pairs - set(per_step))
        lines.append("\nNot timed (the run ended first): " + ", ".join(f"{d}/{m}" for d, m in untimed)
                     + ". The total covers the pairs above.")
    text = "\n".join(lines) + "\n"
    write_text(out / f"{stem}.md", text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--profile", default="gpu")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per MLP or CNN bank (default 20)")
    ap.add_argument("--lr-steps", type=int, default=128,
                    help="timed steps per LR bank (default 128: whole blocks of the sampler's 32 and the noise's 64 "
                         "pre-drawn steps, which a short LR bank would otherwise pay for in full)")
    ap.add_argument("--workers", type=int, default=None, help="worker processes per bank (default: the profile's)")
    ap.add_argument("--models", type=int, default=None, help="models per bank (default: the profile's 2R)")
    ap.add_argument("--only", nargs="*", default=None, help="only these datasets (a quick check)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks"))
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_timing: no CUDA device visible (use --device cpu to time this CPU)", file=sys.stderr)
        return 2
    p = profile_params(args.profile)
    M = args.models or 2 * p.audit.R
    workers = args.workers or p.compute.workers
    B, E = p.train.batch_size, p.train.epochs
    pairs = list(dict.fromkeys((r.dataset, r.model) for r in p.runs.values()))
    if args.only:
        pairs = [pr for pr in pairs if pr[0] in args.only]
    missing = sorted({d for d, _ in pairs} - set(SHAPES))
    if missing:
        raise SystemExit(f"gpu_timing: no shape for {missing}: add them to SHAPES")
    torch.set_num_threads(p.train.threads if args.device.startswith("cuda") else torch.get_num_threads())
    env = {"device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else platform.processor() or
           platform.machine(), "torch": torch.__version__, "threads": torch.get_num_threads(), "profile": args.profile,
           "models": M, "workers": workers, "batch_size": B, "epochs": E, "steps_timed": args.steps,
           "lr_steps_timed": args.lr_steps}
    print(json.dumps(env), flush=True)
    bank_seconds(pairs[0][0], pairs[0][1], M=2, steps=1, batch_size=B, device=args.device, workers=1,
                 hidden=p.train.hidden)  # warm-up: kernels, allocator, the device context
    cmd = " ".join(["python benchmarks/gpu_timing.py", *(argv if argv is not None else sys.argv[1:])])
    per_step = {}
    for d, m in pairs:
        per_step[(d, m)] = seconds_per_step(d, m, M=M, steps=args.lr_steps if m == "lr" else args.steps,
                                            batch_size=B, device=args.device, workers=workers, hidden=p.train.hidden)
        print(json.dumps({"dataset": d, "model": m, "per_step_s": round(per_step[(d, m)], 4)}), flush=True)
        # written after every pair: a lease that ends mid-run keeps the pairs already timed
        text = write_report(p, env, per_step, out=Path(args.out), stem="gpu_timing" if args.device.startswith("cuda")
                            else "cpu_timing", cmd=cmd, only=bool(args.only))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
