"""Regenerates the report notebooks (python notebooks/_build.py). The .ipynb files are what papermill runs."""

from pathlib import Path

import nbformat as nbf

HERE = Path(__file__).parent

COMMON_PARAMS = '''results_dir = "results/audit"
prepared_dir = "data/prepared"
figures_dir = "reports/figures/NAME"
metrics_path = "reports/metrics/NAME.json"
runs = {}
profile = "default"
alpha = 0.05'''

SETUP = '''import json
from pathlib import Path

import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from fairdp_core import plots, results
from fairdp_core.audit import stats

fig_dir = Path(figures_dir)
fig_dir.mkdir(parents=True, exist_ok=True)
Path(metrics_path).parent.mkdir(parents=True, exist_ok=True)


def show(fig, name):
    """Save the figure as a file next to the report and show it by reference (pages stay small)."""
    path = fig_dir / f"{name}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plots.plt.close(fig)
    display(Markdown(f"![{name}](figures/{fig_dir.name}/{path.name})"))


def table(df, floatfmt="{:.3f}"):
    display(df.style.format(floatfmt, subset=df.select_dtypes("number").columns).hide(axis="index"))


summaries = results.load_summaries(results_dir, runs)
runs_df = results.run_table(summaries, runs)
groups_df = results.group_table(summaries, runs)'''


def nb(name, intro, extra_params, cells):
    n = nbf.v4.new_notebook()
    n.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    n.cells.append(nbf.v4.new_markdown_cell(intro))
    p = nbf.v4.new_code_cell(COMMON_PARAMS.replace("NAME", name) + ("\n" + extra_params if extra_params else ""))
    p.metadata["tags"] = ["parameters"]
    n.cells.append(p)
    n.cells.append(nbf.v4.new_code_cell(SETUP))
    for kind, src in cells:
        n.cells.append(nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src))
    nbf.write(n, HERE / f"{name}.ipynb")


nb("audit_comparison", """# Audit comparison: PA-ALOOA against PA-LOOA, PA-GA, PA-GBA and LiRA

Each configuration trains 2R models on complementary halves of a stratified audit set (every audit record is IN for
R models and OUT for R). Per record, an attack's *advantage* is TPR − FPR of a threshold rule over its 2R
(score, membership) pairs; GPR_k averages it over group k, and Δ = max_k GPR_k − min_k GPR_k (pp).
The paper's per-record estimator chooses the threshold on the same pairs it scores (*in-sample*); we also report a
*cross-fitted* estimator (threshold chosen on half the model pairs, scored on the other half: unbiased under no
leakage) and a *null-corrected* one (in-sample minus its mean under permuted membership labels).""",
   'looa_runs = []\nn_null = 50\nseed = 0', [
    ("md", "## Δ by attack, for every configuration\nΔ in pp with its 95% bootstrap interval; the cost column is the "
           "seconds the attack's own statistics took, beside the bank's training time (shared by all attacks on it)."),
    ("code", '''display(Markdown("Plug-in Δ (pp) per attack:"))
wide = runs_df.pivot_table(index=["run", "train_s"], columns="attack", values="delta_pp").reset_index()
table(wide, "{:.2f}")
cost = pd.DataFrame([{"run": k, **{a: v for a, v in s["timings"].items()}} for k, s in summaries.items()])
table(cost, "{:.2f}")'''),
    ("md", "## The three per-record estimators and their null distributions\n"
           "The first DP-SGD configuration (or the first run), its raw loss signal, each estimator observed and "
           "under permuted membership labels."),
    ("code", '''from fairdp_core.audit import attacks
from fairdp_core.audit.design import AuditDesign
from fairdp_core.config import design_key

name = next((k for k, r in runs.items() if r["algorithm"] == "dpsgd"), next(iter(runs)))
r = runs[name]
design = AuditDesign.load(Path(results_dir).parent / "designs" / f"{design_key(r['dataset'], r['seed'])}.npz")
sig = results.signals(results_dir, name)
scores, mem = -sig["loss"].astype(float), design.membership
rng = np.random.default_rng(seed)
perm = rng.permuted(mem, axis=0)
ests = {"in_sample": attacks.in_sample_advantage, "cross_fit": attacks.cross_fit_advantage,
        "null_corrected": lambda s, m: attacks.null_corrected_advantage(s, m, rng=rng, n_null=n_null)}
obs = {k: f(scores, mem) for k, f in ests.items()}
null = {k: f(scores, perm) for k, f in ests.items()}
show(plots.estimator_distributions(obs, null, title=f"{name}: per-record advantage, 2R = {mem.shape[0]}"), "estimators")
est_df = pd.DataFrame({"estimator": list(obs), "mean observed": [obs[k].mean() for k in obs],
                       "mean under null": [null[k].mean() for k in null]})
table(est_df, "{:.4f}")'''),
    ("md", "## PA-LOOA against PA-ALOOA, record by record"),
    ("code", '''looa_frames = []
for name in looa_runs:
    p = Path(results_dir) / name / "looa.csv"
    if p.is_file():
        d = pd.read_csv(p)
        d["run"] = name
        looa_frames.append(d)
if looa_frames:
    looa = pd.concat(looa_frames)
    show(plots.looa_vs_alooa(looa, title="cross-fitted advantage per target record"), "looa_vs_alooa")
    agree = looa.groupby("run").apply(lambda d: pd.Series({
        "targets": len(d), "pearson r": d["looa_cross_fit"].corr(d["alooa_cross_fit"]),
        "spearman r": d["looa_cross_fit"].corr(d["alooa_cross_fit"], method="spearman"),
        "mean LOOA": d["looa_cross_fit"].mean(), "mean ALOOA": d["alooa_cross_fit"].mean(),
        "LOOA train s": d["looa_train_s"].iloc[0]}), include_groups=False).reset_index()
    table(agree)
else:
    agree = pd.DataFrame()
    display(Markdown("No PA-LOOA run in this profile (audit.looa.runs is empty)."))'''),
    ("md", "## Findings"),
    ("code", '''bias = est_df.set_index("estimator")["mean under null"]
lines = [f"- Under permuted labels the in-sample estimator averages **{bias['in_sample']:.3f}** "
         f"(2R = {mem.shape[0]}), the cross-fitted **{bias['cross_fit']:.3f}** and the null-corrected "
         f"**{bias['null_corrected']:.3f}**: the paper's estimator reports advantage where there is none."]
best = runs_df.groupby("attack")["delta_pp"].mean().sort_values(ascending=False)
lines.append(f"- Mean Δ over configurations by attack (pp): " + ", ".join(f"{a} {v:.2f}" for a, v in best.items()) + ".")
if len(agree):
    lines.append(f"- PA-LOOA vs PA-ALOOA (cross-fitted), Pearson r per run: " +
                 ", ".join(f"{r.run}: {r['pearson r']:.2f} over {int(r.targets)} targets" for _, r in agree.iterrows()) + ".")
display(Markdown("\\n".join(lines)))
json.dump({"null_mean": bias.to_dict(), "mean_delta_by_attack": best.to_dict()}, open(metrics_path, "w"), indent=1)'''),
])

