# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # DP-SGD-S sweep: how do τ and γ move Δ and accuracy, against DP-SGD at the same ε?
#
# [← the index: findings and main table](index.html)
#
# DP-SGD-S clips group k to C_k = max(τ·Q_k, C_min), where Q_k tracks the γ-quantile of group k's gradient norms
# through noised counts; the counts' privacy cost is composed into the accountant (σ_eff), so every ε below covers
# everything released by that model (ε is per model and per release: every setting draws its own noise). DP-SGD at
# the same ε is the baseline. Attack: PA-ALOOA, cross-fitted. The sweep is reported whole: picking its best setting
# would be tuning on private data, outside ε.

# %% tags=["parameters"]
# papermill sets these; left as None (e.g. run top to bottom in JupyterLab from notebooks/), they are
# taken from params_file exactly as the pipeline would pass them.
params_file = "../params.yaml"
train_dir = None
results_dir = None
prepared_dir = None
figures_dir = None
metrics_path = None
runs = None
profile = None
alpha = None
sweep = None

# %%

from pathlib import Path

import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from fairdp_core.audit.stats import seed_mean_interval
from fairdp_core.reporting import helpers as rh
from fairdp_core.reporting import plots, results

PARAMETERS = ("train_dir", "results_dir", "prepared_dir", "figures_dir", "metrics_path", "runs", "profile", "alpha", "sweep")
globals().update(rh.fill_parameters("dpsgd_s_sweep", params_file, {k: globals()[k] for k in PARAMETERS}))  # None: params
show, table = rh.shower(figures_dir), rh.tabler(figures_dir)
summaries, runs_df, groups_df = rh.frames(results_dir, runs)

# %%
if sweep is None:
    display(Markdown("This profile has no sweep."))
    sw = runs_df.iloc[0:0]
else:
    sw = runs_df[(runs_df.dataset == sweep["dataset"]) & (runs_df.model == sweep["model"])
                 & (runs_df.attack == "alooa_cross_fit") & runs_df.algorithm.isin(["dpsgd", "dpsgd_s"])
                 & runs_df.epsilon.isin(sweep["epsilons"]) & runs_df.seed.lt(sweep["seeds"])].copy()
    sw = sw[(sw.algorithm == "dpsgd") | sw.tau.notna()]
    sw["setting"] = np.where(sw.algorithm == "dpsgd", "DP-SGD",
                             "DP-SGD-S τ = " + sw.tau.map("{:g}".format) + ", γ = " + sw.gamma.map("{:g}".format))
    sw["accuracy_pct"] = 100 * sw["accuracy"]


def over_seeds(g: pd.DataFrame) -> pd.Series:
    """Mean over seeds with the t interval of the mean (Δ and accuracy); one seed: no interval."""
    d, a = seed_mean_interval(g["delta_pp"].to_numpy(float)), seed_mean_interval(g["accuracy_pct"].to_numpy(float))
    nan = float("nan")
    # Δ ≥ 0: the t interval's lower end is clipped at 0 (coverage unchanged)
    return pd.Series({"seeds": d["n_seeds"], "delta_pp": d["mean"], "lo": nan if d["lo"] is None else max(0.0, d["lo"]),
                      "hi": nan if d["hi"] is None else d["hi"], "accuracy_pct": a["mean"],
                      "acc_lo": nan if a["lo"] is None else a["lo"], "acc_hi": nan if a["hi"] is None else a["hi"],
                      "acc_sd": nan if a["sd"] is None else a["sd"], "null_floor_pp": g["null_floor_pp"].mean()})


if len(sw):
    per = sw.groupby(["setting", "algorithm", "epsilon", "tau", "gamma"], dropna=False, sort=False).apply(
        over_seeds, include_groups=False).reset_index()
    per["eps_label"] = per["epsilon"].map(results.eps_label)
    # every setting, for `dvc plots show` (dvc.yaml plots: Δ against τ) and for readers
    per[["setting", "epsilon", "tau", "gamma", "seeds", "delta_pp", "lo", "hi", "null_floor_pp", "accuracy_pct",
         "acc_lo", "acc_hi"]].to_csv(Path(figures_dir) / "sweep.csv", index=False, float_format="%.6g")
    display(Markdown(f"Every setting as CSV: [figures/{Path(figures_dir).name}/sweep.csv]"
                     f"(figures/{Path(figures_dir).name}/sweep.csv)"))
    table(per[["eps_label", "setting", "seeds", "delta_pp", "lo", "hi", "null_floor_pp", "accuracy_pct", "acc_lo",
               "acc_hi"]].rename(columns={"lo": "Δ low (pp)", "hi": "Δ high (pp)", "acc_lo": "accuracy low (%)",
                                         "acc_hi": "accuracy high (%)"}),
          "Every setting of the sweep: Δ (pp) and accuracy (%), mean over seeds of the per-seed values with the 95% t "
          "interval of the mean (Δ's clipped at 0; the index gives Δ of the seed-averaged GPRs instead, so the same "
          "runs can differ there by a few hundredths)",
          csv="sweep_settings")
    acct = sw[["run_label", "sigma_g", "sigma_b", "q", "T", "eps_spent", "accountant"]].rename(
        columns={"run_label": "run"}).assign(accountant=lambda d: d["accountant"].str.upper())
    table(acct, "The accounting of every sweep run: σ_g (gradient noise), σ_b (count noise), q (Poisson sampling "
          "rate), T steps; ε spent at δ from the accountant", "{:.4g}", csv="sweep_accounting")

