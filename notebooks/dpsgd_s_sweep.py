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
# # DP-SGD-S sweep: Δ and accuracy against τ, γ and ε
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
from IPython.display import Markdown, display

from fairdp_core import plots
from fairdp_core import report_helpers as rh

PARAMETERS = ("train_dir", "results_dir", "prepared_dir", "figures_dir", "metrics_path", "runs", "profile", "alpha", "sweep")
globals().update(rh.fill_parameters("dpsgd_s_sweep", params_file, {k: globals()[k] for k in PARAMETERS}))  # None: params
show, table = rh.shower(figures_dir), rh.table
summaries, runs_df, groups_df = rh.frames(results_dir, runs)

# %%
if sweep is None:
    display(Markdown("This profile has no sweep."))
    sw = runs_df.iloc[0:0]
else:
    sw = runs_df[(runs_df.dataset == sweep["dataset"]) & (runs_df.model == sweep["model"])
                 & (runs_df.attack == "alooa_cross_fit") & runs_df.algorithm.isin(["dpsgd", "dpsgd_s"])].copy()
    sw = sw[(sw.algorithm == "dpsgd") | sw.tau.notna()]
    sw["setting"] = np.where(sw.algorithm == "dpsgd", "DP-SGD", "DP-SGD-S τ=" + sw.tau.astype(str) + " γ=" + sw.gamma.astype(str))
    table(sw[["setting", "epsilon", "seed", "accuracy", "delta_pp", "null_floor_pp", "delta_lo", "delta_hi", "p_delta", "sigma_g", "sigma_b", "q", "T", "eps_spent"]])
    sw[["setting", "epsilon", "tau", "gamma", "accuracy", "delta_pp", "null_floor_pp", "delta_lo", "delta_hi"]].to_csv(Path(figures_dir) / "sweep.csv", index=False)

# %% [markdown]
# ## Against ε

# %%
if len(sw):
    show(plots.delta_vs(sw, "epsilon", hue="setting", title=f"{sweep['dataset']} / {sweep['model']}"), "delta_vs_epsilon")

# %% [markdown]
# ## Against τ (one line per γ and ε)

# %%
if len(sw):
    s_only = sw[sw.algorithm == "dpsgd_s"].copy()
    s_only["γ, ε"] = "γ=" + s_only.gamma.astype(str) + ", ε=" + s_only.epsilon.astype(str)
    show(plots.delta_vs(s_only, "tau", hue="γ, ε", title="DP-SGD-S against τ"), "delta_vs_tau")

# %% [markdown]
# ## Pareto front of Δ against accuracy

# %%
if len(sw):
    sw["label"] = sw["setting"]
    show(plots.pareto(sw, title="lower Δ and higher accuracy are better"), "pareto")

# %% [markdown]
# ## Findings

# %%
if len(sw):
    lines = ["Every setting of the sweep is listed; none is selected. Choosing τ or γ from these Δ would be **tuning "
             "outside ε**: the Δ are measured on the audited training records themselves, so the choice depends on "
             "private data that no ε here accounts for, and the minimum over settings is biased downward (the "
             "lowest of several noisy estimates). To select, use seeds disjoint from the ones reported and report a "
             "fresh run.", ""]
    for eps, g in sw.groupby("epsilon"):
        base = g[g.algorithm == "dpsgd"]["delta_pp"].mean()
        per = g[g.algorithm == "dpsgd_s"].groupby("setting")[["delta_pp", "accuracy"]].mean()
        lines.append(f"- ε = {eps:g}: DP-SGD Δ = {base:.2f} pp (plug-in); DP-SGD-S: "
                     + "; ".join(f"{k} {r.delta_pp:.2f} pp ({100 * r.accuracy:.2f}%)" for k, r in per.iterrows()) + ".")
    display(Markdown("\n".join(lines)))
    rh.write_metrics(metrics_path, {f"e{e:g}-" + ("dpsgd" if k == "DP-SGD" else k.replace("DP-SGD-S ", "").replace(" ", "-")): float(v)
               for e, g in sw.groupby("epsilon") for k, v in g.groupby("setting")["delta_pp"].mean().items()},
              )
else:
    rh.write_metrics(metrics_path, {})