nb("dpsgd_s_sweep", """# DP-SGD-S sweep: Δ and accuracy against τ, γ and ε

DP-SGD-S clips group k to C_k = max(τ·Q_k, C_min), where Q_k tracks the γ-quantile of group k's gradient norms
through noised counts; the counts' privacy cost is composed into the accountant (σ_eff), so every ε below covers
everything released by that model (ε is per model and per release: every setting draws its own noise). DP-SGD at
the same ε is the baseline. Attack: PA-ALOOA, cross-fitted. The sweep is reported whole: picking its best setting
would be tuning on private data, outside ε.""",
   'sweep = None', [
    ("code", '''if sweep is None:
    display(Markdown("This profile has no sweep."))
    sw = runs_df.iloc[0:0]
else:
    sw = runs_df[(runs_df.dataset == sweep["dataset"]) & (runs_df.model == sweep["model"])
                 & (runs_df.attack == "alooa_cross_fit") & runs_df.algorithm.isin(["dpsgd", "dpsgd_s"])].copy()
    sw = sw[(sw.algorithm == "dpsgd") | sw.tau.notna()]
    sw["setting"] = np.where(sw.algorithm == "dpsgd", "DP-SGD", "DP-SGD-S τ=" + sw.tau.astype(str) + " γ=" + sw.gamma.astype(str))
    table(sw[["setting", "epsilon", "seed", "accuracy", "delta_pp", "delta_bc", "delta_lo", "delta_hi", "p_delta", "sigma_g", "sigma_b", "q", "T", "eps_spent"]])
    sw[["setting", "epsilon", "tau", "gamma", "accuracy", "delta_pp", "delta_bc", "delta_lo", "delta_hi"]].to_csv(fig_dir / "sweep.csv", index=False)'''),
    ("md", "## Against ε"),
    ("code", '''if len(sw):
    show(plots.delta_vs(sw, "epsilon", hue="setting", title=f"{sweep['dataset']} / {sweep['model']}"), "delta_vs_epsilon")'''),
    ("md", "## Against τ (one line per γ and ε)"),
    ("code", '''if len(sw):
    s_only = sw[sw.algorithm == "dpsgd_s"].copy()
    s_only["γ, ε"] = "γ=" + s_only.gamma.astype(str) + ", ε=" + s_only.epsilon.astype(str)
    show(plots.delta_vs(s_only, "tau", hue="γ, ε", title="DP-SGD-S against τ"), "delta_vs_tau")'''),
    ("md", "## Pareto front of Δ against accuracy"),
    ("code", '''if len(sw):
    sw["label"] = sw["setting"]
    show(plots.pareto(sw, title="lower Δ and higher accuracy are better"), "pareto")'''),
    ("md", "## Findings"),
    ("code", '''if len(sw):
    lines = ["Every setting of the sweep is listed; none is selected. Choosing τ or γ from these Δ would be **tuning "
             "outside ε**: the Δ are measured on the audited training records themselves, so the choice depends on "
             "private data that no ε here accounts for, and the minimum over settings is biased downward (the "
             "lowest of several noisy estimates). To select, use seeds disjoint from the ones reported and report a "
             "fresh run.", ""]
    for eps, g in sw.groupby("epsilon"):
        base = g[g.algorithm == "dpsgd"]["delta_bc"].mean()
        per = g[g.algorithm == "dpsgd_s"].groupby("setting")[["delta_bc", "accuracy"]].mean()
        lines.append(f"- ε = {eps:g}: DP-SGD Δ = {base:.2f} pp (bias-corrected); DP-SGD-S: "
                     + "; ".join(f"{k} {r.delta_bc:.2f} pp ({100 * r.accuracy:.2f}%)" for k, r in per.iterrows()) + ".")
    display(Markdown("\\n".join(lines)))
    json.dump({f"e{e:g}-" + ("dpsgd" if k == "DP-SGD" else k.replace("DP-SGD-S ", "").replace(" ", "-")): float(v)
               for e, g in sw.groupby("epsilon") for k, v in g.groupby("setting")["delta_bc"].mean().items()},
              open(metrics_path, "w"), indent=1)
else:
    json.dump({}, open(metrics_path, "w"))'''),
])

