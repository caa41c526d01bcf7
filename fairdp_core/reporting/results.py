"""Reading audit outputs into tidy frames for the reports (no algorithm code: it only gathers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..data.loaders import REGISTRY
from ..rules import LABELS

__all__ = ["ALGORITHM_LABELS", "DATASET_LABELS", "MODEL_LABELS", "eps_label", "group_table", "load_summaries", "records",
           "run_label", "run_table", "setting_label"]

ALGORITHM_LABELS = dict(LABELS)  # from the rule registry (fairdp_core.rules)
# the registry's datasets (fairdp_core/data/sets: each module's label) and the profiles' variants of them
DATASET_LABELS = {**{k: v.label for k, v in REGISTRY.items()},
                  "adult_blind": "Adult (sex not an input)", "law_paper_blind": "Law (paper's task; race not an input)",
                  "compas_blind": "COMPAS (race not an input)", "adult_small": "Adult (1,000 records, memorising)",
                  "utkface_full": "UTKFace (all)", "mnist_full": "MNIST (60,000)"}
MODEL_LABELS = {"lr": "LR", "mlp": "MLP", "cnn": "CNN", "cnn_relu": "CNN (ReLU)"}


def setting_label(dataset: str, model: str) -> str:
    """"Adult · LR": what the reports print for a dataset and model."""
    return f"{DATASET_LABELS.get(dataset, dataset)} · {MODEL_LABELS.get(model, model)}"


def eps_label(epsilon) -> str:
    """"ε = 10", or "no DP" for a non-private run."""
    return "no DP" if epsilon is None or epsilon != epsilon else f"ε = {float(epsilon):g}"


def run_label(r: dict) -> str:
    """A run's readable name: "Adult · LR · DP-SGD-S · ε = 10 · seed 0" (with τ and γ for a sweep run)."""
    sweep = "" if r.get("tau") is None else f" (τ = {r['tau']:g}, γ = {r['gamma']:g})"
    return (f"{setting_label(r['dataset'], r['model'])} · {ALGORITHM_LABELS[r['algorithm']]}{sweep} · "
            f"{eps_label(r['epsilon'])} · seed {r['seed']}")


def load_summaries(results_dir: str | Path, runs: dict[str, dict]) -> dict[str, dict]:
    """``summary.json`` of every run in ``runs`` (name -> RunSpec fields). A missing one is an error."""
    out = {}
    for name in runs:
        p = Path(results_dir) / name / "summary.json"
        if not p.is_file():
            raise FileNotFoundError(f"{p} missing: run `fairdp audit {name}` (dvc repro does)")
        out[name] = json.loads(p.read_text())
    return out