# %% [markdown]
# ## Against τ (one line per γ)
# DP-SGD-S's Δ and accuracy against τ, mean over seeds with the 95% t interval of the mean; DP-SGD at the same ε is
# the band. The main setting of the grid is τ = 1, γ = 0.75.

# %%
if len(sw):
    for eps, g in per.groupby("epsilon"):
        s_only = g[g.algorithm == "dpsgd_s"]
        base = g[g.algorithm == "dpsgd"]
        show(plots.sweep_lines(s_only, "tau", line="gamma", base=base,
                               title=f"{results.setting_label(sweep['dataset'], sweep['model'])}, {results.eps_label(eps)}"),
             f"sweep_tau_e{eps:g}", f"Δ (pp, left) and accuracy (%, right) against τ at {results.eps_label(eps)}: "
             "DP-SGD-S, one line style per γ; DP-SGD as the shaded band (its 95% interval over seeds).")

# %% [markdown]
# ## Accuracy against Δ
# Each sweep setting (mean over seeds) with error bars: the Δ interval (vertical) and the SD of accuracy over seeds
# (horizontal). Lower Δ and higher accuracy are better; the dashed line joins the Pareto front.

# %%
if len(sw):
    par = per.assign(label=np.where(per.algorithm == "dpsgd", "DP-SGD", "DP-SGD-S"), delta_lo=per["lo"],
                     delta_hi=per["hi"], acc_err=per["acc_sd"], panel=per["eps_label"])
    show(plots.pareto(par, panel="panel"), "pareto",
         "Accuracy (%) against Δ (pp) for every sweep setting and DP-SGD, one panel per ε; error bars as above.")

# %% [markdown]
# ## Findings in detail

# %%
if len(sw):
    lines = ["Every setting of the sweep is listed; none is selected. Choosing τ or γ from these Δ would be **tuning "
             "outside ε**: the Δ are measured on the audited training records themselves, so the choice depends on "
             "private data that no ε here accounts for, and the minimum over settings is biased downward (the "
             "lowest of several noisy estimates). To select, use seeds disjoint from the ones reported and report a "
             "fresh run.", ""]
    for eps, g in sw.groupby("epsilon"):
        w = g.pivot_table(index="seed", columns="setting", values=["delta_pp", "accuracy_pct"])
        rows = []
        for st in [c for c in w["delta_pp"].columns if c != "DP-SGD"]:
            d = seed_mean_interval((w["delta_pp"][st] - w["delta_pp"]["DP-SGD"]).dropna().to_numpy())
            a = seed_mean_interval((w["accuracy_pct"][st] - w["accuracy_pct"]["DP-SGD"]).dropna().to_numpy())
            rows.append((st, d, a))
        lower = [st for st, d, _ in rows if d["hi"] is not None and d["hi"] < 0]
        higher = [st for st, d, _ in rows if d["lo"] is not None and d["lo"] > 0]
        cost = [st for st, _, a in rows if a["hi"] is not None and a["hi"] < 0]
        gain = [st for st, _, a in rows if a["lo"] is not None and a["lo"] > 0]
        n = min((d["n_seeds"] for _, d, _ in rows), default=0)
        lines.append(f"- {results.eps_label(eps)}, paired with DP-SGD on the same seeds ({n} each; 95% t interval of "
                     f"the mean difference): Δ lower than DP-SGD's in **{len(lower)}** of {len(rows)} settings"
                     + (f" ({', '.join(lower)})" if lower else "") + f", higher in {len(higher)}"
                     + (f" ({', '.join(higher)})" if higher else "") + f"; accuracy lower in {len(cost)}"
                     + (f" ({', '.join(cost)})" if cost else "") + f" and higher in {len(gain)}"
                     + (f" ({', '.join(gain)})" if gain else "") + "."
                     + (f" With {n} seed{'s' if n != 1 else ''} the sign-flip test cannot reach p < 0.05 (smallest p "
                        f"{2 / 2 ** n:.2g}): these intervals rest on normality." if n < 6 else "")
                     + (f" With {n} seeds a t interval has {n - 1} degree of freedom: too wide to tell these settings' "
                        "Δ from DP-SGD's (`make repro PROFILE=full` runs 3 seeds and 5 τ)."
                        if n == 2 and not lower and not higher else ""))
    display(Markdown("\n".join(lines)))
    counts = {"lower": len(lower), "higher": len(higher), "cost": len(cost), "n_settings": len(rows), "seeds": n}
else:
    counts = {}

# %% tags=["findings"]
# the page's answer, shown first (reporting moves this cell under the title)
if counts:
    found = rh.findings(
        [f"At {results.eps_label(eps)} (the largest ε swept), paired with DP-SGD on the same seeds "
         + "({seeds} each), DP-SGD-S's Δ is lower than DP-SGD's in **{lower} of {n_settings}** (τ, γ) settings and "
         "higher in {higher}; its accuracy is lower in {cost} (95% t intervals of the mean difference).",
         "Every setting is shown and none is selected: choosing τ or γ from these Δ, measured on the training "
         "records themselves, would be tuning outside ε."], counts)
else:
    found = rh.findings(["This profile runs no sweep of τ and γ.",
                         "`make repro PROFILE=full` runs one (3 seeds, 5 values of τ)."], {})
if len(sw):
    rh.write_metrics(metrics_path, {**found, **{f"e{r.epsilon:g}-" + ("dpsgd" if r.algorithm == "dpsgd" else f"t{r.tau:g}-g{r.gamma:g}"):
                                    {"delta_pp": r.delta_pp, "accuracy": r.accuracy_pct / 100}
                                    for r in per.itertuples()}})
else:
    rh.write_metrics(metrics_path, found)