nb("group_gpr", """# Group privacy risk: SGD, DP-SGD and DP-SGD-S on every dataset

GPR per group (mean PA-ALOOA cross-fitted advantage, pp) with 95% bootstrap intervals (records × model pairs), and
what DP-SGD-S changes: which groups got safer (leveling up) and which got riskier (leveling down), from paired
per-record differences on the same audit records.""", "", [
    ("code", '''main = groups_df[(groups_df.attack == "alooa_cross_fit") & groups_df.tau.isna()]
settings = main[["dataset", "model", "epsilon"]].drop_duplicates()
for _, st in settings.iterrows():
    eps_mask = main.epsilon.isna() | (main.epsilon == st.epsilon) if pd.notna(st.epsilon) else main.epsilon.isna()
    sub = main[(main.dataset == st.dataset) & (main.model == st.model) & eps_mask]
    if pd.isna(st.epsilon) or sub.algorithm.nunique() < 2:
        continue
    agg = sub.groupby(["label", "group"], sort=False)[["gpr", "gpr_lo", "gpr_hi"]].mean().reset_index()
    show(plots.gpr_by_group(agg, title=f"{st.dataset} / {st.model}, ε = {st.epsilon:g} (SGD: no DP)"),
         f"gpr_{st.dataset}_{st.model}_e{st.epsilon:g}")'''),
    ("md", "## Leveling up or down: GPR(DP-SGD-S) − GPR(DP-SGD) per group"),
    ("code", '''rng = np.random.default_rng(0)
level_rows, seed_rows = [], []
pairs = [(k, v) for k, v in runs.items() if v["algorithm"] == "dpsgd" and v["tau"] is None]
for name_a, ra in pairs:
    name_b = name_a.replace("-dpsgd-", "-dpsgd_s-")
    if name_b not in runs:
        continue
    a, b = results.records(results_dir, name_a), results.records(results_dir, name_b)
    gnames = summaries[name_a]["group_names"]
    d = stats.paired_group_difference(a["alooa_cross_fit"].to_numpy(), b["alooa_cross_fit"].to_numpy(),
                                      a["group"].to_numpy(), len(gnames), rng=rng)
    d["group"] = [gnames[k] for k in d["group"]]
    d["setting"] = f"{ra['dataset']}/{ra['model']} ε={ra['epsilon']:g} s{ra['seed']}"
    d["gpr_dpsgd"] = [summaries[name_a]["attacks"]["alooa_cross_fit"]["gpr"][gnames.index(g)] for g in d["group"]]
    level_rows.append(d)
level = pd.concat(level_rows) if level_rows else pd.DataFrame()
if len(level):
    for setting, d in level.groupby("setting", sort=False):
        if setting.endswith("s0"):
            show(plots.level_shift(d, title=setting), "level_" + setting.replace("/", "_").replace(" ", "_").replace("=", "").replace("ε", "e"))
    level["verdict"] = np.where(level.hi < 0, "safer", np.where(level.lo > 0, "riskier", "no clear change"))
    table(level[["setting", "group", "gpr_dpsgd", "change", "lo", "hi", "verdict"]], "{:.4f}")'''),
    ("md", "## DP-SGD vs DP-SGD-S across seeds (paired)"),
    ("code", '''main_runs = runs_df[(runs_df.attack == "alooa_cross_fit") & runs_df.tau.isna() & runs_df.algorithm.isin(["dpsgd", "dpsgd_s"])]
rows = []
for (ds, mo, eps), g in main_runs.groupby(["dataset", "model", "epsilon"]):
    p = g.pivot_table(index="seed", columns="algorithm", values="delta_bc").dropna()
    if len(p) >= 2:
        c = stats.paired_seed_comparison(p["dpsgd_s"].to_numpy(), p["dpsgd"].to_numpy(), rng=rng)
        rows.append({"dataset": ds, "model": mo, "epsilon": eps, **c})
paired = pd.DataFrame(rows)
if len(paired):
    table(paired)
else:
    display(Markdown("Fewer than two seeds per setting in this profile: no paired comparison over seeds."))'''),
    ("md", "## Findings"),
    ("code", '''lines = []
if len(level):
    for setting, d in level.groupby("setting", sort=False):
        hi_risk = d.sort_values("gpr_dpsgd").iloc[-1]
        lo_risk = d.sort_values("gpr_dpsgd").iloc[0]
        lines.append(f"- {setting}: the riskiest group under DP-SGD ({hi_risk.group}) changed by {100 * hi_risk.change:+.2f} pp "
                     f"[{100 * hi_risk.lo:+.2f}, {100 * hi_risk.hi:+.2f}]; the safest ({lo_risk.group}) by "
                     f"{100 * lo_risk.change:+.2f} pp [{100 * lo_risk.lo:+.2f}, {100 * lo_risk.hi:+.2f}].")
for _, r in paired.iterrows():
    lines.append(f"- {r.dataset}/{r.model} ε={r.epsilon:g}: Δ(DP-SGD-S) − Δ(DP-SGD) (bias-corrected) = {r.mean_diff:+.2f} pp over "
                 f"{int(r.n_seeds)} seeds, 95% CI [{r.lo:+.2f}, {r.hi:+.2f}], sign-flip p = {r.p_sign_flip:.3f}.")
display(Markdown("\\n".join(lines) if lines else "No DP-SGD / DP-SGD-S pair in this profile."))
json.dump({"leveling": level.to_dict(orient="records") if len(level) else [],
           "paired_seeds": paired.to_dict(orient="records")}, open(metrics_path, "w"), indent=1, default=float)'''),
])

