"""The ``train`` stage: train a run's bank of 2R models and write its signals (``results/train/<run>/``).

Reads ``results/plan/train/<run>.json`` (the effective settings), the prepared dataset and the audit design.
Writes atomically: ``bank.pt`` (the trained models, accounting per model), ``signals.npz`` (loss and logit-scaled
confidence [2R, m] on the audit records, test predictions [2R, n_test]), ``train.json`` (accuracy overall and per
group, the majority-class rate, the bank's accounting: ε as the maximum over its models, the range of q) and,
for a PA-LOOA run, ``looa.npz`` (its coupled bank's scores on the targets). Wall-clock timings go to
``results/timings/train-<run>.json``, outside every tracked output, so reruns are byte-identical.

Each bank is split over ``compute.workers`` worker processes (joblib/loky) or Ray tasks (``compute.backend: ray``,
``compute.ray_address``): an execution knob, like ``train.threads``, that no stage tracks; the sharded bank is the
single-process bank (:mod:`fairdp_core.engine.shard`, tests/test_shard.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # re-exec with the allocator settings BEFORE torch and the engine are imported: after
    from . import reexec_with_malloc_env  # them, a plain `dvc repro` paid the stage's imports twice (1.4 s a stage)

    reexec_with_malloc_env("fairdp_core.stages.train", sys.argv[1:])

import numpy as np

from ..atomic import atomic_dir
from ..audit.design import AuditDesign, looa_design
from ..audit.signals import logit_confidence
from ..config import Params, load_params
from ..data.base import GroupedData, load
from ..engine import ShardError, TrainSpec, bank_accounting, train_bank_sharded
from . import jsonable, read_plan, write_timings

__all__ = ["main", "run_train"]


def run_train(params: Params, name: str, out: str | os.PathLike, *, plan: dict, design_path: str | os.PathLike,
              progress: bool = True) -> dict:
    """Train run ``name`` as ``plan`` says and write its directory ``out``; returns ``train.json``'s content."""
    import torch

    torch.set_num_threads(params.train.threads)  # an execution knob: results do not depend on it (tested)
    data: GroupedData = load(params.resolve(params.data.prepared_dir) / plan["dataset"])
    design = AuditDesign.load(design_path)
    if design.n != len(data.train):
        raise ValueError(f"design {design_path} was drawn for n={design.n} records, the prepared {plan['dataset']} "
                         f"has {len(data.train)}: rerun the design stage")
    spec = TrainSpec(**plan["spec"])
    K, eval_batch = data.n_groups, params.audit.eval_batch
    timings: dict[str, float] = {}
    with atomic_dir(out) as tmp:
        t0 = time.perf_counter()
        bank = _train(params, data.train.X, data.train.y, data.train.group, design.training_membership(), spec,
                      n_classes=data.n_classes, n_groups=K, device=params.train.device, seed=plan["bank_seed"],
                      progress=progress, desc=name)
        timings["train_s"] = time.perf_counter() - t0
        timings["workers"] = _workers(params, spec)
        t0 = time.perf_counter()
        idx = design.audit_idx
        loss, logits = bank.evaluate(data.train.X[idx], data.train.y[idx], batch_size=eval_batch)
        phi = logit_confidence(logits, data.train.y[idx])
        _, test_logits = bank.evaluate(data.test.X, data.test.y, batch_size=eval_batch)
        test_pred = test_logits.argmax(-1).astype(np.int16)
        timings["signals_s"] = time.perf_counter() - t0
        bank.save(tmp / "bank.pt")
        np.savez(tmp / "signals.npz", loss=loss, phi=phi, test_pred=test_pred, audit_idx=idx)
        if plan["looa"] is not None:
            t0 = time.perf_counter()
            _train_looa(params, name, spec, plan["looa"], data, design, tmp / "looa.npz", progress)
            timings["looa_s"] = time.perf_counter() - t0

        acc = (test_pred == data.test.y[None]).mean(1)
        by_group = {data.group_names[k]: float((test_pred[:, data.test.group == k]
                                                == data.test.y[data.test.group == k][None]).mean()) for k in range(K)}
        counts = np.bincount(data.test.y, minlength=data.n_classes)
        present = [c for c in range(data.n_classes) if counts[c] > 0]
        balanced = np.mean([(test_pred[:, data.test.y == c] == c).mean(1) for c in present], axis=0)  # [M]
        pred_share = np.bincount(test_pred.ravel(), minlength=data.n_classes) / test_pred.size
        info = {
            "run": name, "plan": plan, "n_models": bank.n_models, "m": len(idx), "R": design.R,
            "n_train": len(data.train), "n_test": len(data.test), "group_names": list(data.group_names),
            "class_names": list(data.class_names),
            "accuracy": {"mean": float(acc.mean()), "sd": float(acc.std(ddof=1)) if len(acc) > 1 else None,
                         "by_group": by_group, "majority_class_rate": float(counts.max() / counts.sum()),
                         "largest_predicted_class_share": float(pred_share.max()),
                         "balanced": float(balanced.mean())},
            "accounting": bank_accounting(bank.accounting),  # ε: the max over the bank's models; q: its range
            "clipping": _clipping(bank, data.group_names),
        }
        (tmp / "train.json").write_text(json.dumps(jsonable(info), indent=1) + "\n")
    write_timings(params, f"train-{name}", timings)
    return info


