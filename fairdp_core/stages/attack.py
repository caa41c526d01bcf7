"""The ``attack`` stage: every attack and its statistics on a trained run (``results/audit/<run>/``).

Reads ``results/plan/attack/<run>.json``, the run's signals and ``train.json`` (``results/train/<run>/``) and the
audit design. No training, no dataset: editing an attack or a statistic reruns this stage, the reports and
``synth_audit`` (which audits its synthetic arm with the same :func:`~fairdp_core.audit.run.audit`).
Writes atomically: ``records.csv`` (per audit record: group and each attack's advantage), ``groups.csv`` (per
group: attack, GPR with CI, TPR at low FPR, ε lower bound), ``looa.csv`` for a PA-LOOA run, and
``summary.json`` (accuracy and accounting from the train stage; per attack GPR, Δ with its simultaneous interval,
the two-group contrast, the null floor of Δ and the p-values).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..atomic import atomic_dir
from ..audit.attacks import record_advantage
from ..audit.design import AuditDesign
from ..audit.run import ATTACKS, audit
from ..config import load_params
from ..versions import package_versions
from . import jsonable, read_plan, write_timings

__all__ = ["main", "run_attack"]


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
    result = audit(loss, phi, design.membership, design.audit_group, names, alpha=plan["alpha"],
                   n_perm=plan["n_perm"], n_null=plan["n_null"], stats_seed=plan["stats_seed"],
                   delta=info["accounting"]["delta"], attacks=attacks)
    records, low_fpr = result.records, result.low_fpr
    attack_summary = {name: s.as_dict() for name, s in result.attacks.items()}
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
        result.groups.to_csv(tmp / "groups.csv", index=False)
        (tmp / "summary.json").write_text(json.dumps(jsonable(summary), indent=1) + "\n")
    return summary, result.timings


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
