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
# For each configuration, **every model of its bank** (2R models per seed, every seed; each trained on the non-audit
# records and half of the audit set) is evaluated on the held-out test set with fairlearn's definitions: the
# between-group differences (max − min over groups, pp) of accuracy (accuracy parity), selection rate (demographic
# parity), TPR (equal opportunity) and max(TPR gap, FPR gap) (equalized odds). Each is the mean over the bank's
# models, with the between-model SD and a percentile bootstrap 95% interval over test records (conditional on the
# trained models; not among the coverage-checked intervals). DP-SGD-S is compared with DP-SGD model by model (model j
# of each bank trains on the same records). **MNIST**: the groups are the digits, i.e. the labels, so selection rate,
# TPR and FPR per group are not defined; its measure is accuracy parity, the spread of per-digit recall.

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

from fairdp_core.reporting import helpers as rh
from fairdp_core.reporting import plots, results

PARAMETERS = ("train_dir", "results_dir", "prepared_dir", "figures_dir", "metrics_path", "runs", "profile", "alpha", "n_boot", "seed")
globals().update(rh.fill_parameters("outcome_fairness", params_file, {k: globals()[k] for k in PARAMETERS}))  # None: params
show, table = rh.shower(figures_dir), rh.tabler(figures_dir)
summaries, runs_df, groups_df = rh.frames(results_dir, runs)

# %%
rh.left_out(params_file)  # the profile's runs this page leaves out, and why

# %%
from fairdp_core.data.base import load
from fairdp_core.fairness import bank_by_group, bank_fairness

METRICS = {"accuracy": "accuracy parity", "selection_rate": "demographic parity",
           "equal_opportunity": "equal opportunity", "equalized_odds": "equalized odds"}
configs: dict[tuple, dict[int, str]] = {}  # (dataset, model, epsilon, algorithm) -> {seed: run}
for name, r in runs.items():
    if r["tau"] is None:
        configs.setdefault((r["dataset"], r["model"], r["epsilon"], r["algorithm"]), {})[r["seed"]] = name
datasets, banks = {}, {}
rows, by_group = [], []
for (ds, mo, eps, alg), seeds in configs.items():
    data = datasets.setdefault(ds, load(Path(prepared_dir) / ds))
    banks[(ds, mo, eps, alg)] = {s: results.signals(train_dir, n)["test_pred"] for s, n in sorted(seeds.items())}
    preds = np.concatenate(list(banks[(ds, mo, eps, alg)].values()))  # [2R × seeds, n_test]
    names = np.asarray(data.group_names)[data.test.group]
    base = {"dataset": ds, "model": mo, "epsilon": eps, "algorithm": alg, "label": results.ALGORITHM_LABELS[alg],
            "setting": results.setting_label(ds, mo), "n_models": len(preds), "n_seeds": len(seeds)}
    for k, v in bank_fairness(data.test.y, preds, names, n_boot=n_boot, alpha=alpha, random_state=seed).items():
        rows.append({**base, "metric": METRICS[k], "value_pp": 100 * v["mean"], "sd_pp": 100 * v["sd"],
                     "lo_pp": 100 * v["lo"], "hi_pp": 100 * v["hi"]})
    by_group.append(bank_by_group(data.test.y, preds, names).assign(**base))
fair = pd.DataFrame(rows)
n_models = f"{fair.n_models.min()}–{fair.n_models.max()}" if fair.n_models.nunique() > 1 else f"{fair.n_models.iloc[0]}"
wide = fair.assign(eps_label=fair["epsilon"].map(results.eps_label)).pivot_table(
    index=["setting", "eps_label", "label"], columns="metric", values="value_pp", sort=False).reset_index()
wide = wide[["setting", "eps_label", "label"] + [m for m in METRICS.values() if m in wide]]
table(wide.rename(columns={"label": "algorithm", **{m: f"{m} (pp)" for m in METRICS.values()}}),
      f"Between-group differences (pp) on the test set, mean over every model of each bank ({n_models} models). "
      "MNIST: accuracy parity only (its groups are its labels); a dash: the metric does not apply", rows=60,
      csv="fairness_summary")
table(fair.assign(eps_label=fair["epsilon"].map(results.eps_label))[
    ["setting", "eps_label", "label", "metric", "n_models", "value_pp", "sd_pp", "lo_pp", "hi_pp"]].rename(
    columns={"label": "algorithm", "sd_pp": "SD over models (pp)"}),
    "Every metric: mean over the bank's models, the between-model SD, and the bootstrap 95% interval of the mean over "
    "test records (pp)", csv="fairness_intervals")

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
# 0, DP-SGD-S is less fair on that metric. Model j of one bank is paired with model j of the other (same training
# records); the interval is over test records, conditional on the trained models.

