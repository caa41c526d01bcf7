"""The clip study: does a per-dataset clipping bound C, chosen privately, change Δ?

For each dataset (LR, the study's prepared data and training settings) and seed, two DP-SGD banks on the SAME audit
design, initialisations and Poisson batches (paired; only their noise streams differ, as for any two releases):

- arm A: DP-SGD at the profile's C (``train.clip``, or its override), σ calibrated by the engine to the target ε;
- arm B: DP-SGD at C = the ε_q-DP median of the initial model's per-sample gradient norms
  (:func:`fairdp_core.study.clip_tuning.tune_clip`), with training's own budget reduced so that the quantile release and
  training compose (RDP, order by order) to the same target ε: the bank is trained with ``target_epsilon`` =
  ``tune_clip``'s ``epsilon_training_alone`` and the engine's σ is checked against ``tune_clip``'s.

The quantile is released once per (dataset, seed), on the records every model of the bank trains on (the training
pool less the audited records): it reads only each model's own training data, and one release serves all 2R
models. Its ε_q is charged to every model's total. (Being the same in every model, it is invisible to the audit,
which compares models with and without a record: Δ measures the training's leakage at that C.)

Both arms are audited with the study's attacks (:func:`fairdp_core.audit.run.audit`, the signals computed
as the train stage computes them); Δ is PA-ALOOA cross-fitted's, in pp. Per dataset, the B − A differences of Δ and
of test accuracy over seeds get a t interval, the exact sign-flip p and the minimal detectable effect.

``fairdp clip-study`` writes ``reports/tuning/clip_study.{json,md}`` (committed, like ``fairdp coverage``); it is not
a DVC stage.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..config import Params, RunSpec, design_key

__all__ = ["CONFIG_COLUMNS", "DATASETS", "EPSILON_Q", "SIGMA_RTOL", "SUMMARY_COLUMNS", "arm_specs", "clip_study",
           "markdown", "study_params", "write_clip_study"]

DATASETS = ("adult", "law_paper", "compas", "credit")
EPSILON_Q = 0.1  # the quantile release's ε (pure DP)
# tune_clip's σ and the engine's are each the upper end of a bisection of relative width 1e-3, at the same budget
# (up to the accountants' order grids): they agree within two widths
SIGMA_RTOL = 2e-3

# per (dataset, seed): one row of the JSON's "configs" and of the markdown's per-seed table
CONFIG_COLUMNS = ("dataset", "seed", "design", "bank_seed", "clip_A", "clip_B", "clip_nonprivate", "sigma_A", "sigma_B",
                  "sigma_B_tune_clip", "q", "T", "eps_A", "eps_q", "eps_B_training", "eps_B_total", "acc_A", "acc_B",
                  "delta_A_pp", "delta_B_pp", "delta_A_ci_pp", "delta_B_ci_pp", "seconds")
# per dataset: one row of the JSON's "datasets" and of the markdown's main table
SUMMARY_COLUMNS = ("dataset", "seeds", "clip_A", "clip_B", "clip_nonprivate", "sigma_A", "sigma_B", "q", "T", "eps_A",
                   "eps_B_total", "acc_A", "acc_B", "delta_A_pp", "delta_B_pp", "diff_delta_pp", "diff_delta_ci_pp",
                   "diff_delta_p", "diff_delta_mde_pp", "diff_acc_pp", "diff_acc_ci_pp", "diff_acc_p",
                   "diff_acc_mde_pp", "verdict")


def _run_name(dataset: str, model: str, seed: int) -> str:
    return f"clip-study-{dataset}-{model}-s{seed}"


def study_params(params: Params, datasets: list[str] | tuple[str, ...], *, seeds: int, epsilon: float,
                 model: str = "lr") -> Params:
    """``params`` with one DP-SGD run per dataset and seed (``clip-study-<dataset>-<model>-s<seed>``) and its design
    added, so that the study's settings come from the pipeline's own code: the TrainSpec after ``train.overrides``
    and the bank seed (:func:`fairdp_core.stages.plan.train_plan`), the stats seed
    (:func:`~fairdp_core.stages.plan.attack_plan`) and the audit design
    (:func:`fairdp_core.stages.design.write_design`, ``<dataset>-s<seed>``: the pipeline's design for that key).
    Raises naming a dataset that params.yaml does not configure or that has no prepared data."""
    unknown = [d for d in datasets if d not in params.data.datasets]
    if unknown:
        raise KeyError(f"clip study: dataset {', '.join(map(repr, unknown))} is not under data.datasets in params.yaml "
                       f"(configured: {', '.join(params.data.datasets)})")
    prepared = params.resolve(params.data.prepared_dir)
    missing = [d for d in datasets if not (prepared / d / "meta.json").is_file()]
    if missing:
        raise FileNotFoundError(f"clip study: no prepared data for {', '.join(map(repr, missing))} under {prepared} "
                                f"(prepare it first: python -m fairdp_core.stages.prepare {missing[0]})")
    if seeds < 2:
        raise ValueError(f"clip study: seeds = {seeds}; the paired comparison over seeds needs at least 2")
    runs = dict(params.runs)
    designs = dict(params.designs)
    for d in datasets:
        for s in range(seeds):
            runs[_run_name(d, model, s)] = RunSpec(dataset=d, model=model, algorithm="dpsgd", epsilon=float(epsilon),
                                                   seed=s)
            designs.setdefault(design_key(d, s), {"dataset": d, "seed": s})
    return params.model_copy(update={"runs": runs, "designs": designs})


def arm_specs(spec: dict, *, clip_b: float, epsilon_training: float):
    """(arm A, arm B) TrainSpecs: A is the plan's DP-SGD spec (the profile's C, the full target ε); B the same at
    C = ``clip_b`` with training's own budget ``epsilon_training`` (the target less the quantile release)."""
    from ..engine import TrainSpec

    a = TrainSpec(**spec)
    return a, replace(a, clip=float(clip_b), target_epsilon=float(epsilon_training))


