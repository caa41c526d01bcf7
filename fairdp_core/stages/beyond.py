"""The ``beyond`` stages (docs/study.md, 'Beyond membership'): attribute inference and model inversion against the
study's banks, and the utility of DP-SGD on the DP-SGD material's MNIST CNN (``results/beyond/<part>/``).

    python -m fairdp_core.stages.beyond attribute   # runs of beyond.attribute.datasets × beyond.algorithms
    python -m fairdp_core.stages.beyond inversion   # image runs of beyond.inversion.datasets × beyond.algorithms
    python -m fairdp_core.stages.beyond utility     # each beyond.utility entry: non-private and DP-SGD, `seeds` models
    python -m fairdp_core.stages.beyond inputs      # the plans and banks attribute and inversion read, by sha256

Writes atomically. ``attribute``: ``groups.csv`` (per run and group: success on members and non-members, their
gap, with intervals), ``overall.csv`` (per run: success, base rate, balanced accuracy and advantage, the
member − non-member gap, and for the meta-classifier its label-only baseline). ``inversion``: ``reconstructions.csv``
(one row per model, class and restart: the evaluator's verdicts, distances, confidence), ``evaluators.json`` (their
held-out accuracy), ``examples.npz`` (model 0's reconstructions per run, for figures). ``utility``: ``utility.json``
(accuracy per seed, the accounting, wall time). ``inputs``: ``attribute.json`` and ``inversion.json``, the sha256 of
every plan and bank file each of those parts reads; their stages depend on these instead of on all of results/plan
and results/train, so an edit that retrains other banks (a τ edit retrains DP-SGD-S's) reruns neither. Timings go
to ``results/timings/beyond-<part>.json``.
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
    imputation_guesses,
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

__all__ = ["PARTS", "attribute_method", "attribute_run", "beyond_runs", "main", "run_attribute", "run_inputs",
           "run_inversion", "run_utility", "utility_run"]

PARTS = ("attribute", "inversion", "utility", "inputs")
PUBLIC_MAX = 5000  # public records the meta-classifier and the baselines are fitted on (a random subset of the test split)


def beyond_runs(params: Params, datasets: list[str]) -> list[str]:
    """The runs of ``datasets`` whose algorithm is in ``beyond.algorithms``, in runs.yaml's order."""
    return [name for name, r in params.runs.items()
            if r.dataset in datasets and r.algorithm in params.beyond.algorithms]


def run_inputs(params: Params, out: Path, *, progress: bool = True) -> dict[str, dict]:
    """Per part (attribute, inversion), each run it reads: the sha256 of its plan and of every file of its bank."""
    from ..data.sources import sha256_file

    manifests = {}
    for part, datasets in (("attribute", params.beyond.attribute.datasets),
                           ("inversion", params.beyond.inversion.datasets)):
        runs = {}
        for name in beyond_runs(params, datasets):
            bank = params.resolve("results/train") / name
            runs[name] = {"plan": sha256_file(params.resolve("results/plan/train") / f"{name}.json"),
                          **{f"bank/{f.name}": sha256_file(f) for f in sorted(bank.iterdir()) if f.is_file()}}
        manifests[part] = runs
    with atomic_dir(out) as tmp:
        for part, runs in manifests.items():
            (tmp / f"{part}.json").write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n")
    return manifests


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


def attribute_method(data: GroupedData) -> tuple[str, list[int], np.ndarray]:
    """("lowest_loss", the attribute's one-hot columns, each value's group) when the group attribute is a model
    input; ("meta_classifier", [], []) when it is not (a ``group_as_feature: false`` variant)."""
    column, vocab, value_groups = group_column(data)
    cols = [data.feature_names.index(f"{column}={v}") for v in vocab if f"{column}={v}" in data.feature_names]
    if vocab and len(cols) == len(vocab):
        return "lowest_loss", cols, value_groups
    return "meta_classifier", [], np.zeros(0, np.int64)


