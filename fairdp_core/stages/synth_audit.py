"""The ``synth_audit`` stage: group privacy of the synthetic route against DP-SGD (``results/synth_audit/<dataset>/``).

PA-ALOOA (docs/study.md, 'PA-ALOOA') on the downstream classifier: an audit design of m records and R rounds drawn
for this stage (stratified by group; rows 2r, 2r+1 complementary), then for each of the 2R membership rows a DPDSyn
synthesizer trained on that row's pool at ε, its released table, and the classifier trained on the table; the
signal is that classifier's loss on the audit records. The DP-SGD arm is the engine's bank of 2R models on the same
rows at the same (ε, δ). Both arms: the cross-fitted estimator (mean 0 with no leakage), GPR per group and Δ with
intervals over records × model pairs (by the audit's one entry point, :func:`fairdp_core.audit.run.audit`, as the
attack stage; importing it loads every attack module, so editing an attack reruns this stage too), and the minimal
detectable contrast at 80% power (2.8 × its standard error). The routes compared directly: DPDSyn − DP-SGD per group
and for the two-group contrast, with the paired interval (row r of both arms shares its pool). Writes
``summary.json`` and ``groups.csv``.
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
from ..audit.design import audit_design
from ..audit.inference import cross_fit_contributions, group_inference
from ..audit.run import audit
from ..audit.stats import gpr
from ..config import Params, load_params
from ..data.base import load
from ..seeding import derive_rng, derive_seed
from . import jsonable, write_timings
from .synth import _dpsgd_proba, dpdsyn_spec

__all__ = ["arm_statistics", "paired_difference", "main", "run_synth_audit"]


def arm_statistics(loss: np.ndarray, mem: np.ndarray, g: np.ndarray, names: list[str], *, alpha: float,
                   n_perm: int = 1000, stats_seed: int = 0) -> dict:
    """Cross-fitted PA-ALOOA on one arm's losses [2R, m] with membership [2R, m] and groups [m], by the audit's one
    entry point (:func:`fairdp_core.audit.run.audit`, that attack alone, no low-FPR view): GPR per group with
    intervals, Δ (pp) with its simultaneous interval, the two-group contrast and its minimal detectable size at 80%
    power (pp). The audit's permutation test (``n_perm`` permutations from ``stats_seed``) is not reported here."""
    loss = np.asarray(loss, np.float64)
    phi = np.full_like(loss, np.nan)  # the confidence φ: not read by cross-fitted PA-ALOOA (no LiRA/RMIA here)
    res = audit(loss, phi, np.asarray(mem, bool), np.asarray(g), names, alpha=alpha,
                n_perm=n_perm, n_null=1, stats_seed=stats_seed, delta=0.0, attacks=("alooa_cross_fit",),
                low_fpr=False).attacks["alooa_cross_fit"]
    out = {"gpr_pp": [100 * v for v in res["gpr"]], "gpr_lo_pp": [100 * v for v in res["gpr_lo"]],
           "gpr_hi_pp": [100 * v for v in res["gpr_hi"]], "delta_pp": res["delta_pp"], "delta_lo": res["delta_lo"],
           "delta_hi": res["delta_hi"], "p_delta_gt_0": res["p_delta_gt_0"], "contrast": None}
    if len(names) == 2:
        r = res["contrasts"][0]
        out["contrast"] = {"groups": names, "diff_pp": 100 * r["diff"], "se_pp": 100 * r["se"], "lo_pp": 100 * r["lo"],
                           "hi_pp": 100 * r["hi"], "p": r["p"], "mde80_pp": 2.8 * 100 * r["se"]}
    return out


def paired_difference(loss_a: np.ndarray, loss_b: np.ndarray, mem: np.ndarray, g: np.ndarray, names: list[str], *,
                      alpha: float) -> dict:
    """Arm a − arm b on the same design: per group GPR_k(a) − GPR_k(b) (pp) and, with two groups, the change of the
    signed contrast (GPR_0 − GPR_1)(a) − (GPR_0 − GPR_1)(b), each with the crossed records × model-pairs interval
    applied to the difference of the two arms' per-(model, record) contributions. Row r of both arms trains on the
    same membership row (pool), independently, so model pair r is one independent unit of the paired design (as
    the group report's DP-SGD-S − DP-SGD change)."""
    ca = cross_fit_contributions(-np.asarray(loss_a, np.float64), mem)
    cb = cross_fit_contributions(-np.asarray(loss_b, np.float64), mem)
    res = group_inference(ca - cb, g, len(names), alpha=alpha)
    est_a, est_b = gpr(ca.sum(0), g, len(names)), gpr(cb.sum(0), g, len(names))
    out = {"gpr_diff_pp": [100 * (x - y) for x, y in zip(est_a, est_b)],
           "gpr_diff_lo_pp": [100 * v for v in res["gpr_lo"]], "gpr_diff_hi_pp": [100 * v for v in res["gpr_hi"]],
           "contrast_change": None}
    if len(names) == 2:
        r = res["contrasts"][0]
        out["contrast_change"] = {"groups": names, "diff_pp": 100 * r["diff"], "se_pp": 100 * r["se"],
                                  "lo_pp": 100 * r["lo"], "hi_pp": 100 * r["hi"], "p": r["p"],
                                  "mde80_pp": 2.8 * 100 * r["se"]}
    return out


