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
# # Outcome fairness: does DP-SGD-S trade privacy fairness for outcome fairness?
#
# [← the index: findings and main table](index.html)
#
# For each configuration, the first model of its bank (seed 0; trained on the non-audit records and half of the
# audit set) is evaluated on the held-out test set through fairlearn's MetricFrame: the between-group differences
# (max − min over groups, pp) of accuracy (accuracy parity), selection rate (demographic parity), TPR (equal
# opportunity) and max(TPR, FPR) (equalized odds), with percentile bootstrap 95% intervals over test records
# (conditional on the trained model; not among the coverage-checked intervals). The index's main table gives
# each configuration's test accuracy (mean of its bank's models) with its SD over seeds. **MNIST**: the groups are the digits, i.e. the labels, so
# selection rate, TPR and FPR per group are not defined; its measure is accuracy parity, the spread of per-digit
# recall.

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
n_boot = None
seed = None

# %%
from pathlib import Path

import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from fairdp_core import plots, results
from fairdp_core import report_helpers as rh

PARAMETERS = ("train_dir", "results_dir", "prepared_dir", "figures_dir", "metrics_path", "runs", "profile", "alpha", "n_boot", "seed")
globals().update(rh.fill_parameters("outcome_fairness", params_file, {k: globals()[k] for k in PARAMETERS}))  # None: params
show, table = rh.shower(figures_dir), rh.tabler(figures_dir)
summaries, runs_df, groups_df = rh.frames(results_dir, runs)

# %%
from fairdp_core.data.base import load
from fairdp_core.fairness import outcome_fairness, paired_difference

METRICS = {"accuracy_parity": ("accuracy parity", "accuracy_parity", "accuracy_parity_ci"),
           "demographic_parity": ("demographic parity", "demographic_parity_difference", "demographic_parity_ci"),
           "equal_opportunity": ("equal opportunity", "equal_opportunity_difference", "equal_opportunity_ci"),
           "equalized_odds": ("equalized odds", "equalized_odds_difference", "equalized_odds_ci")}
rows, by_group, preds = [], [], {}
for name, r in runs.items():
    if r["tau"] is not None or r["seed"] != 0:
        continue
    data = load(Path(prepared_dir) / r["dataset"])
    pred = results.signals(train_dir, name)["test_pred"][0]
    names = np.asarray(data.group_names)[data.test.group]
    preds[name] = (data.test.y, pred, names)
    f = outcome_fairness(data.test.y, pred, names, n_boot=n_boot, alpha=alpha, random_state=seed)
    base = {"run": name, "dataset": r["dataset"], "model": r["model"], "epsilon": r["epsilon"],
            "algorithm": r["algorithm"], "label": results.ALGORITHM_LABELS[r["algorithm"]],
            "setting": results.setting_label(r["dataset"], r["model"])}
    for metric, point, ci in METRICS.values():
        if point in f:
            rows.append({**base, "metric": metric, "value_pp": 100 * f[point], "lo_pp": 100 * f[ci][0],
                         "hi_pp": 100 * f[ci][1]})
    bg = f["by_group"].copy()
    for k, v in base.items():
        bg[k] = v
    by_group.append(bg)
fair = pd.DataFrame(rows)
wide = fair.assign(eps_label=fair["epsilon"].map(results.eps_label)).pivot_table(
    index=["setting", "eps_label", "label"], columns="metric", values="value_pp", sort=False).reset_index()
wide = wide[["setting", "eps_label", "label"] + [m for m, *_ in METRICS.values() if m in wide]]
table(wide.rename(columns={"label": "algorithm", **{m: f"{m} (pp)" for m, *_ in METRICS.values()}}),
      "Between-group differences (pp) on the test set, seed 0. MNIST: accuracy parity only (its groups are its "
      "labels); a dash: the metric does not apply", rows=60, csv="fairness_summary")
table(fair.assign(eps_label=fair["epsilon"].map(results.eps_label))[
    ["setting", "eps_label", "label", "metric", "value_pp", "lo_pp", "hi_pp"]].rename(columns={"label": "algorithm"}),
    "Every metric with its bootstrap 95% interval (pp)", csv="fairness_intervals")

# %% [markdown]
# ## By setting
# Each panel: one dataset at one ε, the four differences for each algorithm (SGD, no DP, repeated in each column).

# %%
panels = rh.eps_panels(fair)
if len(panels):
    show(plots.fairness_grid(panels), "fairness",
         "Outcome-fairness differences between groups (pp; bootstrap 95% interval over test records), one panel per "
         "dataset × ε. Lower is fairer. MNIST panels show accuracy parity only.")

# %% [markdown]
# ## DP-SGD-S against DP-SGD, on the same test records
# The difference DP-SGD-S − DP-SGD of each metric (pp), with a paired bootstrap over the shared test records: above
# 0, DP-SGD-S is less fair on that metric. Conditional on the two trained models (seed 0).

# %%
diff_rows = []
for name, (y, pa, names) in preds.items():
    r = runs[name]
    if r["algorithm"] != "dpsgd":
        continue
    other = name.replace("-dpsgd-", "-dpsgd_s-")
    if other not in preds:
        continue
    d = paired_difference(y, pa, preds[other][1], names, n_boot=n_boot, alpha=alpha, random_state=seed)
    for key, (metric, *_) in METRICS.items():
        k = {"accuracy_parity": "accuracy", "demographic_parity": "selection_rate"}.get(key, key)
        if k in d:
            v, lo, hi = (100 * x for x in d[k])
            diff_rows.append({"key": f"{r['dataset']}-{r['model']}-e{r['epsilon']:g}",
                              "setting": results.setting_label(r["dataset"], r["model"]),
                              "eps_label": results.eps_label(r["epsilon"]), "metric": metric, "change_pp": v,
                              "lo_pp": lo, "hi_pp": hi,
                              "verdict": "DP-SGD-S less fair (seed-0 models)" if lo > 0 else
                              "DP-SGD-S fairer (seed-0 models)" if hi < 0 else "no clear change"})