def attribute_run(params: Params, name: str) -> tuple[pd.DataFrame, dict]:
    """Attribute inference of the group attribute on run ``name``'s bank, on its audit records, with the two
    baselines that use no model (the label alone; the other features and the label)."""
    data, design, bank = _attack_inputs(params, name)
    idx, eb = design.audit_idx, params.audit.eval_batch
    X, y, g = data.train.X[idx], data.train.y[idx], data.train.group[idx]
    method, cols, value_groups = attribute_method(data)
    rng = derive_rng(params.seed, "attribute-public", data.name)
    pub = np.sort(rng.permutation(len(data.test))[:PUBLIC_MAX])
    Xp, yp, gp = data.test.X[pub], data.test.y[pub], data.test.group[pub]
    if method == "lowest_loss":
        guess = lowest_loss_guesses(lambda Xv, yv: bank.evaluate(Xv, yv, batch_size=eb)[0], X, y, cols,
                                    value_groups, rng=derive_rng(params.seed, "attribute", name))
    else:
        _, public_logits = bank.evaluate(Xp, yp, batch_size=eb)
        _, target_logits = bank.evaluate(X, y, batch_size=eb)
        guess = meta_classifier_guesses(public_logits, yp, gp, target_logits, y, n_classes=data.n_classes,
                                        seed=derive_seed(params.seed, "attribute-meta", name))
    keep = np.setdiff1d(np.arange(X.shape[1]), cols)  # the other features (the attribute's columns out)
    baselines = {
        "label_only": label_only_guesses(yp, gp, y, n_classes=data.n_classes, n_models=bank.n_models,
                                         n_groups=data.n_groups),
        "imputation": imputation_guesses(Xp[:, keep], yp, gp, X[:, keep], y, n_classes=data.n_classes,
                                         n_models=bank.n_models, seed=derive_seed(params.seed, "imputation", name)),
    }
    extra: dict[str, float] = {}
    for key, b in baselines.items():
        base = attribute_inference_summary(b, design.membership, g, data.n_groups, group_names=data.group_names,
                                           alpha=params.audit.alpha)
        extra.update({f"{key}_{k}": v for k, v in base.overall.items() if k in ("success", "balanced")})
    res = attribute_inference_summary(guess, design.membership, g, data.n_groups, group_names=data.group_names,
                                      alpha=params.audit.alpha)
    info = {**_run_info(params, name), "method": method, "attribute": data.group_attribute,
            "model_invariant": bool((guess == guess[:1]).all())}
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

def _evaluator_data(params: Params, data: GroupedData, dataset: str):
    """(X, class labels, group labels, description, check) for the evaluators: they fit on, with
    ``beyond.inversion.evaluator_pool`` set for ``dataset``, the pool's training records that are NOT in the attacked
    models' training pool (matched by content), otherwise on 80% of the test split; ``check`` indexes the test
    records they are checked on (the whole split, or its other 20%). Either way disjoint from every attacked model's
    training data."""
    inv = params.beyond.inversion
    pool_name = inv.evaluator_pool.get(dataset)
    if pool_name is None:
        perm = derive_rng(params.seed, "evaluator-split", dataset).permutation(len(data.test))
        cut = int(0.8 * len(perm))
        fit = np.sort(perm[:cut])
        return (data.test.X[fit], data.test.y[fit], data.test.group[fit], "80% of the test split",
                np.sort(perm[cut:]))
    pool = load(params.resolve(params.data.prepared_dir) / pool_name)
    seen = {x.tobytes() for x in data.train.X}
    keep = np.array([x.tobytes() not in seen for x in pool.train.X])
    return (pool.train.X[keep], pool.train.y[keep], pool.train.group[keep],
            f"the {int(keep.sum()):,} training records of {pool_name} outside the attacked pool",
            np.arange(len(data.test)))


