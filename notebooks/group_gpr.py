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
# # Group privacy risk: SGD, DP-SGD and DP-SGD-S on every dataset
#
# GPR per group (mean PA-ALOOA cross-fitted advantage, pp) with 95% intervals over records × model pairs (coverage-checked: reports/coverage/), and
# what DP-SGD-S changes: which groups got safer (leveling up) and which got riskier (leveling down), from paired
# per-record differences on the same audit records.

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
seed = None

# %%
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from fairdp_core import plots, results
from fairdp_core import report_helpers as rh
from fairdp_core.audit import stats

PARAMETERS = ("train_dir", "results_dir", "prepared_dir", "figures_dir", "metrics_path", "runs", "profile", "alpha", "seed")
globals().update(rh.fill_parameters("group_gpr", params_file, {k: globals()[k] for k in PARAMETERS}))  # None: params
show, table = rh.shower(figures_dir), rh.table
summaries, runs_df, groups_df = rh.frames(results_dir, runs)

# %%
main = groups_df[(groups_df.attack == "alooa_cross_fit") & groups_df.tau.isna()]
settings = main[["dataset", "model", "epsilon"]].drop_duplicates()
for _, st in settings.iterrows():
    eps_mask = main.epsilon.isna() | (main.epsilon == st.epsilon) if pd.notna(st.epsilon) else main.epsilon.isna()
    sub = main[(main.dataset == st.dataset) & (main.model == st.model) & eps_mask]
    if pd.isna(st.epsilon) or sub.algorithm.nunique() < 2:
        continue
    agg = sub.groupby(["label", "group"], sort=False)[["gpr", "gpr_lo", "gpr_hi"]].mean().reset_index()
    show(plots.gpr_by_group(agg, title=f"{st.dataset} / {st.model}, ε = {st.epsilon:g} (SGD: no DP)"),
         f"gpr_{st.dataset}_{st.model}_e{st.epsilon:g}")

# %% [markdown]
# ## Leveling up or down: GPR(DP-SGD-S) − GPR(DP-SGD) per group
# The riskiest and safest groups under DP-SGD are picked on one half of the audited records and the change is measured
# on the other half, so a group does not "improve" by regression to the mean of record noise. The interval resamples
# records only: it is conditional on the two trained banks (a model × group effect they share is not resampled), and
# it is not among the coverage-checked intervals.

# %%
rng = np.random.default_rng([seed, 1])  # the study seed: the record split and the bootstrap of the leveling
level_rows, seed_rows = [], []
pairs = [(k, v) for k, v in runs.items() if v["algorithm"] == "dpsgd" and v["tau"] is None]
for name_a, ra in pairs:
    name_b = name_a.replace("-dpsgd-", "-dpsgd_s-")
    if name_b not in runs:
        continue
    a, b = results.records(results_dir, name_a), results.records(results_dir, name_b)
    gnames = summaries[name_a]["group_names"]
    # riskiest/safest picked on one half of the audit records, change measured on the other half: picking and
    # measuring on the same records shows "leveling" even between identical algorithms (regression to the mean)
    d = stats.leveling_split(a["alooa_cross_fit"].to_numpy(), b["alooa_cross_fit"].to_numpy(),
                             a["group"].to_numpy(), len(gnames), rng=rng)
    d["group"] = [gnames[k] for k in d["group"]]
    d["setting"] = f"{ra['dataset']}/{ra['model']} ε={ra['epsilon']:g} s{ra['seed']}"
    d["gpr_dpsgd"] = d["gpr_a_pick"]
    level_rows.append(d)
level = pd.concat(level_rows) if level_rows else pd.DataFrame()
if len(level):
    for setting, d in level.groupby("setting", sort=False):
        if setting.endswith("s0"):
            show(plots.level_shift(d, title=setting), "level_" + setting.replace("/", "_").replace(" ", "_").replace("=", "").replace("ε", "e"))
    level["verdict"] = np.where(level.hi < 0, "safer", np.where(level.lo > 0, "riskier", "no clear change"))
    table(level[["setting", "group", "role", "gpr_dpsgd", "change", "lo", "hi", "verdict"]], "{:.4f}")

# %% [markdown]
# ## DP-SGD vs DP-SGD-S across seeds (paired)

# %%
main_runs = runs_df[(runs_df.attack == "alooa_cross_fit") & runs_df.tau.isna() & runs_df.algorithm.isin(["dpsgd", "dpsgd_s"])]
rows = []
for (ds, mo, eps), g in main_runs.groupby(["dataset", "model", "epsilon"]):
    p = g.pivot_table(index="seed", columns="algorithm", values="delta_pp").dropna()
    if len(p) >= 2:
        c = stats.paired_seed_comparison(p["dpsgd_s"].to_numpy(), p["dpsgd"].to_numpy())
        rows.append({"dataset": ds, "model": mo, "epsilon": eps, **c})
paired = pd.DataFrame(rows)
if len(paired):
    table(paired)
else:
    display(Markdown("Fewer than two seeds per setting in this profile: no paired comparison over seeds."))

# %% [markdown]
# ## Findings

# %%
lines = []
if len(level):
    for setting, d in level.groupby("setting", sort=False):
        hi_risk = d[d.role == "riskiest"].iloc[0]
        lo_risk = d[d.role == "safest"].iloc[0]
        lines.append(f"- {setting}: the riskiest group under DP-SGD ({hi_risk.group}) changed by {100 * hi_risk.change:+.2f} pp "
                     f"[{100 * hi_risk.lo:+.2f}, {100 * hi_risk.hi:+.2f}]; the safest ({lo_risk.group}) by "
                     f"{100 * lo_risk.change:+.2f} pp [{100 * lo_risk.lo:+.2f}, {100 * lo_risk.hi:+.2f}].")
for _, r in paired.iterrows():
    lines.append(f"- {r.dataset}/{r.model} ε={r.epsilon:g}: Δ(DP-SGD-S) − Δ(DP-SGD) (plug-in) = {r.mean_diff:+.2f} pp over "
                 f"{int(r.n_seeds)} seeds, 95% CI [{r.lo:+.2f}, {r.hi:+.2f}], sign-flip p = {r.p_sign_flip:.3f}.")
display(Markdown("\n".join(lines) if lines else "No DP-SGD / DP-SGD-S pair in this profile."))
rh.write_metrics(metrics_path, {
    "leveling": {f"{r.setting}.{r.group}": {"change": r.change, "lo": r.lo, "hi": r.hi} for r in level.itertuples()}
    if len(level) else {},
    "paired_seeds": {f"{r.dataset}-{r.model}-e{r.epsilon:g}": {"mean_diff": r.mean_diff, "lo": r.lo, "hi": r.hi,
                                                               "p_sign_flip": r.p_sign_flip, "n_seeds": r.n_seeds}
                     for r in paired.itertuples()}})
