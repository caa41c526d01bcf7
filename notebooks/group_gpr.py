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
# # Group privacy risk: which groups does membership inference hit hardest, and does DP-SGD-S even it out?
#
# [← the index: findings and main table](index.html)
#
# Per group, the **GPR** is the mean PA-ALOOA advantage (cross-fitted: the held-out TPR − FPR of a per-record
# threshold rule, in pp) over the group's audited records. **Δ** is max − min of the GPRs over groups (pp). This page
# shows every dataset and ε of the grid: the GPRs, Δ against ε, the accuracy–Δ trade-off, and which groups got safer
# or riskier under DP-SGD-S. The verdicts on the paper's claims are on the index page.

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

from fairdp_core.audit import pooling, stats
from fairdp_core.config import load_params
from fairdp_core.reporting import helpers as rh
from fairdp_core.reporting import plots, results
from fairdp_core.reporting.pages import main_table
from fairdp_core.rules import RULES

PARAMETERS = ("train_dir", "results_dir", "prepared_dir", "figures_dir", "metrics_path", "runs", "profile", "alpha", "seed")
globals().update(rh.fill_parameters("group_gpr", params_file, {k: globals()[k] for k in PARAMETERS}))  # None: params
show, table = rh.shower(figures_dir), rh.tabler(figures_dir)
summaries, runs_df, groups_df = rh.frames(results_dir, runs)
agg = main_table(load_params(params_file))

# %%
rh.left_out(params_file)  # the profile's runs this page leaves out, and why

# %% [markdown]
# ## GPR per group
# Bars: the GPR of each group, averaged over the seeds, with its 95% interval over audited records × model pairs
# (coverage-checked, [coverage/coverage.md](coverage/coverage.md); over several seeds, the seeds' variances pooled
# as independent audits). A black dot marks each bar's value, so a GPR of 0 shows as a dot on the axis and a
# missing bar as nothing. The cross-fitted estimator is unbiased under no leakage, so a GPR can come out **below
# 0**: a point estimate below 0 whose interval covers 0 is consistent with no leakage. SGD (no DP) is drawn at
# every ε as the reference.

# %%
main = groups_df[(groups_df.attack == "alooa_cross_fit") & groups_df.tau.isna()].copy()
gpr = pooling.group_gpr_over_seeds(main, ["setting", "dataset", "model", "epsilon", "label", "group"], alpha=alpha)
panels = rh.eps_panels(gpr)  # the grid's ε per dataset (a sweep's DP-SGD baseline alone is no panel)
# the figures draw SGD, DP-SGD and DP-SGD-S (three bars per group stay readable); every rule is in the table below
panels = panels[panels.label.isin([results.ALGORITHM_LABELS[a] for a in ("sgd", "dpsgd", "dpsgd_s")])]
tabular = panels[panels.model == "lr"]
images = panels[panels.model != "lr"]
if len(tabular):
    show(plots.gpr_grid(tabular), "gpr_tabular",
         "GPR per group (pp, 95% interval), tabular datasets with logistic regression: one panel per dataset × ε "
         "(a dataset's two ε side by side); SGD (no DP) repeated at each ε; DP-SGD-S's variants and rivals are in the "
         "table below. A GPR below 0 whose interval covers 0 is consistent with no leakage.")
if len(images):
    show(plots.gpr_grid(images), "gpr_images",
         "GPR per group (pp, 95% interval), image datasets (MNIST: groups are digits"
         + ("; UTKFace: race" if "utkface" in set(images["dataset"]) else "") + "). A GPR below 0 whose interval "
         "covers 0 is consistent with no leakage.")
table(gpr.assign(eps_label=gpr["epsilon"].map(results.eps_label))[
    ["setting", "eps_label", "label", "group", "seeds", "gpr_pp", "lo_pp", "hi_pp"]].rename(columns={"label": "algorithm"}),
    "GPR per group (pp) with its 95% interval over records × model pairs, mean over the seeds", csv="gpr_by_group", rows=6)

# %% [markdown]
# ## Δ against ε
# Δ of the seed-averaged GPRs with its simultaneous 95% interval over the pairs of groups (the index's main
# table). A wide interval that reaches 0 means these seeds and this audit cannot tell the groups apart.