def _evaluator(params: Params, data: GroupedData, target: str, dataset: str, fit_data):
    """An evaluator trained without privacy on ``fit_data`` (:func:`_evaluator_data`) to predict ``target``
    ('class' or 'group'), checked on the test split (or its other 20%); returns (bank of one model, held-out accuracy,
    n fitted, n checked, its architecture)."""
    inv = params.beyond.inversion
    X, yc, yg, _, check = fit_data
    labels = yc if target == "class" else yg
    n_out = data.n_classes if target == "class" else data.n_groups
    model = inv.evaluator_model.get(dataset, "cnn")
    spec = TrainSpec(algorithm="sgd", model=model, epochs=inv.evaluator_epochs, batch_size=params.train.batch_size,
                     lr=inv.evaluator_lr)
    bank = train_bank(X, labels, yg, np.ones((1, len(labels)), bool), spec, n_classes=n_out, n_groups=data.n_groups,
                      seed=derive_seed(params.seed, "evaluator", dataset, target), device=params.train.device,
                      progress=False)
    held = data.test.y if target == "class" else data.test.group
    acc = float(bank.accuracy(data.test.X[check], held[check])[0])
    return bank, acc, len(labels), len(check), model


def _untrained_control(params: Params, data: GroupedData, dataset: str, model: str, n_models: int):
    """A bank of ``n_models`` untrained models (their initial weights) of the attacked architecture: the negative
    control of the inversion and its evaluator."""
    n = min(len(data.train), 64)
    spec = TrainSpec(algorithm="sgd", model=model, epochs=1e-9, batch_size=n, lr=1e-12)
    return train_bank(data.train.X[:n], data.train.y[:n], data.train.group[:n], np.ones((n_models, n), bool), spec,
                      n_classes=data.n_classes, n_groups=data.n_groups,
                      seed=derive_seed(params.seed, "inversion-control", dataset, model), progress=False)


def _invert_and_score(params: Params, name: str, info: dict, bank, data: GroupedData, ev: dict, means: np.ndarray,
                      models: list[int]) -> tuple[list[dict], np.ndarray]:
    inv = params.beyond.inversion
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
    rows = []
    for mi, m in enumerate(models):
        for c in range(bank.n_classes):
            for r in range(inv.restarts):
                row = {**info, "model_index": m, "pair": m // 2, "class": data.class_names[c], "class_index": c,
                       "restart": r, "evaluator_class": data.class_names[pred_class[mi, c, r]],
                       "success": bool(pred_class[mi, c, r] == c), "dist_own_mean": float(dist[mi, c, r, c]),
                       "dist_other_means": float(np.delete(dist[mi, c, r], c).mean()),
                       "nearest_mean_is_own": bool(dist[mi, c, r].argmin() == c),
                       "confidence": float(res.confidence[mi, c, r])}
                if pred_group is not None:
                    row["evaluator_group"] = data.group_names[pred_group[mi, c, r]]
                rows.append(row)
    return rows, imgs[0, :, 0]


