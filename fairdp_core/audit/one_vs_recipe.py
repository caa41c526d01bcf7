"""How far a one-model group audit can be trusted: the one-model audit (:mod:`fairdp_core.audit.one`) of every model
of a bank, against the recipe audit of the same bank (PA-ALOOA cross-fitted over its 2R models, the study's).

Within a bank, model j's members are the audited records it trained on and its non-members the audited records it
did not (the other half of the same draw: a clean held-out set). For each model: the one-model advantage per group
and its Δ. Per bank: how often the one-model audit names the recipe's riskiest group, the rank correlation of the
groups' one-model advantages with the recipe's GPRs (Spearman; three or more groups), and the bias and spread of the
one-model Δ against the recipe's Δ. Beside it, the training-time proxies at the end of training
(:class:`~fairdp_core.audit.proxy.GroupProxy`'s loss gap per model, the per-group clipped fraction per bank): how
often they name the recipe's riskiest group, and their rank correlation with it.

``fairdp one-vs-recipe`` runs it over a profile's trained runs and writes ``comparison.csv`` and ``comparison.md``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as st

from .one import audit_one

__all__ = ["compare_bank", "compare_runs", "write_comparison"]


def _ranking(values: pd.Series, recipe: pd.Series) -> tuple[str, float]:
    """The group ``values`` rank riskiest, and their Spearman correlation with the recipe's GPRs (three or more
    groups; NaN otherwise)."""
    rho = float(st.spearmanr(values, recipe).statistic) if len(recipe) >= 3 else np.nan
    return values.idxmax(), rho


def _one_per_pair(membership: np.ndarray) -> list[int]:
    """The models to compare: one of each complementary pair (rows 2i, 2i+1 of the study's design). The two models
    of a pair train on opposite halves of the audited records and are nearly the same function (LR banks: their
    losses correlate at 0.998), so their one-model advantages per group are mirror images and always name opposite
    groups: counting both would pin every two-group agreement rate at 50% by construction. Without pairs: every
    model."""
    M = membership.shape[0]
    paired = M % 2 == 0 and M > 0 and bool((membership[0::2] ^ membership[1::2]).all())
    return list(range(0, M, 2)) if paired else list(range(M))


def compare_bank(loss: np.ndarray, membership: np.ndarray, group: np.ndarray, names: list[str],
                 recipe_gpr_pp: dict[str, float], *, clipped: dict[str, float] | None = None, n_null: int = 20,
                 min_per_group: int = 10, seed: int = 0) -> dict:
    """``loss`` and ``membership`` [M, m] of a bank's audited records, ``group`` [m] (codes into ``names``), the
    recipe audit's GPR per group (pp), and the bank's per-group clipped fractions (DP runs). Returns the per-model
    results (one model of each complementary pair, :func:`_one_per_pair`) and the bank's agreement summary: the
    one-model audit's, and the training-time proxies' (the loss gap of :class:`~fairdp_core.audit.proxy.GroupProxy`
    at the end of training, per model: each group's mean loss on the model's non-members minus on its members; the
    clipped fraction, per bank, over the whole of training)."""
    names_arr = np.asarray(names, dtype=object)[np.asarray(group)]
    recipe = pd.Series(recipe_gpr_pp, dtype=float)
    riskiest = recipe.idxmax()
    rows = []
    for j in _one_per_pair(np.asarray(membership, bool)):
        s, m = -np.asarray(loss[j], float), np.asarray(membership[j], bool)
        res = audit_one(s[m], s[~m], names_arr[m], names_arr[~m], n_null=n_null, min_per_group=min_per_group,
                        seed=seed + j)
        adv = res.table().set_index("group")["gpr_pp"].reindex(recipe.index)
        gap = pd.Series({k: float(s[m & (names_arr == k)].mean() - s[~m & (names_arr == k)].mean())
                         for k in recipe.index})  # held-out loss − training loss (s is the negated loss)
        top, rho = _ranking(adv, recipe)
        gap_top, gap_rho = _ranking(gap, recipe)
        rows.append({"model": j, "delta_pp": res.delta()["delta_pp"], "riskiest": top, "spearman": rho,
                     "gap_riskiest": gap_top, "gap_spearman": gap_rho, **{f"adv_{k}": v for k, v in adv.items()}})
    per = pd.DataFrame(rows)
    recipe_delta = float(recipe.max() - recipe.min())
    clip = pd.Series(clipped or {}, dtype=float).reindex(recipe.index)
    clip_top, clip_rho = _ranking(clip, recipe) if clip.notna().all() and clip.nunique() > 1 else (None, np.nan)

    def mean(col: str) -> float:
        return float(per[col].mean()) if per[col].notna().any() else np.nan

    return {"per_model": per, "n_models": len(per), "n_groups": len(recipe), "recipe_riskiest": riskiest,
            "recipe_delta_pp": recipe_delta, "riskiest_agrees": float((per.riskiest == riskiest).mean()),
            "spearman_mean": mean("spearman"),
            "one_delta_mean_pp": float(per.delta_pp.mean()), "one_delta_sd_pp": float(per.delta_pp.std(ddof=1)),
            "bias_pp": float(per.delta_pp.mean() - recipe_delta),
            "gap_riskiest_agrees": float((per.gap_riskiest == riskiest).mean()), "gap_spearman_mean": mean(
                "gap_spearman"),
            "clip_riskiest_agrees": np.nan if clip_top is None else float(clip_top == riskiest),
            "clip_spearman": clip_rho}


def compare_runs(results_dir: str | os.PathLike, runs: dict[str, dict], *, n_null: int = 20,
                 progress: bool = True) -> pd.DataFrame:
    """:func:`compare_bank` over ``runs`` (name -> run fields, as params.runs) that have a recipe audit in
    ``results_dir`` (a profile's ``results/``: train, audit, plan and designs); one row per run."""
    from tqdm.auto import tqdm

    from .design import AuditDesign

    out = []
    res_dir = Path(results_dir)
    audit_dir, train_dir = res_dir / "audit", res_dir / "train"
    todo = [n for n in runs if (audit_dir / n / "summary.json").is_file()]
    for name in tqdm(todo, desc="one model vs recipe", disable=not progress):
        r = runs[name]
        summary = json.loads((audit_dir / name / "summary.json").read_text())
        groups = pd.read_csv(audit_dir / name / "groups.csv")
        cf = groups[groups.attack == "alooa_cross_fit"]
        names = [str(x) for x in summary["group_names"]]
        recipe = {str(k): 100 * v for k, v in zip(cf["group_name"], cf["gpr"])}
        with np.load(train_dir / name / "signals.npz") as z:
            loss = z["loss"]
        plan = json.loads((res_dir / "plan" / "attack" / f"{name}.json").read_text())
        design = AuditDesign.load(res_dir / "designs" / f"{plan['design']}.npz")
        clipped = {str(k): c.get("clipped_fraction") for k, c in (summary.get("clipping") or {}).items()}
        res = compare_bank(loss, design.membership, design.audit_group, names, recipe,
                           clipped=clipped if clipped and None not in clipped.values() else None, n_null=n_null)
        out.append({"run": name, "dataset": r["dataset"], "model": r["model"], "algorithm": r["algorithm"],
                     "epsilon": r["epsilon"], **{k: v for k, v in res.items() if k != "per_model"}})
    return pd.DataFrame(out)


def _share(df: pd.DataFrame, col: str) -> float:
    """A per-model rate pooled over banks (weighted by the models compared)."""
    return float((df[col] * df.n_models).sum() / df.n_models.sum()) if len(df) else np.nan


def _proxy_sentence(df: pd.DataFrame) -> str:
    """How well the training-time proxies track the recipe audit's group ranking at the end of training."""
    multi, two = df[df.n_groups >= 3], df[df.n_groups == 2]
    clip = df[df.clip_riskiest_agrees.notna()]
    clip2, clip_multi = clip[clip.n_groups == 2], clip[clip.n_groups >= 3]
    parts = [f"The training-time proxy (`GroupProxy`: per group, held-out minus training mean loss, one model at the "
             f"end of training) names the recipe's riskiest group in {100 * _share(two, 'gap_riskiest_agrees'):.0f}% "
             "of the models with two groups (chance 50%)" if len(two) else "The training-time proxy"]
    if len(multi):
        parts.append(f"{100 * _share(multi, 'gap_riskiest_agrees'):.0f}% with {int(multi.n_groups.max())} groups "
                     f"(chance {100 / multi.n_groups.max():.0f}%), with a mean Spearman correlation of "
                     f"{multi.gap_spearman_mean.mean():.2f} with the recipe's ranking")
    out = ", ".join(parts) + "."
    if len(clip):
        out += (" The per-group share of clipped gradients over training (DP runs, one value per bank) ranks the "
                f"recipe's riskiest group highest in {int(clip2.clip_riskiest_agrees.sum())} of {len(clip2)} two-group "
                "banks" + (f" and {int(clip_multi.clip_riskiest_agrees.sum())} of {len(clip_multi)} ten-group banks "
                           f"(mean Spearman {clip_multi.clip_spearman.mean():.2f})" if len(clip_multi) else "") + ".")
    return out + " Where these are near chance, the proxy does not track the audit: it is a diagnostic, not an audit."


def write_comparison(df: pd.DataFrame, out: str | os.PathLike) -> Path:
    """comparison.csv and comparison.md (a table and the answer in two sentences) in ``out``."""
    from ..atomic import write_text

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "comparison.csv", df.to_csv(index=False, float_format="%.6g"))
    multi, two = df[df.n_groups >= 3], df[df.n_groups == 2]
    lines = ["# One model against its recipe: how far a one-model group audit can be trusted", "",
             f"Over {len(df)} banks ({int(df.n_models.sum())} models compared: one of each complementary pair, "
             "whose two models are mirror images of each other), the one-model audit of a single model names the "
             f"recipe audit's riskiest group in {100 * _share(two, 'riskiest_agrees'):.0f}% of the models with two "
             "groups (chance 50%)"
             + (f" and {100 * _share(multi, 'riskiest_agrees'):.0f}% with {int(multi.n_groups.max())} (chance "
                f"{100 / multi.n_groups.max():.0f}%), and its group ranking has a mean Spearman correlation of "
                f"{multi.spearman_mean.mean():.2f} with the recipe's there ({len(multi)} banks)" if len(multi) else "")
             + f". Its Δ is {df.bias_pp.mean():+.2f} pp off the recipe's on average (mean over banks), with a "
               f"between-model SD of {df.one_delta_sd_pp.mean():.2f} pp within a bank.", "",
             _proxy_sentence(df), "",
             "| run | groups | models | recipe Δ (pp) | one-model Δ mean ± SD (pp) | riskiest agrees | Spearman | "
             "loss gap: riskiest agrees | loss gap: Spearman | clipped fraction: riskiest agrees |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def num(x: float, fmt: str) -> str:
        return "—" if x is None or np.isnan(x) else format(x, fmt)

    for r in df.itertuples():
        clip = "—" if np.isnan(r.clip_riskiest_agrees) else ("yes" if r.clip_riskiest_agrees else "no")
        lines.append(f"| {r.run} | {r.n_groups} | {r.n_models} | {r.recipe_delta_pp:.2f} | {r.one_delta_mean_pp:.2f} "
                     f"± {r.one_delta_sd_pp:.2f} | {100 * r.riskiest_agrees:.0f}% | {num(r.spearman_mean, '.2f')} | "
                     f"{100 * r.gap_riskiest_agrees:.0f}% | {num(r.gap_spearman_mean, '.2f')} | {clip} |")
    write_text(out / "comparison.md", "\n".join(lines) + "\n")
    return out