def _design_digest(design) -> str:
    h = hashlib.sha256()
    for arr in (design.audit_idx, design.membership):
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()[:16]


def _audit(bank, data, design, plan: dict, *, eval_batch: int) -> dict:
    """Test accuracy and the study's attacks on one bank (signals as the train stage computes them)."""
    from ..audit.run import audit
    from ..audit.signals import logit_confidence
    from ..engine import bank_accounting

    idx = design.audit_idx
    loss, logits = bank.evaluate(data.train.X[idx], data.train.y[idx], batch_size=eval_batch)
    phi = logit_confidence(logits, data.train.y[idx])
    _, test_logits = bank.evaluate(data.test.X, data.test.y, batch_size=eval_batch)
    acc = (test_logits.argmax(-1) == data.test.y[None]).mean(1)
    acct = bank_accounting(bank.accounting)
    attacks = audit(loss, phi, design.membership, design.audit_group, list(data.group_names), alpha=plan["alpha"],
                    n_perm=plan["n_perm"], n_null=plan["n_null"], stats_seed=plan["stats_seed"],
                    delta=acct["delta"]).attacks
    a = attacks["alooa_cross_fit"]
    return {"accuracy": float(acc.mean()), "accounting": acct,
            "alooa_cross_fit": {k: a[k] for k in ("gpr", "delta_pp", "delta_lo", "delta_hi", "null_floor_pp",
                                                  "p_delta_gt_0")}}


