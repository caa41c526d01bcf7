"""The ``attack`` stage: every attack and its statistics on a trained run (``results/audit/<run>/``).

Reads ``results/plan/attack/<run>.json``, the run's signals and ``train.json`` (``results/train/<run>/``) and the
audit design. No training, no dataset: editing an attack or a statistic reruns this stage and the reports only.
Writes atomically: ``records.csv`` (per audit record: group and each attack's advantage), ``groups.csv`` (per
group: attack, GPR with CI, TPR at low FPR, ε lower bound), ``looa.csv`` for a PA-LOOA run, and
``summary.json`` (accuracy and accounting from the train stage; per attack GPR, Δ with its simultaneous interval,
the two-group contrast, the null floor of Δ and the p-values).
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
from ..audit.attacks import (
    OFFLINE_RMIA_MIN_MODELS,
    ga_predictions,
    gba_advantage,
    gba_predictions,
    lira_scores,
    record_advantage,
    rmia_scores,
    sort_rows,
)
from ..audit.design import AuditDesign
from ..audit.inference import (
    cross_fit_contributions,
    group_inference,
    prediction_contributions,
    studentized_permutation_pvalue,
)
from ..audit.stats import delta_pp, epsilon_lower_bound, gpr, pair_folds, tpr_at_fpr_clustered
from ..config import load_params
from ..versions import package_versions
from . import jsonable, read_plan, write_timings

__all__ = ["ATTACKS", "INTERVALS", "attack_bank", "main", "run_attack"]

ATTACKS = ("alooa_cross_fit", "alooa_in_sample", "alooa_null_corrected", "ga", "gba", "lira_online",
           "lira_offline", "rmia", "rmia_offline")
# Attacks whose per-record advantage is a sum of per-(model, record) terms get intervals over records × model pairs
# (fairdp_core.audit.inference). Their coverage was simulated for the cross-fitted PA-ALOOA (reports/coverage/); the
# others use the same construction without their own simulation. The in-sample and null-corrected PA-ALOOA
# estimators are not of that form: they are reported as point estimates (upper and null-corrected), with no interval.
# PA-GBA fits one threshold per model and group on that group's records, so its Δ is positive without any leakage
# (the overfit is larger for a smaller group): its interval covers that inflated quantity, and it gets no test of
# "Δ > 0"; read it against its null floor (thresholds refitted on permuted labels).
INTERVALS = ("alooa_cross_fit", "ga", "gba", "lira_online", "lira_offline", "rmia", "rmia_offline")


def attack_bank(loss: np.ndarray, phi: np.ndarray, mem: np.ndarray, g: np.ndarray, names: list[str], *,
                alpha: float, n_perm: int, n_null: int, stats_seed, delta: float, attacks: tuple[str, ...] = ATTACKS
                ) -> tuple[pd.DataFrame, list[dict], dict, dict, dict[str, float]]:
    """Every attack and its statistics on one bank's signals, as arrays (no files): ``loss`` and ``phi`` [M, m] on
    the audited records, ``mem`` [M, m] their membership, ``g`` [m] their groups (0..K−1, named ``names``).
    Returns (records: per record each attack's advantage; group rows: GPR with CI per attack and group, and the
    low-FPR view; per-attack summary; low-FPR view per group; timings in seconds). ``attacks``: a subset of
    ATTACKS (offline RMIA left out below 8 models), run in ATTACKS' order (every attack draws from one generator,
    so a subset changes the later attacks' permutations: results are comparable only between runs of the same
    subset)."""
    unknown = set(attacks) - set(ATTACKS)
    if unknown:
        raise ValueError(f"unknown attacks {sorted(unknown)} (known: {', '.join(ATTACKS)})")
    if mem.shape[0] < OFFLINE_RMIA_MIN_MODELS:
        attacks = tuple(a for a in attacks if a != "rmia_offline")
    K = len(names)
    rng = np.random.default_rng(stats_seed)
    scores = -np.asarray(loss, dtype=np.float64)
    timings: dict[str, float] = {}
    # LiRA: each model's Gaussians are fitted on the other fold's models, and a record is called IN when the
    # likelihood ratio exceeds 1 (online) or φ exceeds the OUT mean (offline): no threshold is fitted on labels.
    # RMIA: likelihood ratios against reference models (online: the other fold's; offline: the other pairs of the
    # model's own fold that the record is OUT of, with the paper's correction a) and a population of the model's OUT
    # records (of the other half of the audited records); its threshold is cross-fitted like PA-ALOOA's. Computed
    # only when asked for (the offline a is chosen by simulation).
    lira = {mode: lira_scores(phi, mem, mode=mode) for mode in ("online", "offline")}
    contributions = {
        "alooa_cross_fit": lambda: cross_fit_contributions(scores, mem),
        "ga": lambda: prediction_contributions(ga_predictions(scores, mem), mem),
        "gba": lambda: prediction_contributions(gba_predictions(scores, mem, g), mem),
        "lira_online": lambda: prediction_contributions(lira["online"] >= 0, mem),
        "lira_offline": lambda: prediction_contributions(lira["offline"] >= 0, mem),
        "rmia": lambda: cross_fit_contributions(rmia_scores(phi, mem), mem),
        "rmia_offline": lambda: cross_fit_contributions(rmia_scores(phi, mem, mode="offline"), mem),
    }
    advantage_only = {
        "alooa_in_sample": lambda: record_advantage(scores, mem, estimator="in_sample"),
        "alooa_null_corrected": lambda: record_advantage(scores, mem, estimator="null_corrected", rng=rng,
                                                         n_null=n_null),
    }
    records = pd.DataFrame({"group": g, "group_name": [names[k] for k in g]})
    group_rows, attack_summary = [], {}
    for attack in (a for a in ATTACKS if a in attacks):
        t0 = time.perf_counter()
        if attack in INTERVALS:
            c = contributions[attack]()
            adv = c.sum(0)
            res = group_inference(c, g, K, alpha=alpha)
        else:
            adv = advantage_only[attack]()
            res = None
        p_perm, floor = studentized_permutation_pvalue(adv, g, K, rng=rng, n_perm=n_perm)
        if attack == "gba":  # its thresholds depend on the groups: the floor refits them on permuted labels
            rows_sorted = sort_rows(scores)  # once: each permutation reads its groups off the same sorted rows
            floor = float(np.mean([delta_pp(gpr(gba_advantage(scores, mem, pg, presorted=rows_sorted), pg, K))
                                   for pg in (rng.permutation(g) for _ in range(n_null))]))
        timings[f"{attack}_s"] = time.perf_counter() - t0
        records[attack] = adv
        est = gpr(adv, g, K)
        summ = {"gpr": est, "delta_pp": delta_pp(est), "null_floor_pp": floor, "p_perm": p_perm,
                "interval": None, "gpr_lo": [None] * K, "gpr_hi": [None] * K, "delta_lo": None, "delta_hi": None,
                "p_delta_gt_0": None, "contrast": None}
        if res is not None:
            summ.update({"interval": "records x model pairs (crossed; t, Satterthwaite df)",
                         "gpr_lo": res["gpr_lo"], "gpr_hi": res["gpr_hi"], "delta_lo": res["delta_lo"],
                         "delta_hi": res["delta_hi"], "p_delta_gt_0": res["p_delta_gt_0"],
                         "contrasts": [{**r, "diff_pp": 100 * r["diff"], "lo_pp": 100 * r["lo"],
                                        "hi_pp": 100 * r["hi"]} for r in res["contrasts"]]})
            if K == 2:
                r = res["contrasts"][0]
                summ["contrast"] = {"groups": [names[0], names[1]], "diff_pp": 100 * r["diff"],
                                    "se_pp": 100 * r["se"], "df": r["df"], "lo_pp": 100 * r["lo"],
                                    "hi_pp": 100 * r["hi"], "p": r["p"]}
        if attack == "lira_online":  # its Gaussians' fold-level error undercovers a group's level (not a contrast)
            summ.update(gpr_lo=[None] * K, gpr_hi=[None] * K,
                        note="per-group GPR intervals not reported: they undercover in simulation (down to 0.86, "
                             "reports/coverage/attack_coverage.md); the contrasts and Δ's interval cover")
        if attack == "gba":
            summ.update(p_delta_gt_0=None, p_perm=None,
                        note="per-group thresholds: Δ > 0 without leakage; compare with null_floor_pp")
        attack_summary[attack] = summ
        for k in range(K):
            group_rows.append({"attack": attack, "group": k, "group_name": names[k],
                               "n_records": int((g == k).sum()), "gpr": est[k],
                               "gpr_lo": summ["gpr_lo"][k], "gpr_hi": summ["gpr_hi"][k]})
    # Low-FPR view and empirical ε lower bound per group, on the LiRA-online score over (model, record) pairs.
    folds = pair_folds(mem.shape[0])
    low_fpr = {}
    for k in range(K):
        cols = g == k
        s_k, m_k = lira["online"][:, cols], mem[:, cols]
        r01 = tpr_at_fpr_clustered(s_k, m_k, 0.001, alpha=alpha)
        r1 = tpr_at_fpr_clustered(s_k, m_k, 0.01, alpha=alpha)
        eps = epsilon_lower_bound(s_k, m_k, folds, delta=delta, alpha=alpha)
        low_fpr[names[k]] = {"tpr_at_0.1%": r01, "tpr_at_1%": r1, "eps_lb": eps}
        group_rows.append({"attack": "lira_online_lowfpr", "group": k, "group_name": names[k],
                           "n_records": int(cols.sum()), "tpr_at_0.1pct": r01["tpr"],
                           "tpr_at_0.1pct_lo": r01["tpr_lo"], "tpr_at_0.1pct_hi": r01["tpr_hi"],
                           "tpr_at_1pct": r1["tpr"], "tpr_at_1pct_lo": r1["tpr_lo"],
                           "tpr_at_1pct_hi": r1["tpr_hi"], "eps_lb": eps["eps_lb"]})
    return records, group_rows, attack_summary, low_fpr, timings


def run_attack(name: str, out: str | os.PathLike, *, plan: dict, train_dir: str | os.PathLike,
               design_path: str | os.PathLike, attacks: tuple[str, ...] = ATTACKS) -> tuple[dict, dict[str, float]]:
    """Attack run ``name``'s bank as ``plan`` says and write ``out``; returns (summary, timings in seconds)."""
    train_dir = Path(train_dir)
    info = json.loads((train_dir / "train.json").read_text())
    with np.load(train_dir / "signals.npz") as z:
        loss, phi, idx = z["loss"], z["phi"], z["audit_idx"]
    design = AuditDesign.load(design_path)
    if not np.array_equal(design.audit_idx, idx):
        raise ValueError(f"{train_dir} was trained on another audit design than {design_path}: rerun the train stage")
    names = info["group_names"]
    records, group_rows, attack_summary, low_fpr, timings = attack_bank(
        loss, phi, design.membership, design.audit_group, names, alpha=plan["alpha"], n_perm=plan["n_perm"],
        n_null=plan["n_null"], stats_seed=plan["stats_seed"], delta=info["accounting"]["delta"], attacks=attacks)
    records.insert(0, "record", idx)
    with atomic_dir(out) as tmp:
        looa = None
        if plan["looa"]:
            looa = _looa_table(train_dir / "looa.npz", records)
            looa.to_csv(tmp / "looa.csv", index=False)
        summary = {
            "run": name, "spec": info["plan"]["spec"], "n_models": info["n_models"], "m": info["m"], "R": info["R"],
            "n_train": info["n_train"], "group_names": names, "accuracy": info["accuracy"],
            "accounting": info["accounting"], "clipping": info.get("clipping"), "attacks": attack_summary,
            "low_fpr": low_fpr, "versions": package_versions(),
            "looa": None if looa is None else {
                "n_targets": len(looa),
                "corr_alooa": float(looa[["looa_cross_fit", "alooa_cross_fit"]].corr().iloc[0, 1])},
        }
        records.to_csv(tmp / "records.csv", index=False)
        pd.DataFrame(group_rows).to_csv(tmp / "groups.csv", index=False)
        (tmp / "summary.json").write_text(json.dumps(jsonable(summary), indent=1) + "\n")
    return summary, timings