def run_inversion(params: Params, out: Path, *, progress: bool = True) -> pd.DataFrame:
    """Model inversion of the first ``beyond.inversion.models`` models of every selected image run, and of as many
    untrained models of each attacked architecture (the negative control)."""
    from tqdm.auto import tqdm

    inv = params.beyond.inversion
    runs = beyond_runs(params, inv.datasets)
    evaluators: dict[str, dict] = {}
    rows, examples, controls = [], {}, set()
    for name in tqdm(runs, desc="model inversion", disable=not progress):
        data, _, bank = _attack_inputs(params, name)
        ds, model = params.runs[name].dataset, params.runs[name].model
        if ds not in evaluators:
            fit_data = _evaluator_data(params, data, ds)
            ev = {"class": _evaluator(params, data, "class", ds, fit_data)}
            if data.group_attribute != "digit":  # MNIST's groups are its classes; elsewhere score the group too
                ev["group"] = _evaluator(params, data, "group", ds, fit_data)
            means = np.stack([data.train.X[data.train.y == c].mean(0) for c in range(data.n_classes)])
            # a real record's distance to its class mean (test records), the scale for the reconstructions'
            ref = [float(np.sqrt(((data.test.X[data.test.y == c] - means[c]) ** 2).reshape(
                (data.test.y == c).sum(), -1).mean(1)).mean()) for c in range(data.n_classes)]
            evaluators[ds] = {"ev": ev, "means": means, "fit": fit_data[3], "ref": ref, "data": data}
        ev, means = evaluators[ds]["ev"], evaluators[ds]["means"]
        models = list(range(min(inv.models, bank.n_models)))
        r, ex = _invert_and_score(params, name, _run_info(params, name), bank, data, ev, means, models)
        rows += r
        examples[name] = ex
        if (ds, model) not in controls:  # the negative control: untrained models of this architecture
            controls.add((ds, model))
            ctrl = _untrained_control(params, data, ds, model, len(models))
            info = {"run": f"{ds}-{model}-untrained", "dataset": ds, "model": model, "algorithm": "untrained",
                    "epsilon": None, "seed": 0}
            r, ex = _invert_and_score(params, info["run"], info, ctrl, data, ev, means, list(range(len(models))))
            rows += r
            examples[info["run"]] = ex
    table = pd.DataFrame(rows)
    ev_info = {}
    for ds, e in evaluators.items():
        d = e["data"]  # the attacked dataset, as loaded for its first run
        ev_info[ds] = {t: {"heldout_accuracy": v[1], "n_fit": v[2], "n_check": v[3], "model": v[4], "private": False,
                           "data": e["fit"], "labels": list(d.class_names) if t == "class" else list(d.group_names)}
                       for t, v in e["ev"].items()}
        ev_info[ds]["reference_dist"] = dict(zip(d.class_names, e["ref"]))
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
        # wall time goes to results/timings (untracked), never into the output: a rerun writes the same bytes
        write_timings(params, f"beyond-utility-{u.dataset}-{u.model}-{alg}", {"train_s": seconds})
        info["algorithms"][alg] = {"accuracy": acc, "accuracy_by_group": by_group,
                                   "accounting": bank_accounting(bank.accounting) if alg != "sgd" else None}
    return info


def run_utility(params: Params, out: Path, *, progress: bool = True) -> list[dict]:
    """Every ``beyond.utility`` entry (an empty list writes an empty file)."""
    infos = [utility_run(params, u, progress=progress) for u in params.beyond.utility]
    with atomic_dir(out) as tmp:
        (tmp / "utility.json").write_text(json.dumps(jsonable({"configs": infos}), indent=1) + "\n")
    return infos


def store_utility(result: Path, dest: Path, *, params_path: str | Path, command: str) -> dict:
    """Write a utility run's ``utility.json`` to ``dest`` (e.g. reports/paper/beyond_utility.json, the stored
    paper-profile run the report shows beside its own profile's) with where it came from."""
    from ..atomic import write_text

    d = json.loads(Path(result).read_text())
    d["note"] = (f"stored from `{command}` (params {Path(params_path).name}, profile "
                 f"{load_params(params_path).profile}); rerun it the same way to refresh")
    write_text(dest, json.dumps(d, indent=1) + "\n")
    return d


def _main(argv: list[str]) -> int:
    from . import reexec_with_malloc_env

    reexec_with_malloc_env("fairdp_core.stages.beyond", argv)
    ap = argparse.ArgumentParser(prog="fairdp beyond", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=PARTS)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default=None, help="default: results/beyond/<part>")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    ap.add_argument("--store", default=None, help="utility only: also store the result there with its provenance "
                    "(the paper profile's run: reports/paper/beyond_utility.json)")
    args = ap.parse_args(argv)
    params = load_params(args.params)
    import torch

    torch.set_num_threads(params.train.threads)
    out = Path(args.out or params.resolve("results/beyond") / args.part)
    t0 = time.perf_counter()
    {"attribute": run_attribute, "inversion": run_inversion, "utility": run_utility, "inputs": run_inputs}[args.part](
        params, out, progress=not args.quiet)
    write_timings(params, f"beyond-{args.part}", {"seconds": time.perf_counter() - t0})
    if args.store and args.part == "utility":
        store_utility(out / "utility.json", Path(args.store), params_path=args.params,
                      command="python -m fairdp_core.stages.beyond " + " ".join(argv))
    print(f"fairdp beyond {args.part}: wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return stage_main("beyond", _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