def _guard_budget(name: str, acc_a: dict, acc_b: dict, tune: dict, *, epsilon: float, eps_b_total: float,
                  q: float, T: int) -> None:
    """Refuse to report a configuration whose arms do not spend what the study says: both trained at the q and T
    the quantile's σ was calibrated at; A calibrated to ε, B to the target less the quantile release
    (``tune_clip``'s ``epsilon_training_alone``), with the engine's σ within :data:`SIGMA_RTOL` of ``tune_clip``'s;
    the quantile and B's training composed at most ε."""
    for arm, acc in (("A", acc_a), ("B", acc_b)):
        if acc["steps"] != T or abs(acc["sample_rate"] - q) > 1e-12 * q:
            raise RuntimeError(f"{name}: arm {arm} trained at q = {acc['sample_rate']}, T = {acc['steps']}; the "
                               f"quantile's σ was calibrated at q = {q}, T = {T}")
    if acc_a["target_epsilon"] != epsilon:
        raise RuntimeError(f"{name}: arm A was calibrated to ε = {acc_a['target_epsilon']}, not {epsilon}")
    if acc_b["target_epsilon"] != tune["epsilon_training_alone"]:
        raise RuntimeError(f"{name}: arm B was calibrated to training ε = {acc_b['target_epsilon']}, not the target "
                           f"less the quantile release ({tune['epsilon_training_alone']}): the quantile is not charged")
    ratio = acc_b["sigma_eff"] / tune["sigma"]
    if abs(ratio - 1) > SIGMA_RTOL:
        raise RuntimeError(f"{name}: arm B's σ = {acc_b['sigma_eff']:.6g} (the engine's, at training ε = "
                           f"{acc_b['target_epsilon']:.6g}) differs from tune_clip's σ = {tune['sigma']:.6g} by more "
                           f"than the calibration tolerance {SIGMA_RTOL:g}")
    if eps_b_total > epsilon * (1 + 1e-9):
        raise RuntimeError(f"{name}: arm B spends ε = {eps_b_total:.6g} (quantile + training), over the target "
                           f"{epsilon:g}")