def run_table(summaries: dict[str, dict], runs: dict[str, dict]) -> pd.DataFrame:
    """One row per run × attack: accuracy and the majority-class rate, accounting (σ, q range, T, accountant, ε
    spent: the maximum over the bank's models), Δ with its interval over records × model pairs, its null floor, the
    two-group contrast, p-values."""
    rows = []
    for name, s in summaries.items():
        r, acct = runs[name], s["accounting"]
        for attack, a in s["attacks"].items():
            rows.append({
                "run": name, "dataset": r["dataset"], "model": r["model"], "algorithm": r["algorithm"],
                "label": ALGORITHM_LABELS[r["algorithm"]], "epsilon": r["epsilon"], "seed": r["seed"],
                "setting": setting_label(r["dataset"], r["model"]), "eps_label": eps_label(r["epsilon"]),
                "run_label": run_label(r), "tau": r.get("tau"), "gamma": r.get("gamma"), "attack": attack,
                "lr": (s.get("spec") or {}).get("lr"),
                "accuracy": s["accuracy"]["mean"], "majority_rate": s["accuracy"].get("majority_class_rate"),
                "top_pred_share": s["accuracy"].get("largest_predicted_class_share"),
                "balanced_accuracy": s["accuracy"].get("balanced"),
                "clipped_fraction": {g: c["clipped_fraction"] for g, c in (s.get("clipping") or {}).items()} or None,
                "delta_pp": a["delta_pp"], "delta_lo": a["delta_lo"], "delta_hi": a["delta_hi"],
                "null_floor_pp": a.get("null_floor_pp"), "p_delta": a["p_delta_gt_0"], "p_perm": a.get("p_perm"),
                "contrast_pp": (a.get("contrast") or {}).get("diff_pp"),
                "contrast_lo": (a.get("contrast") or {}).get("lo_pp"),
                "contrast_hi": (a.get("contrast") or {}).get("hi_pp"),
                "contrasts": a.get("contrasts"),  # every pair of groups: diff, se, df, variance parts (fractions)
                "gpr": a.get("gpr"), "n_train": s.get("n_train"),
                "sigma_g": acct["sigma_g"], "sigma_b": acct["sigma_b"], "sigma_s": acct.get("sigma_s"),
                "sigma_eff": acct["sigma_eff"],
                "q": acct["sample_rate"], "q_min": acct.get("sample_rate_range", [acct["sample_rate"]])[0],
                "T": acct["steps"], "delta": acct["delta"], "accountant": acct["accountant"],
                "eps_spent": acct["epsilon"], "guaranteed": acct["guaranteed"], "n_models": s["n_models"],
                "m": s["m"],
            })
    return pd.DataFrame(rows)


def group_table(summaries: dict[str, dict], runs: dict[str, dict]) -> pd.DataFrame:
    """One row per run × attack × group: GPR with CI."""
    rows = []
    for name, s in summaries.items():
        r = runs[name]
        for attack, a in s["attacks"].items():
            for k, gname in enumerate(s["group_names"]):
                rows.append({"run": name, "dataset": r["dataset"], "model": r["model"], "algorithm": r["algorithm"],
                             "label": ALGORITHM_LABELS[r["algorithm"]], "epsilon": r["epsilon"], "seed": r["seed"],
                             "setting": setting_label(r["dataset"], r["model"]), "eps_label": eps_label(r["epsilon"]),
                             "run_label": run_label(r),
                             "tau": r.get("tau"), "gamma": r.get("gamma"), "attack": attack, "group": gname,
                             "gpr": a["gpr"][k], "gpr_lo": a["gpr_lo"][k], "gpr_hi": a["gpr_hi"][k],
                             "accuracy_group": s["accuracy"]["by_group"][gname]})
    return pd.DataFrame(rows)


def records(results_dir: str | Path, name: str) -> pd.DataFrame:
    """The per-record table of a run."""
    return pd.read_csv(Path(results_dir) / name / "records.csv")


def alooa_contributions(train_dir: str | Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(c [M, m], group [m]): the cross-fitted PA-ALOOA contributions of run ``name``'s bank (``advantage =
    c.sum(0)``, as the attack stage computes them) from its signals and its audit design (results/designs/, beside
    ``train_dir``), for statistics over models and records across two banks (leveling)."""
    import json

    from ..audit.design import AuditDesign
    from ..audit.inference import cross_fit_contributions

    run_dir = Path(train_dir) / name
    design_key = json.loads((run_dir / "train.json").read_text())["plan"]["design"]
    design = AuditDesign.load(Path(train_dir).parent / "designs" / f"{design_key}.npz")
    with np.load(run_dir / "signals.npz") as z:
        if not np.array_equal(z["audit_idx"], design.audit_idx):
            raise ValueError(f"{run_dir} was trained on another audit design than {design_key}")
        return cross_fit_contributions(-np.asarray(z["loss"], np.float64), design.membership), design.audit_group


def signals(results_dir: str | Path, name: str) -> dict[str, np.ndarray]:
    with np.load(Path(results_dir) / name / "signals.npz") as z:
        return {k: z[k] for k in z.files}