# %%
diff_rows = []
for (ds, mo, eps, alg), bank in banks.items():
    other = banks.get((ds, mo, eps, "dpsgd_s"))
    if alg != "dpsgd" or other is None:
        continue
    common = sorted(set(bank) & set(other))  # the seeds both ran: model j of each bank trains on the same records
    data = datasets[ds]
    names = np.asarray(data.group_names)[data.test.group]
    d = bank_fairness(data.test.y, np.concatenate([bank[s] for s in common]), names,
                      np.concatenate([other[s] for s in common]), n_boot=n_boot, alpha=alpha, random_state=seed)
    for k, v in d.items():
        lo, hi = 100 * v["lo"], 100 * v["hi"]
        diff_rows.append({"key": f"{ds}-{mo}-e{eps:g}", "setting": results.setting_label(ds, mo),
                          "eps_label": results.eps_label(eps), "metric": METRICS[k], "pairs": v["n_models"],
                          "change_pp": 100 * v["mean"], "sd_pp": 100 * v["sd"], "lo_pp": lo, "hi_pp": hi,
                          "verdict": "DP-SGD-S less fair" if lo > 0 else "DP-SGD-S fairer" if hi < 0
                          else "no clear change"})
diffs = pd.DataFrame(diff_rows)
if len(diffs):
    table(diffs.drop(columns="key").rename(columns={"sd_pp": "SD over pairs (pp)"}),
          "DP-SGD-S − DP-SGD per metric (pp): the mean over every pair of models (model j of each bank, same training "
          "records), the SD over pairs, and the paired bootstrap 95% interval over test records. Equalized odds = "
          "max(TPR gap, FPR gap): where it equals equal opportunity, the TPR gap dominates",
          csv="fairness_dpsgd_s_vs_dpsgd")

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
      "Per-group test accuracy, selection rate, TPR and FPR (%), mean over every model of the bank (a dash: not "
      "defined for MNIST)",
      csv="fairness_by_group")

# %% [markdown]
# ## Findings in detail

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
                             f"{100 * w.loc[k, 'dpsgd_s']:.1f}% (mean over the banks' models): DP-SGD-S's group clipping bounds "
                             "come with an outcome cost for that group.")
lines.append("- MNIST's groups are its labels: only accuracy parity (per-digit recall spread) applies there.")
display(Markdown("\n".join(lines)))

# %% tags=["findings"]
# the page's answer, shown first (reporting moves this cell under the title)
metric = "equal opportunity" if len(diffs) and (diffs.metric == "equal opportunity").any() else "accuracy parity"
d = diffs[diffs.metric == metric] if len(diffs) else diffs
eo = fair[(fair.metric == "equalized odds") & fair.epsilon.notna()]
sgd = fair[(fair.metric == "equalized odds") & fair.epsilon.isna()].set_index("setting")["value_pp"]
above = eo[eo.apply(lambda r: r.setting in sgd and r.lo_pp > sgd[r.setting], axis=1)] if len(eo) else eo
if len(d):
    top = d.loc[d.change_pp.abs().idxmax()]
    found = rh.findings([
        f"Averaged over every model of each bank ({n_models} models), DP-SGD-S (the study's quantile reading) is less "
        f"fair than DP-SGD on {metric} "
        "in **{worse} of {settings}** settings and fairer in {better} (paired bootstrap 95% intervals over test "
        "records).",
        f"The largest change is on {top.setting}, {top.eps_label}: " + "{top:+.1f} pp [{top_lo:+.1f}, {top_hi:+.1f}], "
        "with an SD of {top_sd:.1f} pp between pairs of models.",
        "Against SGD, {above} of {dp_banks} DP banks have an equalized-odds gap whose interval lies above SGD's."],
        {"worse": int((d.verdict == "DP-SGD-S less fair").sum()), "settings": len(d),
         "better": int((d.verdict == "DP-SGD-S fairer").sum()), "top": float(top.change_pp),
         "top_lo": float(top.lo_pp), "top_hi": float(top.hi_pp), "top_sd": float(top.sd_pp),
         "above": len(above), "dp_banks": len(eo)})
else:
    found = rh.findings(["No setting of this profile runs both DP-SGD and DP-SGD-S, so none compares them.",
                         "Against SGD, {above} of {dp_banks} DP banks have an equalized-odds gap whose interval lies "
                         "above SGD's."], {"above": len(above), "dp_banks": len(eo)})
rh.write_metrics(metrics_path, {**found,
    **{f"{r.dataset}-{r.model}-{r.algorithm}" + ("" if pd.isna(r.epsilon) else f"-e{r.epsilon:g}")
       + f".{r.metric.replace(' ', '_')}": r.value_pp / 100 for r in fair.itertuples()},
    "dpsgd_s_vs_dpsgd": {f"{r.key}.{r.metric.replace(' ', '_')}": {"change": r.change_pp / 100, "lo": r.lo_pp / 100,
                                                                  "hi": r.hi_pp / 100} for r in diffs.itertuples()},
    "tpr_drop": tpr_drop})