diffs = pd.DataFrame(diff_rows)
if len(diffs):
    table(diffs.drop(columns="key"), "DP-SGD-S − DP-SGD per metric (pp) with the paired bootstrap 95% interval over "
          "test records (seed 0). Equalized odds = max(TPR gap, FPR gap): where it equals equal opportunity, the TPR "
          "gap dominates", csv="fairness_dpsgd_s_vs_dpsgd")

# %% [markdown]
# ## Per-group rates

# %%
bg_all = pd.concat(by_group)
cols = [c for c in ("accuracy", "selection_rate", "tpr", "fpr") if c in bg_all]
bg_show = bg_all.assign(eps_label=bg_all["epsilon"].map(results.eps_label))
for c in cols:
    bg_show[c] = 100 * bg_show[c]
table(bg_show[["setting", "eps_label", "label", "group"] + cols].rename(
    columns={"label": "algorithm", "accuracy": "accuracy (%)", "selection_rate": "selection rate (%)",
             "tpr": "TPR (%)", "fpr": "FPR (%)"}),
      "Per-group test accuracy, selection rate, TPR and FPR (%), seed 0 (a dash: not defined for MNIST)",
      csv="fairness_by_group")

# %% [markdown]
# ## Findings

# %%
lines = []
if len(diffs):
    for metric in ("equalized odds", "equal opportunity", "accuracy parity"):
        d = diffs[diffs.metric == metric]
        if not len(d):
            continue
        worse, better = d[d.verdict.str.startswith("DP-SGD-S less fair")], d[d.verdict.str.startswith("DP-SGD-S fairer")]
        lines.append(f"- **{metric.capitalize()}**: DP-SGD-S is less fair than DP-SGD in {len(worse)} of {len(d)} "
                     f"settings and fairer in {len(better)}"
                     + ("; less fair in: " + "; ".join(f"{r.setting} {r.eps_label} ({r.change_pp:+.1f} pp "
                                                        f"[{r.lo_pp:+.1f}, {r.hi_pp:+.1f}])" for r in worse.itertuples())
                        if len(worse) else "")
                     + ("; fairer in: " + "; ".join(f"{r.setting} {r.eps_label} ({r.change_pp:+.1f} pp "
                                                    f"[{r.lo_pp:+.1f}, {r.hi_pp:+.1f}])" for r in better.itertuples())
                        if len(better) else "") + ".")
eo = fair[(fair.metric == "equalized odds") & fair.epsilon.notna()]
if len(eo):
    sgd = fair[(fair.metric == "equalized odds") & fair.epsilon.isna()].set_index("setting")["value_pp"]
    above = eo[eo.apply(lambda r: r.setting in sgd and r.lo_pp > sgd[r.setting], axis=1)]
    lines.append(f"- Against SGD: {len(above)} of {len(eo)} DP models have an equalized-odds difference whose interval "
                 "lies above SGD's (DP making outcomes less fair)" + (": " + ", ".join(
                     f"{r.setting} {results.eps_label(r.epsilon)} {r.label}" for r in above.itertuples()) if len(above)
                     else "") + ".")
tpr_drop = {}
if "tpr" in bg_all:  # where equal opportunity got worse: whose true-positive rate fell
    for (ds, mo, eps), g in bg_all[bg_all.algorithm.isin(["dpsgd", "dpsgd_s"]) & bg_all.epsilon.notna()].groupby(
            ["dataset", "model", "epsilon"]):
        w = g.pivot_table(index="group", columns="algorithm", values="tpr")
        if {"dpsgd", "dpsgd_s"} <= set(w.columns) and len(w.dropna()):
            drop = (w["dpsgd_s"] - w["dpsgd"]).dropna()
            k = drop.idxmin()
            tpr_drop[f"{ds}-{mo}-e{eps:g}"] = {"group": str(k), "dpsgd": float(w.loc[k, "dpsgd"]),
                                               "dpsgd_s": float(w.loc[k, "dpsgd_s"])}
            if drop[k] < -0.10:
                lines.append(f"- {results.setting_label(ds, mo)} {results.eps_label(eps)}: under DP-SGD-S the "
                             f"true-positive rate of group **{k}** falls from {100 * w.loc[k, 'dpsgd']:.1f}% to "
                             f"{100 * w.loc[k, 'dpsgd_s']:.1f}% (seed-0 models): DP-SGD-S's group clipping bounds "
                             "come with an outcome cost for that group.")
lines.append("- MNIST's groups are its labels: only accuracy parity (per-digit recall spread) applies there.")
display(Markdown("\n".join(lines)))
rh.write_metrics(metrics_path, {
    **{f"{r.run}.{r.metric.replace(' ', '_')}": r.value_pp / 100 for r in fair.itertuples()},
    "dpsgd_s_vs_dpsgd": {f"{r.key}.{r.metric.replace(' ', '_')}": {"change": r.change_pp / 100, "lo": r.lo_pp / 100,
                                                                  "hi": r.hi_pp / 100} for r in diffs.itertuples()},
    "tpr_drop": tpr_drop})