def _sharded(params: Params, spec: TrainSpec) -> bool:
    """Whether a bank of ``spec`` is sharded: its model family is in ``compute.shard_models`` (None: every one)."""
    return params.compute.shard_models is None or spec.model in params.compute.shard_models


def _workers(params: Params, spec: TrainSpec) -> int:
    """How many shards a bank of ``spec`` is split into: ``compute.workers``, or 1 where it is not sharded."""
    return params.compute.workers if _sharded(params, spec) else 1


def _train(params: Params, *args, **kwargs):
    """``train_bank`` sharded as params.yaml's ``compute`` section says; an executor that cannot run (Ray missing or
    unreachable) is an error naming the keys and the file."""
    c = params.compute
    spec = args[4]  # args: X, y, group, membership, spec
    # a family that shard_models leaves out trains in this process, with loky or Ray alike
    executor = c.backend if _sharded(params, spec) else "serial"
    try:
        return train_bank_sharded(*args, workers=_workers(params, spec), executor=executor, ray_address=c.ray_address,
                                  threads=c.threads_per_worker, gpus_per_worker=c.gpus_per_worker, **kwargs)
    except ShardError as e:
        raise ShardError(f"{params.base_dir / 'params.yaml'}: compute (backend: {c.backend}, ray_address: "
                         f"{c.ray_address}, workers: {c.workers}): {e}") from e


def _clipping(bank, group_names) -> dict | None:
    """Per group: the fraction of its per-sample gradients that were clipped over training (pooled over the
    bank's models) and the final bound (mean over models). A diagnostic outside ε; None for SGD."""
    if not bank.clip_stats:
        return None
    clipped, seen = bank.clip_stats["clipped"].sum(0), bank.clip_stats["seen"].sum(0)
    bounds = bank.policy_state["bounds"].mean(0)
    return {name: {"clipped_fraction": float(clipped[k] / seen[k]) if seen[k] > 0 else None,
                   "final_bound": float(bounds[k])} for k, name in enumerate(group_names)}


def _train_looa(params, name, spec, la, data, design, path, progress) -> None:
    """PA-LOOA's coupled bank: for L stratified audit records, R pairs (D, D∖{z}) with shared streams; saves the
    targets, their groups and the pairs' scores s [2R, L] (−loss) and IN flags m [2R, L]."""
    rng = np.random.default_rng(la["design_seed"])
    ld = looa_design(data.train.group, L=la["L"], R=la["R"], min_per_group=1, rng=rng, candidates=design.audit_idx)
    targets = ld.targets
    n, M = len(data.train), len(ld.is_in)
    bank = _train(params, data.train.X, data.train.y, data.train.group, ld.membership, spec, n_classes=data.n_classes,
                  n_groups=data.n_groups, seed=la["bank_seed"], progress=progress, desc=f"{name} LOOA",
                  stream_ids=ld.stream_ids, sample_over=np.ones((M, n), dtype=bool), device=params.train.device)
    loss, _ = bank.evaluate(data.train.X[targets], data.train.y[targets])
    L = len(targets)
    s = np.stack([-loss[ld.target_of_row == t, t] for t in range(L)], axis=1)
    m = np.stack([ld.is_in[ld.target_of_row == t] for t in range(L)], axis=1)
    np.savez(path, targets=targets, group=data.train.group[targets], scores=s, is_in=m)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fairdp train", description=__doc__)
    ap.add_argument("name", help="a run of runs.yaml (generated from params.yaml's grid)")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default=None, help="default: results/train/<name>")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    params = load_params(args.params)
    if args.name not in params.runs:
        raise KeyError(f"run {args.name!r} is not in params.yaml runs (see `fairdp grid`)")
    plan = read_plan(params.resolve("results/plan/train") / f"{args.name}.json")
    out = Path(args.out or params.resolve("results/train") / args.name)
    design = params.resolve("results/designs") / f"{plan['design']}.npz"
    info = run_train(params, args.name, out, plan=plan, design_path=design, progress=not args.quiet)
    print(json.dumps({"run": args.name, "accuracy": round(info["accuracy"]["mean"], 4),
                      "epsilon": info["accounting"]["epsilon"]}))
    return 0


if __name__ == "__main__":
    from . import stage_main

    sys.exit(stage_main("train", main))