# %%
dve = agg[["setting", "label", "epsilon", "delta_pp", "delta_lo", "delta_hi", "null_floor_pp"]].rename(
    columns={"delta_lo": "lo", "delta_hi": "hi"})
if len(dve):
    show(plots.delta_vs_epsilon(dve), "delta_vs_epsilon",
         "Δ (pp) against ε (log scale) per dataset, one line per algorithm with 95% intervals (side by side); SGD "
         "(no DP) dashed; dotted: the null floor, the Δ that permuted group labels give.")

# %% [markdown]
# ## Accuracy against Δ
# Lower Δ and higher accuracy are better. Error bars: the Δ interval (vertical) and the SD of accuracy over seeds
# (horizontal; none with one seed). The dashed line joins each panel's Pareto front.

# %%
par = agg.assign(accuracy_pct=100 * agg["accuracy"], acc_err=100 * agg["accuracy_sd"])
if len(par):
    show(plots.pareto(par), "pareto",
         "Test accuracy (%) against Δ (pp) per dataset: colour = algorithm, marker = ε (or no DP); error bars as above.")

# %% [markdown]
# ## Leveling up or down: GPR(DP-SGD-S) − GPR(DP-SGD) per group
# The riskiest and safest groups under DP-SGD are picked on one half of the audited records and the change is
# measured on the other half, so a group does not "improve" by regression to the mean over records. The interval is over records
# and model pairs (each bank's model-level effects count; `stats.leveling_split`), and its coverage is checked by
# simulation (reports/coverage/leveling_coverage.md, with the identical-algorithms null: about 0.94 at 2R = 100). The
# split is over records only: the same DP-SGD models pick the group and measure its change, so a strong model × group
# effect can still pull the riskiest group towards "safer". Seed 0 of each setting in the figure; every seed in the
# table.

# %%
rng = np.random.default_rng([seed, 1])  # the study seed: the record split of the leveling
level_rows = []
pairs = [(k, v) for k, v in runs.items() if v["algorithm"] == "dpsgd" and v["tau"] is None]
for name_a, ra in pairs:
    name_b = name_a.replace("-dpsgd-", "-dpsgd_s-")
    if name_b not in runs:
        continue
    (c_a, g_a), (c_b, _) = results.alooa_contributions(train_dir, name_a), results.alooa_contributions(train_dir, name_b)
    gnames = summaries[name_a]["group_names"]
    d = stats.leveling_split(c_a, c_b, g_a, len(gnames), rng=rng, alpha=alpha)
    d["group"] = [gnames[k] for k in d["group"]]
    d["setting"] = results.setting_label(ra["dataset"], ra["model"])
    d["eps_label"] = results.eps_label(ra["epsilon"])
    d["seed"] = ra["seed"]
    d["key"] = f"{ra['dataset']}-{ra['model']}-e{ra['epsilon']:g}-s{ra['seed']}"
    level_rows.append(d)
level = pd.concat(level_rows) if level_rows else pd.DataFrame()
if len(level):
    for c in ("change", "lo", "hi", "gpr_a_pick"):
        level[f"{c}_pp"] = 100 * level[c]
    # many tests on one page (groups × settings × seeds): Holm-adjusted over every row before any is called a change
    level["p_holm"] = stats.holm(level["p"].fillna(1.0).to_numpy())
    level["verdict"] = np.where(level.p_holm >= alpha, "no clear change", np.where(level.change < 0, "safer", "riskier"))
    s0 = level[level.seed == level.seed.min()]
    show(plots.leveling_grid(s0), "leveling",
         "GPR(DP-SGD-S) − GPR(DP-SGD) per group (pp, 95% interval over records and model pairs, seed 0); the "
         "riskiest and safest groups under DP-SGD (picked on the other half of the records) are marked. Above 0: "
         "the group got riskier under DP-SGD-S.")
    table(level[["setting", "eps_label", "seed", "group", "role", "gpr_a_pick_pp", "change_pp", "lo_pp", "hi_pp",
                 "p_holm", "verdict"]].rename(columns={"gpr_a_pick_pp": "GPR under DP-SGD (pp)"}),
          "Per group: GPR under DP-SGD (first half of the records) and its change under DP-SGD-S (pp, second half), "
          f"95% interval over records and model pairs (per row, unadjusted); the verdict uses the t test's p, "
          f"Holm-adjusted over all {len(level)} rows", csv="leveling", rows=6)