def _config(params: Params, dataset: str, seed: int, data, *, model: str, epsilon: float, epsilon_q: float,
            quantile: float) -> dict:
    """Both arms of one (dataset, seed): tune C, train, audit."""
    from ..engine import train_bank
    from ..engine.spec import spec_fields
    from ..seeding import derive_seed
    from ..stages.design import write_design
    from ..stages.plan import attack_plan, train_plan
    from .clip_tuning import composed_epsilon, tune_clip

    t0 = time.perf_counter()
    name = _run_name(dataset, model, seed)
    plan = train_plan(params, name)
    aplan = attack_plan(params, name)  # one stats seed for both arms: their permutations are paired too
    with tempfile.TemporaryDirectory() as tmp:
        design = write_design(params, plan["design"], Path(tmp) / "design.npz")
    membership = design.training_membership()
    # q and T as the engine derives them: σ is calibrated at the largest q (the smallest pool)
    n_m = membership.sum(1)
    spec = plan["spec"]
    q = spec["batch_size"] / float(n_m.min())
    T = int(round(spec["epochs"] * n_m.mean() / spec["batch_size"]))
    common = membership.all(0)  # the records every model trains on
    tune = tune_clip(data.train.X[common], data.train.y[common], n_classes=data.n_classes, model=model,
                     quantile=quantile, epsilon_q=epsilon_q, target_epsilon=epsilon, sample_rate=q, steps=T,
                     delta=spec["delta"], seed=derive_seed(params.seed, "clip-study", dataset, model, seed))
    spec_a, spec_b = arm_specs(spec, clip_b=tune["clip"], epsilon_training=tune["epsilon_training_alone"])
    arms = {}
    for arm, s in (("A", spec_a), ("B", spec_b)):
        bank = train_bank(data.train.X, data.train.y, data.train.group, membership, s, n_classes=data.n_classes,
                          n_groups=data.n_groups, seed=plan["bank_seed"], device=params.train.device, progress=False)
        arms[arm] = _audit(bank, data, design, aplan, eval_batch=params.audit.eval_batch)
        arms[arm].update(spec=spec_fields(s), bank_seed=plan["bank_seed"], design=_design_digest(design))
    acc_a, acc_b = arms["A"]["accounting"], arms["B"]["accounting"]
    eps_b_total = composed_epsilon(acc_b["sigma_eff"], sample_rate=acc_b["sample_rate"], steps=acc_b["steps"],
                                   delta=acc_b["delta"], epsilon_q=epsilon_q)
    _guard_budget(name, acc_a, acc_b, tune, epsilon=epsilon, eps_b_total=eps_b_total, q=q, T=T)

    def ci(a: dict) -> list:
        return [a["delta_lo"], a["delta_hi"]]

    la, lb = arms["A"]["alooa_cross_fit"], arms["B"]["alooa_cross_fit"]
    row = {
        "dataset": dataset, "seed": seed, "design": design_key(dataset, seed), "design_sha": arms["A"]["design"],
        "bank_seed": plan["bank_seed"], "n_train": len(data.train), "m": len(design.audit_idx),
        "n_models": int(membership.shape[0]), "quantile_n": int(tune["n"]),
        "clip_A": spec_a.clip, "clip_B": tune["clip"], "clip_nonprivate": tune["nonprivate_percentile"]["value"],
        "sigma_A": acc_a["sigma_eff"], "sigma_B": acc_b["sigma_eff"], "sigma_B_tune_clip": tune["sigma"],
        "q": acc_a["sample_rate"], "T": acc_a["steps"], "delta": acc_a["delta"], "accountant": acc_a["accountant"],
        "eps_A": acc_a["epsilon"], "eps_q": epsilon_q, "eps_B_training": acc_b["epsilon"],
        "eps_B_training_target": acc_b["target_epsilon"], "eps_B_total": eps_b_total,
        "eps_B_training_planned": tune["epsilon_training_alone"], "eps_B_total_planned": tune["epsilon_total"],
        "acc_A": arms["A"]["accuracy"], "acc_B": arms["B"]["accuracy"],
        "delta_A_pp": la["delta_pp"], "delta_B_pp": lb["delta_pp"], "delta_A_ci_pp": ci(la), "delta_B_ci_pp": ci(lb),
        "null_floor_A_pp": la["null_floor_pp"], "null_floor_B_pp": lb["null_floor_pp"],
        "gpr_A": la["gpr"], "gpr_B": lb["gpr"],
        "arms": {k: {"spec": v["spec"], "bank_seed": v["bank_seed"], "design_sha": v["design"],
                     "accounting": v["accounting"]} for k, v in arms.items()},
        "seconds": time.perf_counter() - t0,
    }
    return row


def _summary(dataset: str, rows: list[dict], alpha: float) -> dict:
    from ..audit.pooling import minimal_detectable_effect
    from ..audit.stats import paired_seed_comparison

    def col(k):
        return np.array([r[k] for r in rows], float)

    S = len(rows)
    dd = paired_seed_comparison(col("delta_B_pp"), col("delta_A_pp"), alpha=alpha)  # B − A
    da = paired_seed_comparison(100 * col("acc_B"), 100 * col("acc_A"), alpha=alpha)
    mde_d = minimal_detectable_effect(dd["sd"], S, alpha=alpha)
    mde_a = minimal_detectable_effect(da["sd"], S, alpha=alpha)
    out = {"dataset": dataset, "seeds": S, "clip_A": float(col("clip_A").mean()),
           "clip_B": float(col("clip_B").mean()), "clip_B_range": [float(col("clip_B").min()), float(col("clip_B").max())],
           "clip_nonprivate": float(col("clip_nonprivate").mean()),
           "sigma_A": float(col("sigma_A").mean()), "sigma_B": float(col("sigma_B").mean()),
           "q": float(col("q").max()), "T": int(col("T").max()), "eps_A": float(col("eps_A").max()),
           "eps_q": float(col("eps_q").max()), "eps_B_training": float(col("eps_B_training").max()),
           "eps_B_total": float(col("eps_B_total").max()),
           "acc_A": float(col("acc_A").mean()), "acc_B": float(col("acc_B").mean()),
           "delta_A_pp": float(col("delta_A_pp").mean()), "delta_B_pp": float(col("delta_B_pp").mean()),
           "diff_delta_pp": dd["mean_diff"], "diff_delta_ci_pp": [dd["lo"], dd["hi"]], "diff_delta_p": dd["p_sign_flip"],
           "diff_delta_p_min": dd["p_min"], "diff_delta_sd_pp": dd["sd"], "diff_delta_mde_pp": mde_d,
           "diff_acc_pp": da["mean_diff"], "diff_acc_ci_pp": [da["lo"], da["hi"]], "diff_acc_p": da["p_sign_flip"],
           "diff_acc_sd_pp": da["sd"], "diff_acc_mde_pp": mde_a}
    out["verdict"] = _verdict(out, alpha)
    return out