def run_synth_audit(params: Params, dataset: str, out: str | os.PathLike) -> tuple[dict, dict[str, float]]:
    """Both arms at every ε of ``synth.audit``; writes ``out``."""
    from ..synth.dpdsyn import sample_table, train_dpdsyn
    from ..synth.evaluate import audit_losses, fit_classifier, predict_proba
    from ..synth.layout import Layout

    a, s = params.synth.audit, params.synth
    data = load(params.resolve(params.data.prepared_dir) / dataset)
    tr = data.train
    layout = Layout.from_data(data)
    design = audit_design(tr.group, m=min(a.m, len(tr)), R=a.R, min_per_group=a.min_per_group,
                          rng=derive_rng(params.seed, "synth_audit", dataset))
    full = design.training_membership()  # [2R, n]
    idx, mem, g = design.audit_idx, design.membership, design.audit_group
    names = list(data.group_names)
    arms, paired, rows, timings = {}, {}, [], {}
    for eps in a.epsilons:
        t0 = time.perf_counter()
        loss_syn = np.zeros(mem.shape)
        acc_syn = []
        eps_spent = []
        for r in range(full.shape[0]):
            keep = full[r]
            sseed = derive_seed(params.seed, "synth_audit", dataset, "dpdsyn", float(eps), r)
            res = train_dpdsyn(tr.X[keep], tr.y[keep], layout, dpdsyn_spec(params, epsilon=eps),
                               n_classes=data.n_classes, seed=sseed)
            eps_spent.append(res.accounting["epsilon"])
            Xs, ys = sample_table(res, s.n_synth, seed=sseed)
            d = s.downstream
            clf = fit_classifier(Xs, ys, n_classes=data.n_classes, model=d.model, epochs=d.epochs, lr=d.lr,
                                 batch_size=d.batch_size, seed=derive_seed(sseed, "downstream"))
            loss_syn[r] = audit_losses(clf, tr.X[idx], tr.y[idx])
            acc_syn.append(float(np.mean(predict_proba(clf, data.test.X).argmax(1) == data.test.y)))
        timings[f"dpdsyn-e{eps:g}"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        proba, bank = _dpsgd_proba(params, data, tr.X, tr.y, tr.group, epsilon=eps,
                                   seed=derive_seed(params.seed, "synth_audit", dataset, "dpsgd", float(eps)),
                                   membership=full)
        loss_dp, _ = bank.evaluate(tr.X[idx], tr.y[idx])
        acc_dp = (proba.argmax(-1) == data.test.y[None]).mean(1)
        timings[f"dpsgd-e{eps:g}"] = time.perf_counter() - t0
        paired[f"dpdsyn-dpsgd@{eps:g}"] = paired_difference(loss_syn, loss_dp, mem, g, names,
                                                             alpha=params.audit.alpha)
        for arm, loss, acc, spent in (("dpdsyn", loss_syn, np.array(acc_syn), max(eps_spent)),
                                      ("dpsgd", loss_dp, acc_dp, max(x.epsilon for x in bank.accounting))):
            st = arm_statistics(loss, mem, g, names, alpha=params.audit.alpha, n_perm=params.audit.n_perm,
                                stats_seed=derive_seed(params.seed, "synth_audit", dataset, arm, float(eps), "stats"))
            st.update(accuracy_mean=float(acc.mean()), accuracy_sd=float(acc.std(ddof=1)), epsilon_spent=spent)
            arms[f"{arm}@{eps:g}"] = st
            for k, nm in enumerate(names):
                rows.append({"dataset": dataset, "arm": arm, "epsilon": eps, "group": nm,
                             "n_records": int((g == k).sum()), "gpr_pp": st["gpr_pp"][k],
                             "lo_pp": st["gpr_lo_pp"][k], "hi_pp": st["gpr_hi_pp"][k]})
    summary = {"dataset": dataset, "m": int(len(idx)), "R": design.R, "n_models_per_arm": int(mem.shape[0]),
               "group_names": names, "estimator": "PA-ALOOA cross-fitted; intervals over records x model pairs",
               "arms": arms, "paired": paired}
    with atomic_dir(out) as tmp:
        pd.DataFrame(rows).to_csv(tmp / "groups.csv", index=False)
        (tmp / "summary.json").write_text(json.dumps(jsonable(summary), indent=1) + "\n")
    return summary, timings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fairdp synth_audit", description=__doc__)
    ap.add_argument("dataset", help="one of params.yaml's synth.audit.datasets")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default=None, help="default: results/synth_audit/<dataset>")
    args = ap.parse_args(argv)
    params = load_params(args.params)
    if args.dataset not in params.synth.audit.datasets:
        raise KeyError(f"{args.dataset!r} is not in synth.audit.datasets")
    import torch

    torch.set_num_threads(params.train.threads)
    out = Path(args.out or params.resolve("results/synth_audit") / args.dataset)
    summary, timings = run_synth_audit(params, args.dataset, out)
    write_timings(params, f"synth_audit-{args.dataset}", timings)
    print(json.dumps({"dataset": args.dataset, "delta_pp": {k: round(v["delta_pp"], 3)
                                                            for k, v in summary["arms"].items()}}))
    return 0


if __name__ == "__main__":
    import sys

    from . import reexec_with_malloc_env, stage_main

    reexec_with_malloc_env("fairdp_core.stages.synth_audit", sys.argv[1:])
    sys.exit(stage_main("synth_audit", main))
