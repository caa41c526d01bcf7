"""Choosing lr, epochs and clip per dataset and model on a validation split: tuning OUTSIDE ε.

Two designs. ``--validation train`` (the default): the prepared training split is cut once (seeded) into a fitting
part (80%) and a validation part (20%); the test split and the audit are never looked at. ``--validation test``,
for designs that audit the whole training split (m = n): each model trains as an audited model of the run does (on
the records outside the audit set and its own stratified half of it), and is scored on a seeded part of the TEST
split (half, by default); ``rest_accuracy`` is on the rest of the test split, which the choice never saw. The study's
runs report accuracy on the whole test split, so a cell tuned this way reports an accuracy that the choice looked at
in part: its reports say so (docs/claims.md).

For every setting of the grid, a bank of ``M`` models per algorithm and ε is scored: accuracy, balanced accuracy and
the largest predicted-class share (the degenerate-model check, :func:`~fairdp_core.audit.verdicts.is_degenerate`:
≥ 0.99, or balanced accuracy below 1/K + 0.02). The choice depends on private data and is not charged to any ε;
reports that use it say so (docs/study.md, 'Tuning outside ε').

    fairdp tune --dataset bank --model lr --lr 0.5 2 5 --epochs 5 20 --out reports/tuning/bank-lr.json
    fairdp tune --run compas-lr-dpsgd-e10-s0 --lr 0.1 0.2 0.5 --validation test --models 8
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np

from ..atomic import atomic_path

__all__ = ["main", "validation_sweep"]


def validation_sweep(data, model: str, *, grid: dict[str, list], algorithms: list[str], epsilons: list[float],
                     base: dict, seed: int, M: int = 2, rule_fields: dict[str, dict] | None = None,
                     val_fraction: float = 0.2, validation: str = "train",
                     m: int | None = None, min_per_group: int = 1, progress: bool = True) -> list[dict]:
    """One row per (setting, algorithm, ε): validation accuracy, balanced accuracy, top predicted-class share.

    ``data``: prepared GroupedData; ``grid``: TrainSpec field -> values (their product is swept); ``base``: the
    TrainSpec fields every run shares (e.g. batch_size, delta); ``rule_fields``: per algorithm, its rule's own
    fields (each rule at its own settings, never another rule's).

    ``validation="train"``: every model fits the same ``1 - val_fraction`` of the training split and is scored on the
    rest of it. ``validation="test"``: each model trains as an audited model does, on the records outside an audit
    set of ``m`` records (default: all of them, the m = n design; at least ``min_per_group`` per group) and its own
    group-stratified half of it (so q, T and σ are the audited runs'), is scored on a seeded ``val_fraction`` of the
    test split, and the rows also give accuracy on the rest of the test split (``rest_accuracy``), which the choice
    never looked at."""
    from tqdm.auto import tqdm

    from ..audit.verdicts import is_degenerate
    from ..engine import TrainSpec, train_bank
    from ..engine.spec import KEY_DEFAULTS, stored_fields

    if validation not in ("train", "test"):
        raise ValueError(f"validation must be 'train' or 'test', not {validation!r}")
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction}")
    tr = data.train
    rng = np.random.default_rng(seed)
    rest = None
    if validation == "train":
        n = len(tr.y)
        val = np.zeros(n, bool)
        val[rng.permutation(n)[: int(round(val_fraction * n))]] = True
        fit_idx = np.flatnonzero(~val)
        X, y, g = tr.X[fit_idx], tr.y[fit_idx], tr.group[fit_idx]
        Xv, yv = tr.X[val], tr.y[val]
        membership = np.ones((M, len(y)), bool)
    else:
        from ..audit.design import audit_design

        te = data.test
        val = np.zeros(len(te.y), bool)
        val[rng.permutation(len(te.y))[: int(round(val_fraction * len(te.y)))]] = True
        X, y, g = tr.X, tr.y, tr.group
        Xv, yv = te.X[val], te.y[val]
        rest = te.X[~val], te.y[~val]
        design = audit_design(g, m=len(y) if m is None else m, R=(M + 1) // 2, min_per_group=min_per_group, rng=rng)
        membership = design.training_membership()[:M]
    keys = list(grid)
    combos = list(itertools.product(*(grid[k] for k in keys)))

    def applies(key: str, alg: str) -> bool:  # a rule setting swept only for the rules that have it
        return key not in KEY_DEFAULTS or key in stored_fields(alg)

    jobs = [(c, a, e) for c in combos for a in algorithms
            if all(applies(k, a) or v == grid[k][0] for k, v in zip(keys, c))  # one run where the key is not a's
            for e in ([None] if a == "sgd" else epsilons)]
    rows = []
    for combo, alg, eps in tqdm(jobs, desc=f"tune {model}", disable=not progress):
        setting = {k: v for k, v in zip(keys, combo) if applies(k, alg)}
        own = (rule_fields or {}).get(alg, {})
        spec = TrainSpec(algorithm=alg, model=model, target_epsilon=eps, **{**base, **own, **setting})
        bank = train_bank(X, y, g, membership, spec, n_classes=data.n_classes,
                          n_groups=data.n_groups, seed=seed, progress=False)
        pred = bank.evaluate(Xv, yv)[1].argmax(-1)  # [M, n_val]
        classes = [c for c in range(data.n_classes) if (yv == c).any()]
        balanced = np.mean([(pred[:, yv == c] == c).mean(1) for c in classes], axis=0)
        share = max(float((pred == c).mean()) for c in range(data.n_classes))
        rows.append({**setting, "algorithm": alg, "epsilon": eps, "val_accuracy": float((pred == yv).mean()),
                     "val_balanced_accuracy": float(balanced.mean()), "top_pred_share": share,
                     "degenerate": is_degenerate(share, float(balanced.mean()), data.n_classes)})
        if rest is not None:
            rows[-1]["rest_accuracy"] = float((bank.evaluate(*rest)[1].argmax(-1) == rest[1]).mean())
    return rows


def _num(s: str):
    f = float(s)
    return int(f) if f.is_integer() and "." not in s and "e" not in s.lower() else f


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fairdp tune", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--dataset", default=None, help="required unless --run is given")
    ap.add_argument("--run", default=None,
                    help="a run of the params' profile: its planned spec (algorithm, ε, model, clip, epochs, the "
                         "rule's settings) is the base, and only the swept keys change")
    ap.add_argument("--model", default="lr")
    ap.add_argument("--algorithms", nargs="+", default=["sgd", "dpsgd", "dpsgd_s"])
    ap.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 10.0])
    ap.add_argument("--lr", nargs="+", default=None, help="values to sweep (default: train.lr)")
    ap.add_argument("--epochs", nargs="+", default=None)
    ap.add_argument("--clip", nargs="+", default=None)
    ap.add_argument("--gamma", nargs="+", default=None,
                    help="the rule's target quantile (DP-SGD-S's; with --run, the run's rule's own γ)")
    ap.add_argument("--models", type=int, default=2, help="models per bank (M)")
    ap.add_argument("--validation", choices=("train", "test"), default="train",
                    help="train: fit 80%% of the training split, score the rest; test: each model trains as the "
                         "profile's audited models do (outside the audit set and on its own stratified half of it), "
                         "scored on half the test split, accuracy on the other half reported")
    ap.add_argument("--val-fraction", type=float, default=None,
                    help="share of the split scored for the choice (default 0.2 of train, 0.5 of test)")
    ap.add_argument("--out", default=None,
                    help="JSON file (default: reports/tuning/<run>.json with --run, else <dataset>-<model>.json)")
    args = ap.parse_args(argv)

    import torch

    from ..config import ConfigError, load_params
    from ..data import load

    params = load_params(args.params)
    t = params.train
    torch.set_num_threads(t.threads)
    grid = {k: [_num(v) for v in getattr(args, k)] for k in ("lr", "epochs", "clip", "gamma")
            if getattr(args, k) is not None}
    if args.run is not None:
        from ..stages.plan import train_plan

        if args.run not in params.runs:
            raise ConfigError(f"--run: no run {args.run!r} in {args.params} (profile {params.profile!r})")
        plan = train_plan(params, args.run)
        base = dict(plan["spec"])
        args.algorithms, args.model = [base.pop("algorithm")], base.pop("model")
        args.epsilons = [base.pop("target_epsilon", None)]
        if args.dataset not in (None, plan["dataset"]):
            raise ConfigError(f"--dataset {args.dataset!r}, but run {args.run!r} is on {plan['dataset']!r}")
        args.dataset = plan["dataset"]
    else:
        if args.dataset is None:
            raise ConfigError("fairdp tune: give --dataset (or --run)")
        base = {"batch_size": t.batch_size, "delta": t.delta, "accountant": t.accountant, "hidden": t.hidden,
                "lr": t.lr, "epochs": t.epochs, "clip": t.clip}
    # each rule at its own settings from params (train.<its config>): AdaClip's cap, Global-Adapt's Z, not DP-SGD-S's
    # constants under the same field names; with --run the run's plan already holds them
    from types import SimpleNamespace

    from ..rules import get as get_rule

    rule_fields = None if args.run is not None else {
        a: get_rule(a).plan_fields(t, SimpleNamespace(gamma=None, tau=None), lambda key, default: default)
        for a in args.algorithms}
    for k in grid:
        base.pop(k, None)
        for own in (rule_fields or {}).values():
            own.pop(k, None)
    val_fraction = args.val_fraction if args.val_fraction is not None else (0.2 if args.validation == "train" else 0.5)
    if not 0 < val_fraction < 1:
        raise ConfigError(f"--val-fraction must lie strictly between 0 and 1, got {val_fraction}")
    data = load(params.resolve(params.data.prepared_dir) / args.dataset)
    rows = validation_sweep(data, args.model, grid=grid, algorithms=args.algorithms, epsilons=args.epsilons,
                            base=base, rule_fields=rule_fields, seed=params.seed, M=args.models,
                            validation=args.validation,
                            val_fraction=val_fraction, m=params.audit.m_for(len(data.train.y)),
                            min_per_group=params.audit.min_per_group)
    stem = args.run or f"{args.dataset}-{args.model}"
    out = Path(args.out) if args.out else params.resolve("reports/tuning") / f"{stem}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    note = (f"tuning outside ε: chosen on a validation split of the training data ({val_fraction:.0%}, seeded); "
            "test split and audit untouched") if args.validation == "train" else (
        "tuning outside ε: each model trains as an audited model of the profile does (outside the audit set and on "
        f"a stratified half of it); chosen on a seeded {val_fraction:.0%} of the test split; rest_accuracy is on the "
        "rest of the test split, which the choice never saw")
    doc = {"dataset": args.dataset, "model": args.model, "run": args.run, "seed": params.seed, "base": base,
           "rule_fields": rule_fields, "grid": grid,
           "validation": args.validation, "note": note, "rows": rows}
    with atomic_path(out) as tmp:
        Path(tmp).write_text(json.dumps(doc, indent=1) + "\n")
    w = max(len(k) for k in grid) if grid else 0
    for r in rows:
        setting = " ".join(f"{k}={r.get(k, '—')}" for k in grid).ljust(w + 20)  # —: not a setting of the rule
        eps = "—" if r["epsilon"] is None else f"{r['epsilon']:g}"
        flag = "  DEGENERATE" if r["degenerate"] else ""
        print(f"{setting} {r['algorithm']:>20} ε={eps:>4}  acc {100 * r['val_accuracy']:.2f}%  balanced "
              f"{r['val_balanced_accuracy']:.3f}  top share {r['top_pred_share']:.3f}"
              + (f"  rest {100 * r['rest_accuracy']:.2f}%" if "rest_accuracy" in r else "") + flag)
    print(f"wrote {out}")
    return 0