def _verdict(s: dict, alpha: float) -> str:
    lo, hi = s["diff_delta_ci_pp"]
    S, level = s["seeds"], f"{100 * (1 - alpha):g}%"
    head = (f"a per-dataset C (DP median {s['clip_B']:.3g} vs C = {s['clip_A']:g}) changes Δ by "
            f"{s['diff_delta_pp']:+.2f} pp [{lo:+.2f}, {hi:+.2f}] ({level} t interval over {S} seeds; sign-flip "
            f"p = {s['diff_delta_p']:.3g}, the smallest attainable {s['diff_delta_p_min']:.3g})")
    if lo <= 0 <= hi:
        tail = f"not distinguishable from 0 at {S} seeds (MDE {s['diff_delta_mde_pp']:.2f} pp at 80% power)"
    else:
        tail = (f"the interval excludes 0 at {S} seeds (MDE {s['diff_delta_mde_pp']:.2f} pp at 80% power)"
                + ("; the sign-flip test cannot reach p < 0.05 below 6 seeds" if S < 6 else ""))
    alo, ahi = s["diff_acc_ci_pp"]
    return (f"{head}; {tail}. Accuracy changes by {s['diff_acc_pp']:+.2f} pp [{alo:+.2f}, {ahi:+.2f}] "
            f"(MDE {s['diff_acc_mde_pp']:.2f} pp).")


def clip_study(params: Params, datasets: list[str] | tuple[str, ...] = DATASETS, *, seeds: int = 4,
               epsilon: float = 10.0, epsilon_q: float = EPSILON_Q, quantile: float = 0.5, model: str = "lr",
               progress: bool = True) -> dict:
    """Run the study (both arms for every dataset and seed 0..seeds−1) and return its results (the JSON's content):
    ``configs`` (one row per dataset and seed, :data:`CONFIG_COLUMNS` and more) and ``datasets`` (one row per
    dataset, :data:`SUMMARY_COLUMNS` and more)."""
    from tqdm.auto import tqdm

    from ..data.base import load

    datasets = list(datasets)
    if not datasets:
        raise ValueError("clip study: no dataset given")
    if not 0 < epsilon_q < epsilon:
        raise ValueError(f"clip study: ε_q = {epsilon_q} must lie in (0, ε = {epsilon})")
    p = study_params(params, datasets, seeds=seeds, epsilon=epsilon, model=model)
    t0 = time.perf_counter()
    rows, summaries = [], []
    bar = tqdm(total=len(datasets) * seeds, desc="clip study (dataset × seed, arms A and B)", disable=not progress)
    for d in datasets:
        data = load(p.resolve(p.data.prepared_dir) / d)
        mine = []
        for s in range(seeds):
            bar.set_postfix_str(f"{d} s{s}")
            mine.append(_config(p, d, s, data, model=model, epsilon=epsilon, epsilon_q=epsilon_q, quantile=quantile))
            bar.update()
        rows += mine
        summaries.append(_summary(d, mine, p.audit.alpha))
    bar.close()
    a = p.audit
    return {
        "study": "clip-study", "profile": params.profile, "params_seed": params.seed, "model": model,
        "datasets_run": datasets, "seeds": list(range(seeds)), "epsilon": epsilon, "epsilon_q": epsilon_q,
        "quantile": quantile, "delta": p.train.delta, "accountant": p.train.accountant, "alpha": a.alpha,
        "design": {"m": a.m, "R": a.R, "n_models": 2 * a.R, "min_per_group": a.min_per_group, "n_perm": a.n_perm,
                   "n_null": a.n_null, "keys": "<dataset>-s<seed>, drawn as the design stage draws them"},
        "quantile_release": {
            "mechanism": "exponential mechanism over 241 log-spaced public candidates in [1e-3, 1e3], u = −|#{‖g‖ ≤ c}"
                         " − p·n| (sensitivity 1), on the initial model's per-sample gradient norms "
                         "(fairdp_core.study.clip_tuning.tune_clip)",
            "data": "the records every model of the bank trains on (the training pool less the audited records); "
                    "one release per dataset and seed, shared by the bank's 2R models",
            "charged": f"ε_q = {epsilon_q:g} pure DP, i.e. (α, min(ε_q, α ε_q²/2))-RDP, added to DP-SGD's RDP at every "
                       f"order; training's σ is calibrated so that the total is ε = {epsilon:g}"},
        "configs": rows, "datasets": summaries, "seconds": time.perf_counter() - t0,
    }


