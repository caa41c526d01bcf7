"""The ``synth`` stage: train on synthetic, test on real, for one dataset (``results/synth/<dataset>/``).

For every seed and ε of ``synth``: DPDSyn (fairdp_core.synth.dpdsyn), DP-SGD on the real pool (the engine, LR) and
the smartnoise baselines' tables (written by ``synth_baseline@<dataset>`` in its own venv) each give a downstream
classifier (trained without noise on the synthetic table; DP-SGD's is the model itself), evaluated on the real
test split overall and per group. Per seed, the two upper bounds: DPDSyn without noise (σ = 0, no ε) and the
classifier trained on the real pool. Writes atomically ``utility.csv`` (method, ε, seed, group: accuracy, AUC,
F1), ``fidelity.csv`` (per synthetic table: TV of 1-/2-way marginals, correlation gap), ``accounting.csv`` (per
DP release: σ, q, T, δ, accountant, ε spent) and ``summary.json``; wall times in ``results/timings/synth-<dataset>.json``
(outside the tracked outputs, so that a rerun leaves them byte-identical). DP-CGAN (fairdp_core.synth.dpgan) is
the DP GAN at the stated ε; smartnoise's PATE-CTGAN and DP-CTGAN are at a nominal ε only.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ..atomic import atomic_dir
from ..config import Params, load_params
from ..data.base import GroupedData, load
from ..seeding import derive_seed
from . import jsonable, write_timings

__all__ = ["dpcgan_spec", "dpdsyn_spec", "main", "run_synth"]


def dpdsyn_spec(params: Params, *, epsilon: float | None):
    """DPDSyn's spec from ``synth.dpdsyn`` at ``epsilon`` (None: the non-private upper bound, σ = 0)."""
    from ..synth.dpdsyn import DPDSynSpec

    c = params.synth.dpdsyn
    return DPDSynSpec(**c.model_dump(), target_epsilon=epsilon, noise_multiplier=None if epsilon else 0.0,
                      delta=params.train.delta, accountant=params.synth.accountant)


def dpcgan_spec(params: Params, *, epsilon: float):
    """DP-CGAN's spec from ``synth.dpcgan`` at ``epsilon``, with DPDSyn's δ and accountant."""
    from ..synth.dpgan import DPCGANSpec

    return DPCGANSpec(**params.synth.dpcgan.model_dump(), target_epsilon=epsilon, delta=params.train.delta,
                      accountant=params.synth.accountant)


def _dpsgd_proba(params: Params, data: GroupedData, X: np.ndarray, y: np.ndarray, g: np.ndarray, *,
                 epsilon: float, seed: int, membership: np.ndarray | None = None):
    """DP-SGD (the engine) on the real pool at ``epsilon``: (test probabilities [M, n_test, C], bank)."""
    import torch

    from ..engine import TrainSpec, train_bank

    c = params.synth.dpsgd
    spec = TrainSpec(algorithm="dpsgd", model="lr", epochs=c.epochs, batch_size=c.batch_size, lr=c.lr, clip=c.clip,
                     target_epsilon=epsilon, delta=params.train.delta, accountant=params.synth.accountant)
    mem = np.ones((1, len(y)), bool) if membership is None else membership
    bank = train_bank(X, y, g, mem, spec, n_classes=data.n_classes, n_groups=data.n_groups, seed=seed,
                      progress=False)
    _, logits = bank.evaluate(data.test.X, data.test.y)
    return torch.softmax(torch.as_tensor(logits), -1).numpy().astype(np.float64), bank