def _looa_table(path: Path, records: pd.DataFrame) -> pd.DataFrame:
    """PA-LOOA's estimators on the coupled bank's scores, beside PA-ALOOA's for the same records."""
    with np.load(path) as z:
        targets, group, s, m = z["targets"], z["group"], z["scores"], z["is_in"]
    out = pd.DataFrame({"record": targets, "group": group,
                        "looa_in_sample": record_advantage(s, m, estimator="in_sample"),
                        "looa_cross_fit": record_advantage(s, m, estimator="cross_fit")})
    by_rec = records.set_index("record")
    out["alooa_cross_fit"] = by_rec.loc[targets, "alooa_cross_fit"].to_numpy()
    out["alooa_in_sample"] = by_rec.loc[targets, "alooa_in_sample"].to_numpy()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fairdp attack", description=__doc__)
    ap.add_argument("name", help="a run of runs.yaml (generated from params.yaml's grid)")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default=None, help="default: results/audit/<name>")
    args = ap.parse_args(argv)
    params = load_params(args.params)
    if args.name not in params.runs:
        raise KeyError(f"run {args.name!r} is not in params.yaml runs (see `fairdp grid`)")
    plan = read_plan(params.resolve("results/plan/attack") / f"{args.name}.json")
    out = Path(args.out or params.resolve("results/audit") / args.name)
    summary, timings = run_attack(args.name, out, plan=plan, train_dir=params.resolve("results/train") / args.name,
                                  design_path=params.resolve("results/designs") / f"{plan['design']}.npz")
    write_timings(params, f"attack-{args.name}", timings)
    print(json.dumps({"run": args.name, "delta_pp": {k: round(v["delta_pp"], 3)
                                                     for k, v in summary["attacks"].items()}}))
    return 0


if __name__ == "__main__":
    import sys

    from . import stage_main

    sys.exit(stage_main("attack", main))