else:
    display(Markdown("No DP-SGD / DP-SGD-S pair in this profile."))

# %% [markdown]
# ## Each DP rule − DP-SGD over seeds (paired): DP-SGD-S, its variants and its rivals
# Same seed, same audit design and sampling streams: the per-seed difference of Δ (cross-fitted, pp) and of test
# accuracy (pp) against DP-SGD, for DP-SGD-S (the study's quantile rule), the paper code's rules, and the rivals
# DPSGD-F, DPSGD-Global-Adapt and AdaClip. Intervals are t intervals over seeds; the exact sign-flip p has a floor
# of 2/2^S, so fewer than 6 seeds can never reach p < 0.05 (those rows are descriptive).

# %%
main_runs = runs_df[(runs_df.attack == "alooa_cross_fit") & runs_df.tau.isna()]
rows = []
for (ds, mo, eps), g in main_runs[main_runs.epsilon.notna()].groupby(["dataset", "model", "epsilon"], sort=False):
    for algo in [a for a in results.ALGORITHM_LABELS if a not in ("sgd", "dpsgd") and a in set(g.algorithm)]:
        pair = g[g.algorithm.isin(["dpsgd", algo])]
        p = pair.pivot_table(index="seed", columns="algorithm", values="delta_pp").dropna()
        acc = pair.pivot_table(index="seed", columns="algorithm", values="accuracy").dropna()
        if len(p) >= 2 and {"dpsgd", algo} <= set(p.columns):
            c = stats.paired_seed_comparison(p[algo].to_numpy(), p["dpsgd"].to_numpy())
            a = stats.paired_seed_comparison(100 * acc[algo].to_numpy(), 100 * acc["dpsgd"].to_numpy())
            rows.append({"setting": results.setting_label(ds, mo), "eps_label": results.eps_label(eps),
                         "rule": results.ALGORITHM_LABELS[algo], "algorithm": algo,
                         "key": f"{ds}-{mo}-e{eps:g}" + ("" if algo == "dpsgd_s" else f"-{algo}"), **c,
                         "acc_diff": a["mean_diff"], "acc_lo": a["lo"], "acc_hi": a["hi"]})
paired = pd.DataFrame(rows)
once = sorted({results.ALGORITHM_LABELS[a] for a in set(main_runs.algorithm) - {"sgd", "dpsgd"}}
              - set(paired["rule"] if len(paired) else ()))
if once:  # a rule run on one seed only (the default profile's rivals) has nothing to pair over
    display(Markdown(f"Run on one seed in this profile, so not paired here: {', '.join(once)}; their seed-0 values "
                     "are in the index's main table (`make repro PROFILE=full` runs them on two seeds)."))
if len(paired):
    paired["p_holm"] = stats.holm(paired["p_sign_flip"].fillna(1.0).to_numpy())  # many tests on one page
    table(paired[["setting", "eps_label", "rule", "n_seeds", "mean_diff", "lo", "hi", "p_sign_flip", "p_min", "p_holm",
                  "acc_diff", "acc_lo", "acc_hi"]].rename(columns={"mean_diff": "Δ diff (pp)",
                                                                   "acc_diff": "accuracy diff (pp)"}),
          "Each rule − DP-SGD, paired by seed: Δ (pp) with its 95% t interval (per row), the exact sign-flip p, the "
          f"smallest p the seed count allows (below 6 seeds no result can reach p < 0.05) and p Holm-adjusted over the "
          f"{len(paired)} rows, and test accuracy (pp) with its t interval", "{:.2f}", csv="paired_rules")
else:
    display(Markdown("Fewer than two seeds per setting in this profile: no paired comparison over seeds."))

# %% [markdown]
# ## Findings in detail