def run_synth(params: Params, dataset: str, out: str | os.PathLike) -> tuple[dict, dict[str, float]]:
    """Every method, ε and seed of ``synth`` on ``dataset``; writes ``out``. Returns (summary, timings)."""
    import torch

    from ..synth.dpdsyn import sample_table, train_dpdsyn
    from ..synth.dpgan import train_dpcgan
    from ..synth.evaluate import fidelity, fit_classifier, predict_proba, utility
    from ..synth.layout import Layout

    s = params.synth
    data = load(params.resolve(params.data.prepared_dir) / dataset)
    layout = Layout.from_data(data)
    tr, te = data.train, data.test
    base_dir = params.resolve("results/synth_baseline") / dataset
    util, fid, acc_rows, timings, refusals = [], [], [], {}, []
    down = s.downstream
    sn_path = params.resolve("results/timings") / f"synth_baseline-{dataset}.json"
    sn_all = json.loads(sn_path.read_text()) if sn_path.is_file() else {}
    sn_timings = {m: sn_all for m in ("mst", "patectgan", "dpctgan")}

    def classify(X, y, seed_labels):
        return fit_classifier(X, y, n_classes=data.n_classes, model=down.model, epochs=down.epochs, lr=down.lr,
                              batch_size=down.batch_size, seed=derive_seed(params.seed, "synth", "downstream",
                                                                            *seed_labels))

    def record(method, eps, seed, proba, table=None, seconds=None):
        for r in utility(proba, te.y, te.group, data.group_names):
            util.append({"dataset": dataset, "method": method, "epsilon": eps, "seed": seed, **r})
        if table is not None:
            fid.append({"dataset": dataset, "method": method, "epsilon": eps, "seed": seed,
                        **fidelity(tr.X, tr.y, table[0], table[1], layout, bins=s.bins)})
        if seconds is not None:
            timings[f"{method}-e{eps}-s{seed}"] = seconds

    for seed in range(s.seeds):
        t0 = time.perf_counter()
        record("real", None, seed, predict_proba(classify(tr.X, tr.y, ("real", seed)), te.X),
               seconds=time.perf_counter() - t0)
        runs = [("dpdsyn_nonprivate", None)] + [(m, e) for e in s.epsilons for m in s.methods]
        for method, eps in runs:
            torch.set_num_threads(params.train.threads)
            t0 = time.perf_counter()
            sseed = derive_seed(params.seed, "synth", dataset, method, -1.0 if eps is None else float(eps), seed)
            if method.startswith("dpdsyn") or method == "dpcgan":
                res = train_dpcgan(tr.X, tr.y, layout, dpcgan_spec(params, epsilon=eps), n_classes=data.n_classes,
                                   seed=sseed) if method == "dpcgan" else train_dpdsyn(
                    tr.X, tr.y, layout, dpdsyn_spec(params, epsilon=eps), n_classes=data.n_classes, seed=sseed)
                table = sample_table(res, s.n_synth, seed=sseed)
                if eps is not None:
                    acc_rows.append({"dataset": dataset, "method": method, "epsilon_target": eps, "seed": seed,
                                     **{k: v for k, v in res.accounting.items() if k != "algorithm"}})
            elif method == "dpsgd":
                proba, bank = _dpsgd_proba(params, data, tr.X, tr.y, tr.group, epsilon=eps, seed=sseed)
                a = bank.accounting[0]
                acc_rows.append({"dataset": dataset, "method": method, "epsilon_target": eps, "seed": seed,
                                 "sigma": a.sigma_g, "sigma_label": None, "clip": params.synth.dpsgd.clip,
                                 "sample_rate": a.sample_rate, "steps": a.steps, "delta": a.delta,
                                 "accountant": a.accountant, "sampling": a.sampling, "epsilon": a.epsilon,
                                 "target_epsilon": eps, "mechanisms": "DP-SGD: T Poisson-subsampled Gaussian steps"})
                record(method, eps, seed, proba[0], seconds=time.perf_counter() - t0)
                continue
            else:  # a smartnoise baseline's table
                key = f"{method}-e{eps:g}-s{seed}".replace(".", "p")
                path = base_dir / f"{key}.npz"
                refused = json.loads((base_dir / "refused.json").read_text()) if (base_dir / "refused.json"
                                                                                  ).is_file() else {}
                if key in refused:
                    refusals.append({"method": method, "epsilon": eps, "seed": seed, "reason": refused[key]})
                    continue
                if not path.is_file():
                    raise FileNotFoundError(f"{path} missing: run `make synth-venv` and the synth_baseline stage")
                with np.load(path) as z:
                    table = (z["X"], z["y"])
                acc_rows.append({"dataset": dataset, "method": method, "epsilon_target": eps, "seed": seed,
                                 "epsilon": eps, "delta": params.train.delta, "accountant": "smartnoise (own)",
                                 "mechanisms": f"smartnoise-synth {method}, its own accounting at (ε, δ)"})
            clf = classify(*table, (method, eps, seed))
            seconds = time.perf_counter() - t0
            if method in sn_timings:  # a smartnoise table: its fit and sample, measured in its own stage
                seconds = seconds + (sn_timings[method].get(key) or 0.0)
            record(method, eps, seed, predict_proba(clf, te.X), table, seconds)
    util_df, fid_df = pd.DataFrame(util), pd.DataFrame(fid)
    summary = {"dataset": dataset, "n_train": len(tr), "n_test": len(te), "group_names": list(data.group_names),
               "majority_rate": float(max(np.mean(te.y == k) for k in range(data.n_classes))),
               "methods": list(s.methods), "epsilons": list(s.epsilons), "seeds": s.seeds, "n_synth": s.n_synth,
               "downstream": down.model_dump(), "dpdsyn": s.dpdsyn.model_dump(), "dpcgan": s.dpcgan.model_dump(),
               "dpsgd": s.dpsgd.model_dump(),
               "refused": refusals}
    with atomic_dir(out) as tmp:
        util_df.to_csv(tmp / "utility.csv", index=False)
        fid_df.to_csv(tmp / "fidelity.csv", index=False)
        pd.DataFrame(acc_rows).to_csv(tmp / "accounting.csv", index=False)
        (tmp / "summary.json").write_text(json.dumps(jsonable(summary), indent=1) + "\n")
    return summary, timings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fairdp synth", description=__doc__)
    ap.add_argument("dataset", help="one of params.yaml's synth.datasets")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default=None, help="default: results/synth/<dataset>")
    args = ap.parse_args(argv)
    params = load_params(args.params)
    if args.dataset not in params.synth.datasets:
        raise KeyError(f"{args.dataset!r} is not in synth.datasets ({', '.join(params.synth.datasets)})")
    import torch

    torch.set_num_threads(params.train.threads)
    out = Path(args.out or params.resolve("results/synth") / args.dataset)
    summary, timings = run_synth(params, args.dataset, out)
    write_timings(params, f"synth-{args.dataset}", timings)
    util = pd.read_csv(out / "utility.csv")
    allg = util[util.group == "all"].groupby(["method", "epsilon"], dropna=False)["accuracy"].mean().round(4)
    print(json.dumps({"dataset": args.dataset, "accuracy": {f"{m}@{e}": v for (m, e), v in allg.items()}}))
    return 0


if __name__ == "__main__":
    import sys

    from . import reexec_with_malloc_env, stage_main

    reexec_with_malloc_env("fairdp_core.stages.synth", sys.argv[1:])
    sys.exit(stage_main("synth", main))
