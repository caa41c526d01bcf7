"""The ``plan`` stage: each run's effective settings, after every default and override, one JSON file per run.

``results/plan/train/<run>.json`` holds what determines a run's trained bank (the TrainSpec after
``train.overrides``, the derived seeds, the design, the PA-LOOA settings when the run has one) and
``results/plan/attack/<run>.json`` what determines its attacks and statistics. The train and attack stages depend
on their own file, not on whole params.yaml sections, so changing a key reruns exactly the runs whose effective
value changes: ``train.lr`` reruns nothing while every dataset overrides it, ``audit.n_perm`` no training.
Execution knobs (``train.threads``, ``train.device``, ``audit.eval_batch``) are not in any plan.

Loading params.yaml also checks the generated runs.yaml (``runs``/``designs``) against ``grid`` and ``sweep``: a
stale one (e.g. after ``dvc exp run -S grid...`` without regenerating) fails this stage loudly.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ..atomic import atomic_dir
from ..config import ConfigError, Params, design_key
from ..rules import get as get_rule
from ..seeding import derive_seed

__all__ = ["attack_plan", "main", "train_plan", "write_plans"]

# The fields of the engine's TrainSpec that every rule takes from train (or its per-run override).
_SPEC_FROM_TRAIN = ("epochs", "batch_size", "lr", "clip")


def train_plan(params: Params, name: str) -> dict[str, object]:
    """The effective training settings of run ``name`` (JSON-serialisable; keys in a fixed order)."""
    run = params.runs[name]
    t = params.train
    layers = [t.overrides.get(f"{run.dataset}-{run.model}-{run.algorithm}"), t.overrides.get(f"{run.dataset}-{run.model}")]

    def override(key: str, default):
        """The algorithm's own override, else the dataset-model one, else ``default``."""
        return next((getattr(o, key) for o in layers if o is not None and getattr(o, key) is not None), default)

    pick = {k: override(k, getattr(t, k)) for k in _SPEC_FROM_TRAIN}
    if run.lr is not None:  # an operating point of the grid (the frontier profile) wins over every override
        pick["lr"] = run.lr
        if run.clip is not None:
            pick["clip"] = run.clip
    rule = get_rule(run.algorithm)
    spec = {"algorithm": run.algorithm, "model": run.model, **pick}
    optimizer = override("optimizer", t.optimizer)
    if optimizer != "sgd":  # named only when set: every plan (and claims summary hash) from before stands
        spec["optimizer"] = optimizer
    if run.model == "mlp":
        spec["hidden"] = t.hidden
    if not rule.uses_clip:
        if run.clip is not None:
            raise ConfigError(f"grid points of {name}: clip {run.clip:g} is set, but {run.algorithm} uses no fixed "
                              "clip bound (leave clip out of its points)")
        spec.pop("clip")  # used: the fixed bound, the rules' C0, Global-Adapt's C, AdaClip's initial C
    if rule.private:
        spec.update(target_epsilon=run.epsilon, delta=t.delta, accountant=t.accountant)
    spec.update(rule.plan_fields(t, run, override))  # the rule's own settings, as the engine's TrainSpec fields
    looa = None
    if name in params.audit.looa.runs:
        la = params.audit.looa
        looa = {"L": la.L, "R": la.R, "design_seed": derive_seed(params.seed, "looa", name),
                "bank_seed": derive_seed(params.seed, "looa-bank", name)}
    return {"run": name, "dataset": run.dataset, "design": design_key(run.dataset, run.seed), "spec": spec,
            "bank_seed": derive_seed(params.seed, "bank", run.dataset, run.model, run.seed), "looa": looa}


def attack_plan(params: Params, name: str) -> dict[str, object]:
    """The effective attack and statistics settings of run ``name``."""
    a = params.audit
    return {"run": name, "design": design_key(params.runs[name].dataset, params.runs[name].seed),
            "stats_seed": derive_seed(params.seed, "stats", name), "n_perm": a.n_perm,
            "n_null": a.n_null, "alpha": a.alpha, "looa": name in a.looa.runs}


def _dump(obj: dict) -> str:
    return json.dumps(obj, indent=1, sort_keys=False) + "\n"


def write_plans(params: Params, out: str | os.PathLike) -> Path:
    """Write every run's train and attack plan under ``out`` (atomically, as one directory)."""
    out = Path(out)
    with atomic_dir(out) as tmp:
        for kind, fn in (("train", train_plan), ("attack", attack_plan)):
            (tmp / kind).mkdir()
            for name in params.runs:
                (tmp / kind / f"{name}.json").write_text(_dump(fn(params, name)))
    return out


def _seconds(path: Path) -> float | None:
    """The stage seconds a timings file records (the sum of its ``*_s`` entries), None without one."""
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    vals = [v for k, v in d.items() if k.endswith("_s") and isinstance(v, (int, float))]
    return float(sum(vals)) if vals else None


def rerun_estimate(params: Params) -> dict:
    """What ``dvc repro`` will rerun after a params edit, read off the plans before it runs: each run whose train
    or attack plan under results/plan differs from the one ``params`` gives (a train rerun also reruns its attack,
    which reads the bank), with the seconds its stages last took (results/timings); a new run without a timing is
    estimated from a run of the same dataset, model and algorithm (at the same ε where one has a timing).
    ``reruns``: [(run, parts, seconds or None, estimated from)]; ``removed``: planned runs no longer in params;
    ``planned``: False when results/plan has no plans yet (a fresh checkout)."""
    plan_dir, timings = params.resolve("results/plan"), params.resolve("results/timings")
    known = {f.stem for f in (plan_dir / "train").glob("*.json")}
    out: dict = {"planned": bool(known), "reruns": [], "total_runs": len(params.runs),
                 "removed": sorted(known - set(params.runs))}

    def run_seconds(name: str, parts: list[str]) -> float | None:
        vals = [_seconds(timings / f"{k}-{name}.json") for k in parts]
        return None if any(v is None for v in vals) else sum(vals)

    for name in params.runs:
        if name in known:
            parts = [kind for kind, fn in (("train", train_plan), ("attack", attack_plan))
                     if not (plan_dir / kind / f"{name}.json").is_file()
                     or (plan_dir / kind / f"{name}.json").read_text() != _dump(fn(params, name))]
        else:
            parts = ["train", "attack"]
        if parts == ["train"]:
            parts.append("attack")
        if not parts:
            continue
        secs, source = run_seconds(name, parts), None
        if secs is None:  # a new run: the timing of a run like it, at the same ε first
            r = params.runs[name]
            like = [o for o, v in params.runs.items() if o != name
                    and (v.dataset, v.model, v.algorithm) == (r.dataset, r.model, r.algorithm)]
            like.sort(key=lambda o: params.runs[o].epsilon != r.epsilon)
            for other in like:
                secs = run_seconds(other, parts)
                if secs is not None:
                    source = other
                    break
        out["reruns"].append((name, parts, secs, source))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fairdp plan", description=__doc__)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default=None, help="default: results/plan beside params.yaml")
    args = ap.parse_args(argv)
    from ..rules import load_checked

    params = load_checked(args.params)
    out = write_plans(params, args.out or params.resolve("results/plan"))
    print(f"{out}: {len(params.runs)} runs planned")
    return 0


if __name__ == "__main__":
    import sys

    from . import stage_main

    sys.exit(stage_main("plan", main))
