"""The ``audit`` command and API: from params, train the bank, compute signals, run every attack, write tables.

Per run (one dataset × model × algorithm × ε × seed) it writes, atomically, a directory with:
``bank.pt`` (the trained models), ``signals.npz`` (loss and logit-scaled confidence [2R, m] on the audit
records, test predictions [2R, n_test]), ``records.csv`` (per audit record: group and each attack's advantage),
``groups.csv`` (tidy per-group table: attack, group, GPR with CI, TPR at low FPR, ε lower bound) and
``summary.json`` (accuracy, accounting, GPR/Δ with CIs per attack, p-values, timings). The membership matrix is
the design artifact written by :func:`write_design` and read here.
"""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np
import pandas as pd

from ..atomic import atomic_dir
from ..config import Params, RunSpec
from ..data import GroupedData, load
from ..engine import TrainSpec, bank_accounting, train_bank
from ..seeding import derive_rng, derive_seed
from .attacks import (
    cross_fit_advantage,
    ga_advantage,
    gba_advantage,
    lira_scores,
    logit_confidence,
    record_advantage,
)
from .design import AuditDesign, audit_design, looa_design
from .stats import bootstrap_gpr, epsilon_lower_bound, pair_folds, permutation_pvalue, tpr_at_fpr

__all__ = ["ATTACKS", "run_audit", "train_spec", "write_design"]

ATTACKS = ("alooa_cross_fit", "alooa_in_sample", "alooa_null_corrected", "ga", "gba", "lira_online",
           "lira_offline")
TWO_WAY = ("alooa_cross_fit", "lira_online")  # bootstrapped over records × model pairs; others over records


def train_spec(params: Params, run: RunSpec) -> TrainSpec:
    """The engine's TrainSpec for a run: training defaults, the dataset-model override, the run's ε/τ/γ."""
    t = params.train
    o = t.overrides.get(f"{run.dataset}-{run.model}")
    pick = (lambda name: getattr(o, name) if o is not None and getattr(o, name) is not None else getattr(t, name))
    s, ns = t.dpsgd_s, t.dpsgd_s_nonprivate
    return TrainSpec(algorithm=run.algorithm, model=run.model, epochs=pick("epochs"), batch_size=pick("batch_size"),
                     lr=pick("lr"), clip=pick("clip"), target_epsilon=run.epsilon, delta=t.delta,
                     accountant=t.accountant, tau=run.tau if run.tau is not None else s.tau,
                     gamma=run.gamma if run.gamma is not None else s.gamma, eta_q=s.eta_q, sigma_b=s.sigma_b,
                     c_min=s.c_min, q_init=s.q_init, q_max=s.q_max, count_floor=s.count_floor,
                     ema_momentum=ns.ema_momentum, percentile=ns.percentile, hidden=t.hidden)


def _prepared(params: Params, dataset: str) -> GroupedData:
    return load(params.resolve(params.data.prepared_dir) / dataset)


