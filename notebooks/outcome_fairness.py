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
# # Outcome fairness: accuracy parity, demographic parity and equalized odds
#
# For each configuration, the first model of its bank (trained on the non-audit records and half of the audit set)
# is evaluated on the held-out test set through fairlearn's MetricFrame, with bootstrap 95% intervals over test
# records; the across-model spread of test accuracy is in the index page. Multi-class tasks (MNIST, whose groups
# are its labels) get accuracy parity only.

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
show, table = rh.shower(figures_dir), rh.table
summaries, runs_df, groups_df = rh.frames(results_dir, runs)

# %%
from fairdp_core.data.base import load
from fairdp_core.fairness import outcome_fairness

rows, by_group = [], []
for name, r in runs.items():
    if r["tau"] is not None:
        continue
    data = load(Path(prepared_dir) / r["dataset"])
    pred = results.signals(train_dir, name)["test_pred"][0]
    names = np.asarray(data.group_names)[data.test.group]
    f = outcome_fairness(data.test.y, pred, names, n_boot=n_boot, alpha=alpha, random_state=seed)
    label = results.ALGORITHM_LABELS[r["algorithm"]]
    base = {"run": name, "dataset": r["dataset"], "model": r["model"], "epsilon": r["epsilon"], "seed": r["seed"], "label": label}
    for metric in ("accuracy_parity", "demographic_parity", "equalized_odds"):
        key = metric if metric == "accuracy_parity" else f"{metric}_difference"
        if key in f:
            lo, hi = f[f"{metric}_ci" if metric != "accuracy_parity" else "accuracy_parity_ci"]
            rows.append({**base, "metric": metric, "value": f[key], "lo": lo, "hi": hi})
    bg = f["by_group"].copy()
    for k, v in base.items():
        bg[k] = v
    by_group.append(bg)
fair = pd.DataFrame(rows)
table(fair[["run", "metric", "value", "lo", "hi"]], "{:.4f}")

# %% [markdown]
# ## By setting

# %%
for (ds, mo, eps), g in fair[fair.seed == 0].groupby(["dataset", "model", "epsilon"], dropna=False):
    if pd.isna(eps):
        continue
    sgd = fair[(fair.dataset == ds) & (fair.model == mo) & fair.epsilon.isna() & (fair.seed == 0)]
    show(plots.fairness_bars(pd.concat([sgd, g]), title=f"{ds} / {mo}, ε = {eps:g}"), f"fairness_{ds}_{mo}_e{eps:g}")

# %% [markdown]
# ## Per-group rates

# %%
bg_all = pd.concat(by_group)
table(bg_all[["run", "group"] + [c for c in ("accuracy", "selection_rate", "tpr", "fpr") if c in bg_all]], "{:.4f}")

# %% [markdown]
# ## Findings

# %%
lines = []
for (ds, mo, eps), g in fair[fair.seed == 0].groupby(["dataset", "model", "epsilon"]):
    dp = g[g.metric == "accuracy_parity"].set_index("label")["value"]
    lines.append(f"- {ds}/{mo} ε={eps:g}: accuracy parity " + ", ".join(f"{k} {v:.3f}" for k, v in dp.items()) + ".")
display(Markdown("\n".join(lines)))
rh.write_metrics(metrics_path, {f"{r.run}.{r.metric}": r.value for r in fair.itertuples()})