def _f(x, fmt: str = ".3g") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return format(x, fmt)


def _ci(v, fmt: str = "+.2f") -> str:
    lo, hi = v
    return "—" if lo is None or hi is None else f"[{format(lo, fmt)}, {format(hi, fmt)}]"


def markdown(res: dict) -> str:
    """The study as a page: what was run, the per-dataset table and verdicts, the per-seed table."""
    eps, eq = res["epsilon"], res["epsilon_q"]
    d = res["design"]
    level = f"{100 * (1 - res['alpha']):g}%"
    lines = [
        "# Clip study: does a per-dataset clipping bound C change Δ?", "",
        f"`fairdp clip-study` (fairdp_core/study/clip_study.py), profile {res['profile']}, "
        f"{res['model'].upper()} on {', '.join(res['datasets_run'])}, ε = {eps:g} in total, δ = {res['delta']:g}, "
        f"{res['accountant'].upper()} accountant, Poisson sampling. Seeds {', '.join(map(str, res['seeds']))}; "
        f"per dataset and seed, both arms share the audit design (m = {d['m']} audited records, 2R = {d['n_models']} "
        f"models; the design stage's `<dataset>-s<seed>`), the initialisations and the Poisson batches (the "
        "pipeline's bank seed), and the stats seed; only their noise streams differ.",
        "",
        f"- **A**: DP-SGD at the profile's C, σ calibrated to ε = {eps:g}.",
        f"- **B**: DP-SGD at C = the ε_q-DP median (ε_q = {eq:g}) of the initial model's per-sample gradient norms, "
        "released once per dataset and seed by the exponential mechanism on the records every model trains on. "
        f"**The median's ε is charged**: its RDP, min(ε_q, α ε_q²/2) at order α, is added to training's, and "
        f"training's σ is calibrated so that the total is ε = {eps:g} (ε total = quantile + training); the engine's "
        "σ is checked against tune_clip's.",
        "- The non-private median of the same norms is shown beside C for comparison: choosing C from it would be "
        "**tuning outside ε** (it reads every record without noise); neither arm uses it.",
        f"- Δ: PA-ALOOA cross-fitted (max − min group GPR, pp). B − A: mean of the per-seed differences with its "
        f"{level} t interval over seeds, the exact sign-flip p (its smallest attainable value is 2/2^S), and the "
        "minimal detectable effect (MDE) of a paired t test at 80% power from the seeds' SD.",
        "",
        "| dataset | seeds | C (A) | C (B, DP median) | non-private median (tuning outside ε) | σ (A) | σ (B) | q | T | "
        "ε (A) | ε (B: quantile + training) | accuracy A (%) | accuracy B (%) | Δ A (pp) | Δ B (pp) | "
        f"Δ: B − A (pp) [{level}] | p (sign flip) | MDE Δ (pp) | accuracy: B − A (pp) [{level}] | MDE accuracy (pp) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in res["datasets"]:
        lo_c, hi_c = s["clip_B_range"]
        lines.append(
            f"| {s['dataset']} | {s['seeds']} | {_f(s['clip_A'], 'g')} | {_f(s['clip_B'])} "
            f"({_f(lo_c)}–{_f(hi_c)}) | {_f(s['clip_nonprivate'])} | {_f(s['sigma_A'], '.4g')} | "
            f"{_f(s['sigma_B'], '.4g')} | {_f(s['q'], '.3g')} | {s['T']} | {_f(s['eps_A'], '.3f')} | "
            f"{_f(s['eps_q'], 'g')} + {_f(s['eps_B_training'], '.3f')} → {_f(s['eps_B_total'], '.3f')} | "
            f"{_f(100 * s['acc_A'], '.1f')} | {_f(100 * s['acc_B'], '.1f')} | {_f(s['delta_A_pp'], '.2f')} | "
            f"{_f(s['delta_B_pp'], '.2f')} | {_f(s['diff_delta_pp'], '+.2f')} {_ci(s['diff_delta_ci_pp'])} | "
            f"{_f(s['diff_delta_p'], '.3g')} | {_f(s['diff_delta_mde_pp'], '.2f')} | {_f(s['diff_acc_pp'], '+.2f')} "
            f"{_ci(s['diff_acc_ci_pp'])} | {_f(s['diff_acc_mde_pp'], '.2f')} |")
    lines += ["", "ε (B) reads ε_q + ε of training alone → ε of the two composed (RDP): composition under RDP costs "
              "less than the sum. ε is the maximum over seeds, C (B) the mean (range) over seeds; σ, accuracy and Δ "
              "the means.", "", "**Verdicts**", ""]
    lines += [f"- **{s['dataset']}**: {s['verdict']}" for s in res["datasets"]]
    lines += ["", "Per seed:", "",
              "| dataset | seed | C (B) | non-private median | σ (A) | σ (B) (tune_clip's) | ε (A) | ε (B) training → "
              "total | accuracy A / B (%) | Δ A (pp) [95%] | Δ B (pp) [95%] | seconds |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["configs"]:
        lines.append(
            f"| {r['dataset']} | {r['seed']} | {_f(r['clip_B'])} | {_f(r['clip_nonprivate'])} | "
            f"{_f(r['sigma_A'], '.4g')} | {_f(r['sigma_B'], '.4g')} ({_f(r['sigma_B_tune_clip'], '.4g')}) | "
            f"{_f(r['eps_A'], '.3f')} | {_f(r['eps_B_training'], '.3f')} → {_f(r['eps_B_total'], '.3f')} | "
            f"{_f(100 * r['acc_A'], '.1f')} / {_f(100 * r['acc_B'], '.1f')} | {_f(r['delta_A_pp'], '.2f')} "
            f"{_ci(r['delta_A_ci_pp'], '.2f')} | {_f(r['delta_B_pp'], '.2f')} {_ci(r['delta_B_ci_pp'], '.2f')} | "
            f"{r['seconds']:.0f} |")
    lines += ["", f"Wall time {res['seconds']:.0f} s. Data: clip_study.json (every number above, each arm's spec and "
              "accounting, per-group GPR).", ""]
    return "\n".join(lines)


def write_clip_study(res: dict, out: str | os.PathLike = "reports/tuning") -> tuple[Path, Path]:
    """``clip_study.json`` and ``clip_study.md`` in ``out``, each written atomically."""
    from ..atomic import jsonable, write_text

    out = Path(out)
    js, md = out / "clip_study.json", out / "clip_study.md"
    write_text(js, json.dumps(jsonable(res), indent=1) + "\n")
    write_text(md, markdown(res))
    return js, md