# %%
lines = []
dp = agg[agg.algorithm != "sgd"]
if len(dp):
    excl = dp[dp.delta_lo > 0]
    lines.append(f"- Δ's interval excludes 0 in **{len(excl)} of {len(dp)}** DP configurations"
                 + (": " + ", ".join(f"{r.setting} {r.label} {r.eps_label} (Δ {r.delta_pp:.2f} pp "
                                     f"[{r.delta_lo:.2f}, {r.delta_hi:.2f}])" for r in excl.itertuples())
                    if len(excl) else "") + ". Elsewhere this audit cannot tell the groups' risks apart.")
    both = dp[dp.algorithm.isin(["dpsgd", "dpsgd_s"])].pivot_table(index=["setting", "eps_label"], columns="algorithm",
                                                                   values="delta_pp").dropna()
    if len(both):
        lower = int((both["dpsgd_s"] < both["dpsgd"]).sum())
        lines.append(f"- DP-SGD-S's Δ is below DP-SGD's in **{lower} of {len(both)}** settings (point estimates; "
                     "the paired test over seeds is in the table above and on the index page).")
rivals = paired[paired.algorithm.isin([a for a, r in RULES.items() if r.rival])] if len(paired) else paired
if len(rivals):
    lines.append("- DP-SGD-S's rivals against DP-SGD (paired by seed, point estimates): " + "; ".join(
        f"{rule} lowers Δ in {int((r.mean_diff < 0).sum())} of {len(r)} settings and changes accuracy by "
        f"{r.acc_diff.mean():+.2f} pp on average" for rule, r in rivals.groupby("rule", sort=False))
        + f"; {int((rivals.p_holm < alpha).sum())} of {len(rivals)} differences of Δ are significant after Holm.")
if len(level):
    s0 = level[level.seed == level.seed.min()]
    risk = s0[s0.role == "riskiest"]
    lines.append(f"- The group riskiest under DP-SGD got safer under DP-SGD-S in {int((risk.verdict == 'safer').sum())}"
                 f" of {len(risk)} settings and riskier in {int((risk.verdict == 'riskier').sum())} (Holm-adjusted "
                 "over the table's rows; the interval's coverage, and the absence of leveling between identical "
                 "algorithms, are checked in reports/coverage/leveling_coverage.md).")
display(Markdown("\n".join(lines) if lines else "No DP configuration in this profile."))

# %% tags=["findings"]
# the page's answer, shown first (reporting moves this cell under the title)
dp = agg[agg.algorithm != "sgd"]
both = dp[dp.algorithm.isin(["dpsgd", "dpsgd_s"])].pivot_table(index=["setting", "eps_label"], columns="algorithm",
                                                               values="delta_pp").dropna()
both = both if {"dpsgd", "dpsgd_s"} <= set(both.columns) else both.iloc[0:0].assign(dpsgd=[], dpsgd_s=[])
risk = level[(level.seed == level.seed.min()) & (level.role == "riskiest")] if len(level) else level
found = rh.findings(
    ["Δ's 95% interval excludes 0 in **{excl} of {n_dp}** DP configurations of this profile: elsewhere its audit "
     "cannot tell the groups' risks apart.",
     "DP-SGD-S's Δ is below DP-SGD's in {lower} of {pairs} settings (point estimates; the paired test over seeds is "
     "in the tables below).",
     "The group riskiest under DP-SGD got safer under DP-SGD-S in {safer} of {risk_n} settings and riskier in "
     "{riskier} (Holm-adjusted)."],
    {"excl": int((dp.delta_lo > 0).sum()), "n_dp": len(dp), "lower": int((both["dpsgd_s"] < both["dpsgd"]).sum()),
     "pairs": len(both), "safer": int((risk.verdict == "safer").sum()) if len(risk) else 0, "risk_n": len(risk),
     "riskier": int((risk.verdict == "riskier").sum()) if len(risk) else 0})
rh.write_metrics(metrics_path, {**found,
    "leveling": {f"{r.key}.{r.group}": {"change": r.change, "lo": r.lo, "hi": r.hi, "p_holm": r.p_holm}
                 for r in level.itertuples()} if len(level) else {},
    "paired_seeds": {r.key: {"mean_diff": r.mean_diff, "lo": r.lo, "hi": r.hi,
                                                    "p_sign_flip": r.p_sign_flip, "n_seeds": r.n_seeds}
                     for r in paired.itertuples()}})
