"""The ``beyond`` stages (issue 13): attribute inference and model inversion against the study's banks, and the
utility of DP-SGD on the DP-SGD material's MNIST CNN (``results/beyond/<part>/``).

    python -m fairdp_core.stages.beyond attribute   # runs of beyond.attribute.datasets × beyond.algorithms
    python -m fairdp_core.stages.beyond inversion   # image runs of beyond.inversion.datasets × beyond.algorithms
    python -m fairdp_core.stages.beyond utility     # each beyond.utility entry: non-private and DP-SGD, `seeds` models

Writes atomically. ``attribute``: ``groups.csv`` (per run and group: success on members and non-members, their
gap, with intervals), ``overall.csv`` (per run: success, base rate, balanced accuracy and advantage, the
member − non-member gap, and for the meta-classifier its label-only baseline). ``inversion``: ``reconstructions.csv``
(one row per model, class and restart: the evaluator's verdicts, distances, confidence), ``evaluators.json`` (their
held-out accuracy), ``examples.npz`` (model 0's reconstructions per run, for figures). ``utility``: ``utility.json``
(accuracy per seed, the accounting, wall time). Timings go to ``results/timings/beyond-<part>.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ..atomic import atomic_dir
from ..audit.design import AuditDesign
from ..beyond.attribute import (
    attribute_inference_summary,
    label_only_guesses,
    lowest_loss_guesses,
    meta_classifier_guesses,
)
from ..beyond.inversion import invert_classes
from ..config import Params, load_params
from ..data.base import GroupedData, load
from ..data.loaders import group_column
from ..engine import TrainSpec, bank_accounting, train_bank
from ..engine.trainer import TrainedBank
from ..seeding import derive_rng, derive_seed
from . import jsonable, read_plan, stage_main, write_timings

__all__ = ["PARTS", "attribute_run", "beyond_runs", "main", "run_attribute", "run_inversion", "run_utility",
           "utility_run"]

PARTS = ("attribute", "inversion", "utility")
PUBLIC_MAX = 5000  # public records the meta-classifier is fitted on (a stratified-at-random subset of the test split)


def beyond_runs(params: Params, datasets: list[str]) -> list[str]:
    """The runs of ``datasets`` whose algorithm is in ``beyond.algorithms``, in runs.yaml's order."""
    return [name for name, r in params.runs.items()
            if r.dataset in datasets and r.algorithm in params.beyond.algorithms]


def _run_info(params: Params, name: str) -> dict:
    r = params.runs[name]
    return {"run": name, "dataset": r.dataset, "model": r.model, "algorithm": r.algorithm, "epsilon": r.epsilon,
            "seed": r.seed}


def _attack_inputs(params: Params, name: str):
    plan = read_plan(params.resolve("results/plan/train") / f"{name}.json")
    data = load(params.resolve(params.data.prepared_dir) / plan["dataset"])
    design = AuditDesign.load(params.resolve("results/designs") / f"{plan['design']}.npz")
    bank = TrainedBank.load(params.resolve("results/train") / name / "bank.pt")
    return data, design, bank


def attribute_run(params: Params, name: str) -> tuple[pd.DataFrame, dict]:
    """Attribute inference of the group attribute on run ``name``'s bank, on its audit records."""
    data, design, bank = _attack_inputs(params, name)
    idx, eb = design.audit_idx, params.audit.eval_batch
    X, y, g = data.train.X[idx], data.train.y[idx], data.train.group[idx]
    column, vocab, value_groups = group_column(data)
    cols = [data.feature_names.index(f"{column}={v}") for v in vocab
            if f"{column}={v}" in data.feature_names]
    extra: dict[str, float] = {}
    if vocab and len(cols) == len(vocab):
        method = "lowest_loss"
        guess = lowest_loss_guesses(lambda Xv, yv: bank.evaluate(Xv, yv, batch_size=eb)[0], X, y, cols,
                                    value_groups, rng=derive_rng(params.seed, "attribute", name))
    else:
        method = "meta_classifier"
        rng = derive_rng(params.seed, "attribute-public", data.name)
        pub = np.sort(rng.permutation(len(data.test))[:PUBLIC_MAX])
        Xp, yp, gp = data.test.X[pub], data.test.y[pub], data.test.group[pub]
        _, public_logits = bank.evaluate(Xp, yp, batch_size=eb)
        _, target_logits = bank.evaluate(X, y, batch_size=eb)
        guess = meta_classifier_guesses(public_logits, yp, gp, target_logits, y, n_classes=data.n_classes,
                                        seed=derive_seed(params.seed, "attribute-meta", name))
        base = attribute_inference_summary(
            label_only_guesses(yp, gp, y, n_classes=data.n_classes, n_models=bank.n_models), design.membership, g,
            data.n_groups, group_names=data.group_names, alpha=params.audit.alpha)
        extra = {f"label_only_{k}": v for k, v in base.overall.items()
                 if k in ("success", "balanced", "advantage", "advantage_lo", "advantage_hi")}
    res = attribute_inference_summary(guess, design.membership, g, data.n_groups, group_names=data.group_names,
                                      alpha=params.audit.alpha)
    info = {**_run_info(params, name), "method": method, "attribute": data.group_attribute}
    table = res.table.assign(**info)
    return table, {**info, **res.overall, **extra}