nb("outcome_fairness", """# Outcome fairness: accuracy parity, demographic parity and equalized odds

For each configuration, the first model of its bank (trained on the non-audit records and half of the audit set)
is evaluated on the held-out test set through fairlearn's MetricFrame, with bootstrap 95% intervals over test
records; the across-model spread of test accuracy is in the index page. Multi-class tasks (MNIST, whose groups
are its labels) get accuracy parity only.""", 'n_boot = 200\nseed = 0', [
    ("code", '''from fairdp_core.data import load
from fairdp_core.fairness import outcome_fairness

rows, by_group = [], []
for name, r in runs.items():
    if r["tau"] is not None:
        continue
    data = load(Path(prepared_dir) / r["dataset"])
    pred = results.signals(results_dir, name)["test_pred"][0]
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
table(fair[["run", "metric", "value", "lo", "hi"]], "{:.4f}")'''),
    ("md", "## By setting"),
    ("code", '''for (ds, mo, eps), g in fair[fair.seed == 0].groupby(["dataset", "model", "epsilon"], dropna=False):
    if pd.isna(eps):
        continue
    sgd = fair[(fair.dataset == ds) & (fair.model == mo) & fair.epsilon.isna() & (fair.seed == 0)]
    show(plots.fairness_bars(pd.concat([sgd, g]), title=f"{ds} / {mo}, ε = {eps:g}"), f"fairness_{ds}_{mo}_e{eps:g}")'''),
    ("md", "## Per-group rates"),
    ("code", '''bg_all = pd.concat(by_group)
table(bg_all[["run", "group"] + [c for c in ("accuracy", "selection_rate", "tpr", "fpr") if c in bg_all]], "{:.4f}")'''),
    ("md", "## Findings"),
    ("code", '''lines = []
for (ds, mo, eps), g in fair[fair.seed == 0].groupby(["dataset", "model", "epsilon"]):
    dp = g[g.metric == "accuracy_parity"].set_index("label")["value"]
    lines.append(f"- {ds}/{mo} ε={eps:g}: accuracy parity " + ", ".join(f"{k} {v:.3f}" for k, v in dp.items()) + ".")
display(Markdown("\\n".join(lines)))
json.dump(fair.to_dict(orient="records"), open(metrics_path, "w"), indent=1, default=float)'''),
])
print("notebooks written")