def write_design(params: Params, key: str, path: str | os.PathLike) -> AuditDesign:
    """Draw the audit design for ``designs[key]`` and save it (atomically) to ``path``."""
    spec = params.designs[key]
    data = _prepared(params, spec["dataset"])
    a = params.audit
    rng = derive_rng(params.seed, "design", spec["dataset"], spec["seed"])
    d = audit_design(data.train.group, m=min(a.m, len(data.train)), R=a.R, min_per_group=a.min_per_group, rng=rng)
    d.save(path)
    return d


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(float(x)) else float(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


def run_audit(params: Params, name: str, out: str | os.PathLike, *, design_path: str | os.PathLike,
              progress: bool = True) -> dict:
    """Audit run ``name`` of ``params.runs`` and write its directory ``out``; returns the summary dict."""
    import torch

    torch.set_num_threads(params.train.threads)
    run = params.runs[name]
    data = _prepared(params, run.dataset)
    design = AuditDesign.load(design_path)
    if design.n != len(data.train):
        raise ValueError(f"design {design_path} was drawn for n={design.n} records, the prepared {run.dataset} has "
                         f"{len(data.train)}: rerun the design stage")
    spec = train_spec(params, run)
    K, a = data.n_groups, params.audit
    timings: dict[str, float] = {}
    with atomic_dir(out) as tmp:
        t0 = time.perf_counter()
        bank = train_bank(data.train.X, data.train.y, data.train.group, design.training_membership(), spec,
                          n_classes=data.n_classes, n_groups=K, device=params.train.device,
                          seed=derive_seed(params.seed, "bank", run.dataset, run.model, run.seed),
                          progress=progress, desc=name)
        timings["train_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        idx = design.audit_idx
        loss, logits = bank.evaluate(data.train.X[idx], data.train.y[idx], batch_size=a.eval_batch)
        phi = logit_confidence(logits, data.train.y[idx])
        _, test_logits = bank.evaluate(data.test.X, data.test.y, batch_size=a.eval_batch)
        test_pred = test_logits.argmax(-1).astype(np.int16)
        timings["signals_s"] = time.perf_counter() - t0
        bank.save(tmp / "bank.pt")
        np.savez(tmp / "signals.npz", loss=loss, phi=phi, test_pred=test_pred, audit_idx=idx)

        mem, g = design.membership, design.audit_group
        rng = derive_rng(params.seed, "stats", name)
        scores = -loss.astype(np.float64)
        per_record = {
            "alooa_cross_fit": lambda s, m, f: cross_fit_advantage(s, m, folds=f),
            "alooa_in_sample": lambda s, m, f: record_advantage(s, m, estimator="in_sample"),
            "alooa_null_corrected": lambda s, m, f: record_advantage(s, m, estimator="null_corrected", rng=rng,
                                                                     n_null=a.n_null),
            "ga": lambda s, m, f: ga_advantage(s, m),
            "gba": lambda s, m, f: gba_advantage(s, m, g),
            "lira_online": lambda s, m, f: cross_fit_advantage(s, m, folds=f),
            "lira_offline": lambda s, m, f: cross_fit_advantage(s, m, folds=f),
        }
        # LiRA scores are computed once on the bank as trained (each model's Gaussians fitted on the OTHER models)
        # and then resampled like any signal: refitting on a resample with repeated model pairs would let a
        # model's own copy act as its shadow model and inflate the bootstrap distribution.
        lira = {mode: lira_scores(phi, mem, mode=mode) for mode in ("online", "offline")}
        signal_of = {k: lira[k.split("_")[1]] if k.startswith("lira") else scores for k in per_record}
        records = pd.DataFrame({"record": idx, "group": g, "group_name": [data.group_names[k] for k in g]})
        group_rows, attack_summary = [], {}
        for attack in ATTACKS:
            t0 = time.perf_counter()
            res = bootstrap_gpr(signal_of[attack], mem, g, K, per_record[attack], rng=rng, n_boot=a.n_boot,
                                resample_models=attack in TWO_WAY, level=1 - a.alpha)
            p = permutation_pvalue(res["advantage"], g, K, rng=rng, n_perm=a.n_perm)
            timings[f"{attack}_s"] = time.perf_counter() - t0
            records[attack] = res["advantage"]
            attack_summary[attack] = {"gpr": res["gpr"], "gpr_lo": res["gpr_lo"], "gpr_hi": res["gpr_hi"],
                                      "delta_pp": res["delta_pp"], "delta_lo": res["delta_lo"],
                                      "delta_hi": res["delta_hi"], "p_delta_gt_0": p,
                                      "delta_bias_corrected": res["delta_bias_corrected"],
                                      "delta_pct_lo": res["delta_pct_lo"], "delta_pct_hi": res["delta_pct_hi"],
                                      "bootstrap": "records x model pairs" if attack in TWO_WAY else "records"}
            for k in range(K):
                group_rows.append({"attack": attack, "group": k, "group_name": data.group_names[k],
                                   "n_records": int((g == k).sum()), "gpr": res["gpr"][k],
                                   "gpr_lo": res["gpr_lo"][k], "gpr_hi": res["gpr_hi"][k]})
        # Low-FPR view and empirical ε lower bound per group, on the LiRA-online score over (model, record) pairs.
        folds = pair_folds(mem.shape[0])
        low_fpr = {}
        for k in range(K):
            cols = g == k
            s_k, m_k = lira["online"][:, cols], mem[:, cols]
            r01 = tpr_at_fpr(s_k[m_k], s_k[~m_k], 0.001, alpha=a.alpha)
            r1 = tpr_at_fpr(s_k[m_k], s_k[~m_k], 0.01, alpha=a.alpha)
            eps = epsilon_lower_bound(s_k, m_k, folds, delta=spec.delta, alpha=a.alpha)
            low_fpr[data.group_names[k]] = {"tpr_at_0.1%": r01, "tpr_at_1%": r1, "eps_lb": eps}
            group_rows.append({"attack": "lira_online_lowfpr", "group": k, "group_name": data.group_names[k],
                               "n_records": int(cols.sum()), "tpr_at_0.1pct": r01["tpr"],
                               "tpr_at_0.1pct_lo": r01["tpr_lo"], "tpr_at_0.1pct_hi": r01["tpr_hi"],
                               "tpr_at_1pct": r1["tpr"], "tpr_at_1pct_lo": r1["tpr_lo"],
                               "tpr_at_1pct_hi": r1["tpr_hi"], "eps_lb": eps["eps_lb"]})

        looa = None
        if name in a.looa.runs:
            t0 = time.perf_counter()
            looa = _run_looa(params, name, run, spec, data, design, records, progress)
            timings["looa_s"] = time.perf_counter() - t0
            looa.to_csv(tmp / "looa.csv", index=False)

        acc = (test_pred == data.test.y[None]).mean(1)
        acc_by_group = {data.group_names[k]: float((test_pred[:, data.test.group == k] ==
                                                    data.test.y[data.test.group == k][None]).mean())
                        for k in range(K)}
        summary = {
            "run": name, "spec": run.model_dump(), "train_spec": spec.__dict__, "n_models": bank.n_models,
            "m": len(idx), "R": design.R, "n_train": len(data.train), "group_names": list(data.group_names),
            "accuracy": {"mean": float(acc.mean()), "sd": float(acc.std(ddof=1)) if len(acc) > 1 else 0.0,
                         "by_group": acc_by_group},
            "accounting": bank_accounting(bank.accounting),  # ε: the max over the bank's models; q: its range
            "attacks": attack_summary, "low_fpr": low_fpr, "timings": timings,
            "looa": None if looa is None else {"n_targets": len(looa),
                                               "corr_alooa": float(looa[["looa_cross_fit", "alooa_cross_fit"]]
                                                                   .corr().iloc[0, 1])},
        }
        records.to_csv(tmp / "records.csv", index=False)
        pd.DataFrame(group_rows).to_csv(tmp / "groups.csv", index=False)
        (tmp / "summary.json").write_text(json.dumps(_jsonable(summary), indent=1))
    return summary


def _run_looa(params, name, run, spec, data, design, records, progress) -> pd.DataFrame:
    """PA-LOOA for L audit records (stratified): R pairs (D, D∖{z}) with shared streams; same estimators."""
    a = params.audit.looa
    rng = derive_rng(params.seed, "looa", name)
    ld = looa_design(data.train.group, L=a.L, R=a.R, min_per_group=1, rng=rng, candidates=design.audit_idx)
    targets = ld.targets  # pool indices of the chosen audit records
    n, M = len(data.train), len(ld.is_in)
    bank = train_bank(data.train.X, data.train.y, data.train.group, ld.membership, spec, n_classes=data.n_classes,
                      n_groups=data.n_groups, seed=derive_seed(params.seed, "looa-bank", name), progress=progress,
                      desc=f"{name} LOOA", stream_ids=ld.stream_ids, sample_over=np.ones((M, n), dtype=bool),
                      device=params.train.device)
    loss, _ = bank.evaluate(data.train.X[targets], data.train.y[targets])
    # per target ℓ: its 2R models' losses on z_ℓ, arranged [2R, L] (pairs kept together: IN row, OUT row)
    L = len(targets)
    s = np.stack([-loss[ld.target_of_row == t, t] for t in range(L)], axis=1)
    m = np.stack([ld.is_in[ld.target_of_row == t] for t in range(L)], axis=1)
    out = pd.DataFrame({"record": targets, "group": data.train.group[targets],
                        "looa_in_sample": record_advantage(s, m, estimator="in_sample"),
                        "looa_cross_fit": record_advantage(s, m, estimator="cross_fit")})
    by_rec = records.set_index("record")
    out["alooa_cross_fit"] = by_rec.loc[targets, "alooa_cross_fit"].to_numpy()
    out["alooa_in_sample"] = by_rec.loc[targets, "alooa_in_sample"].to_numpy()
    out["looa_train_s"] = bank.seconds
    return out