def run_attribute(params: Params, out: Path, *, progress: bool = True) -> pd.DataFrame:
    from tqdm.auto import tqdm

    runs = beyond_runs(params, params.beyond.attribute.datasets)
    tables, overall = [], []
    for name in tqdm(runs, desc="attribute inference", disable=not progress):
        t, o = attribute_run(params, name)
        tables.append(t)
        overall.append(o)
    groups = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    with atomic_dir(out) as tmp:
        groups.to_csv(tmp / "groups.csv", index=False, float_format="%.6g")
        pd.DataFrame(overall).to_csv(tmp / "overall.csv", index=False, float_format="%.6g")
    return pd.DataFrame(overall)


# ----------------------------------------------------------------------------------------------------- inversion

def _evaluator(params: Params, data: GroupedData, target: str, dataset: str):
    """The dataset's CNN trained without privacy on 80% of the test split (disjoint from every attacked model's
    training pool) to predict ``target`` ('class' or 'group'); returns (bank of one model, held-out accuracy)."""
    inv = params.beyond.inversion
    rng = derive_rng(params.seed, "evaluator-split", dataset)
    perm = rng.permutation(len(data.test))
    cut = int(0.8 * len(perm))
    fit, check = np.sort(perm[:cut]), np.sort(perm[cut:])
    labels = data.test.y if target == "class" else data.test.group
    n_out = data.n_classes if target == "class" else data.n_groups
    spec = TrainSpec(algorithm="sgd", model="cnn", epochs=inv.evaluator_epochs, batch_size=params.train.batch_size,
                     lr=inv.evaluator_lr)
    bank = train_bank(data.test.X[fit], labels[fit], data.test.group[fit], np.ones((1, len(fit)), bool), spec,
                      n_classes=n_out, n_groups=data.n_groups, seed=derive_seed(params.seed, "evaluator", dataset,
                                                                                 target),
                      device=params.train.device, progress=False)
    acc = float(bank.accuracy(data.test.X[check], labels[check])[0])
    return bank, acc, len(fit), len(check)


def run_inversion(params: Params, out: Path, *, progress: bool = True) -> pd.DataFrame:
    """Model inversion of the first ``beyond.inversion.models`` models of every selected image run."""
    from tqdm.auto import tqdm

    inv = params.beyond.inversion
    runs = beyond_runs(params, inv.datasets)
    evaluators: dict[str, dict] = {}
    rows, examples = [], {}
    for name in tqdm(runs, desc="model inversion", disable=not progress):
        data, _, bank = _attack_inputs(params, name)
        ds = params.runs[name].dataset
        if ds not in evaluators:
            ev = {"class": _evaluator(params, data, "class", ds)}
            if data.group_attribute != "digit":  # MNIST's groups are its classes; elsewhere score the group too
                ev["group"] = _evaluator(params, data, "group", ds)
            means = np.stack([data.train.X[data.train.y == c].mean(0) for c in range(data.n_classes)])
            evaluators[ds] = {"ev": ev, "means": means}
        ev, means = evaluators[ds]["ev"], evaluators[ds]["means"]
        models = list(range(min(inv.models, bank.n_models)))
        res = invert_classes(bank.module(), bank.params, bank.input_shape, bank.n_classes, steps=inv.steps, lr=inv.lr,
                             tv=inv.tv, l2=inv.l2, restarts=inv.restarts, models=models,
                             seed=derive_seed(params.seed, "inversion", name))
        imgs = res.images  # [m, C, restarts, *shape]
        flat = imgs.reshape(-1, *bank.input_shape)
        _, class_logits = ev["class"][0].evaluate(flat, np.zeros(len(flat), np.int64))
        pred_class = class_logits[0].argmax(-1).reshape(imgs.shape[:3])
        pred_group = None
        if "group" in ev:
            _, group_logits = ev["group"][0].evaluate(flat, np.zeros(len(flat), np.int64))
            pred_group = group_logits[0].argmax(-1).reshape(imgs.shape[:3])
        d2 = ((imgs[:, :, :, None] - means[None, None, None]) ** 2).reshape(*imgs.shape[:3], len(means), -1).mean(-1)
        dist = np.sqrt(d2)  # [m, C, restarts, C]: RMS distance to each class mean
        for mi, m in enumerate(models):
            for c in range(bank.n_classes):
                for r in range(inv.restarts):
                    row = {**_run_info(params, name), "model_index": m, "pair": m // 2, "class": data.class_names[c],
                           "class_index": c, "restart": r, "evaluator_class": data.class_names[pred_class[mi, c, r]],
                           "success": bool(pred_class[mi, c, r] == c), "dist_own_mean": float(dist[mi, c, r, c]),
                           "nearest_mean_is_own": bool(dist[mi, c, r].argmin() == c),
                           "confidence": float(res.confidence[mi, c, r])}
                    if pred_group is not None:
                        row["evaluator_group"] = data.group_names[pred_group[mi, c, r]]
                    rows.append(row)
        examples[name] = imgs[0, :, 0]
    table = pd.DataFrame(rows)
    ev_info = {}
    for ds, e in evaluators.items():
        d = load(params.resolve(params.data.prepared_dir) / ds)
        ev_info[ds] = {t: {"heldout_accuracy": v[1], "n_fit": v[2], "n_check": v[3], "model": "cnn", "private": False,
                           "data": "80% of the test split (disjoint from every attacked model's training pool)",
                           "labels": list(d.class_names) if t == "class" else list(d.group_names)}
                       for t, v in e["ev"].items()}
        ev_info[ds]["train_group_share"] = dict(zip(d.group_names, (d.train.group_sizes(d.n_groups)
                                                                     / len(d.train)).tolist()))
        ev_info[ds]["train_class_share"] = dict(zip(d.class_names, (np.bincount(d.train.y, minlength=d.n_classes)
                                                                     / len(d.train)).tolist()))
    with atomic_dir(out) as tmp:
        table.to_csv(tmp / "reconstructions.csv", index=False, float_format="%.6g")
        (tmp / "evaluators.json").write_text(json.dumps(jsonable(ev_info), indent=1) + "\n")
        np.savez_compressed(tmp / "examples.npz", **{k: v.astype(np.float16) for k, v in examples.items()})
    return table


# ------------------------------------------------------------------------------------------------------- utility

def utility_run(params: Params, u, *, progress: bool = True) -> dict:
    """Non-private and DP-SGD (at ``u.epsilon``) training of ``u.model`` on ``u.dataset``'s whole training split,
    one bank of ``u.seeds`` independent models per algorithm; test accuracy per model, overall and per group."""
    data = load(params.resolve(params.data.prepared_dir) / u.dataset)
    n = len(data.train)
    info: dict = {"dataset": u.dataset, "model": u.model, "n_train": n, "n_test": len(data.test),
                  "epochs": u.epochs, "batch_size": u.batch_size, "lr": u.lr, "seeds": u.seeds, "algorithms": {}}
    for alg in ("sgd", "dpsgd"):
        dp = {"clip": u.clip, "target_epsilon": u.epsilon, "delta": params.train.delta,
              "accountant": params.train.accountant} if alg == "dpsgd" else {}
        spec = TrainSpec(algorithm=alg, model=u.model, epochs=u.epochs, batch_size=u.batch_size, lr=u.lr, **dp)
        t0 = time.perf_counter()
        bank = train_bank(data.train.X, data.train.y, data.train.group, np.ones((u.seeds, n), bool), spec,
                          n_classes=data.n_classes, n_groups=data.n_groups,
                          seed=derive_seed(params.seed, "utility", u.dataset, u.model),
                          device=params.train.device, progress=progress, desc=f"utility {u.dataset} {u.model} {alg}")
        seconds = time.perf_counter() - t0
        _, logits = bank.evaluate(data.test.X, data.test.y, batch_size=params.audit.eval_batch)
        pred = logits.argmax(-1)
        acc = (pred == data.test.y[None]).mean(1)
        by_group = {gname: (pred[:, data.test.group == k] == data.test.y[data.test.group == k][None]).mean(1)
                    for k, gname in enumerate(data.group_names) if (data.test.group == k).any()}
        info["algorithms"][alg] = {"accuracy": acc, "accuracy_by_group": by_group, "train_seconds": seconds,
                                   "accounting": bank_accounting(bank.accounting) if alg != "sgd" else None}
    return info


def run_utility(params: Params, out: Path, *, progress: bool = True) -> list[dict]:
    """Every ``beyond.utility`` entry (an empty list writes an empty file)."""
    infos = [utility_run(params, u, progress=progress) for u in params.beyond.utility]
    with atomic_dir(out) as tmp:
        (tmp / "utility.json").write_text(json.dumps(jsonable({"configs": infos}), indent=1) + "\n")
    return infos


def _main(argv: list[str]) -> int:
    from . import reexec_with_malloc_env

    reexec_with_malloc_env("fairdp_core.stages.beyond", argv)
    ap = argparse.ArgumentParser(prog="fairdp beyond", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=PARTS)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default=None, help="default: results/beyond/<part>")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    args = ap.parse_args(argv)
    params = load_params(args.params)
    import torch

    torch.set_num_threads(params.train.threads)
    out = Path(args.out or params.resolve("results/beyond") / args.part)
    t0 = time.perf_counter()
    {"attribute": run_attribute, "inversion": run_inversion, "utility": run_utility}[args.part](
        params, out, progress=not args.quiet)
    write_timings(params, f"beyond-{args.part}", {"seconds": time.perf_counter() - t0})
    print(f"fairdp beyond {args.part}: wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return stage_main("beyond", _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
