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
# # Audit comparison: does PA-ALOOA agree with PA-LOOA, and is it stricter than PA-GA, PA-GBA, LiRA and RMIA?
#
# [← the index: findings and main table](index.html)
#
# Each configuration trains 2R models on complementary halves of a stratified audit set (every audit record is IN for
# R models and OUT for R). Per record, an attack's *advantage* is TPR − FPR of a threshold rule over its 2R
# (score, membership) pairs; GPR_k averages it over group k, and Δ = max_k GPR_k − min_k GPR_k (pp).
# The paper's per-record estimator chooses the threshold on the same pairs it scores (*in-sample*); we also report a
# *cross-fitted* estimator (threshold chosen on half the model pairs, scored on the other half: unbiased under no
# leakage) and a *null-corrected* one (in-sample minus its mean under permuted membership labels).

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
looa_runs = None
n_null = None
seed = None

# %%
from pathlib import Path

import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from fairdp_core.config import load_params
from fairdp_core.reporting import helpers as rh
from fairdp_core.reporting import plots, results
from fairdp_core.reporting.pages import audit_claims

PARAMETERS = ("train_dir", "results_dir", "prepared_dir", "figures_dir", "metrics_path", "runs", "profile", "alpha", "looa_runs", "n_null", "seed")
globals().update(rh.fill_parameters("audit_comparison", params_file, {k: globals()[k] for k in PARAMETERS}))  # None: params
show, table = rh.shower(figures_dir), rh.tabler(figures_dir)
summaries, runs_df, groups_df = rh.frames(results_dir, runs)

# %%
rh.left_out(params_file)  # the profile's runs this page leaves out, and why

# %% [markdown]
# ## Δ by attack (the paper's Figs 8–10)
# Plug-in Δ (pp) of each attack for SGD, DP-SGD and DP-SGD-S (seed-averaged); black tick: the **null floor**, the
# mean Δ with group labels permuted among the audited records. A bar below its tick shows no group difference beyond
# chance. Every attack reads the same bank of 2R models; PA-LOOA needs 2R' models per target record.

# %%
runs_df["attack_label"] = runs_df["attack"].map(plots.ATTACK_LABELS)
runs_df["level_pp"] = [100 * float(np.mean(g)) if g is not None else np.nan for g in runs_df["gpr"]]
grid_df = runs_df[runs_df.tau.isna() & runs_df.algorithm.isin(["sgd", "dpsgd", "dpsgd_s"])]
by = grid_df.groupby(["setting", "epsilon", "label", "attack_label"], sort=False, dropna=False).agg(
    delta_pp=("delta_pp", "mean"), null_floor_pp=("null_floor_pp", "mean"), level_pp=("level_pp", "mean")).reset_index()
panels = rh.eps_panels(by)
if len(panels):
    show(plots.delta_by_attack(panels), "delta_by_attack",
         "Δ (pp) by attack and algorithm, one panel per dataset × ε; black tick: the null floor of that bar "
         "(SGD, no DP, repeated at each ε). Attacks: CF / IS / NC = PA-ALOOA cross-fitted / in-sample (the "
         "paper's) / null-corrected; GA, GBA = PA-GA, PA-GBA; LiRA on / off = LiRA online / offline; RMIA "
         "(Zarifzadeh et al. 2024, its threshold cross-fitted).")
    ins = panels[panels.attack_label == plots.ATTACK_LABELS["alooa_in_sample"]]["level_pp"]
    show(plots.delta_by_attack(panels[panels.attack_label != plots.ATTACK_LABELS["alooa_in_sample"]], "level_pp",
                               floor=None, ylabel="GPR level (pp)"), "gpr_level_by_attack",
         "GPR level by attack (pp; attack names as above): the mean of the groups' GPRs. PA-ALOOA in-sample (the "
         f"paper's estimator) is left out: its level, {ins.min():.0f}–{ins.max():.0f} pp, is mostly its own bias "
         "under no leakage (see the estimator section; its values are in the CSV below). The cross-fitted estimator "
         "is unbiased under no leakage and can come out below 0.")
long = runs_df[["run_label", "n_models", "attack_label", "delta_pp", "null_floor_pp", "level_pp"]].rename(
    columns={"run_label": "run", "attack_label": "attack", "n_models": "models (2R)", "level_pp": "GPR level (pp)"})
table(long, "Every run × attack: plug-in Δ, its null floor and the GPR level (pp)", csv="delta_by_attack")

# %% [markdown]
# ## Attacks compared by what they find beyond their null floor
# Plug-in Δ does not rank attacks (PA-GBA's per-group thresholds inflate it most for small groups). Each attack is
# read against its own null floor, with the test of "some group differs" over records × model pairs (its level holds
# in simulation, [coverage/coverage.md](coverage/coverage.md)), Holm-adjusted over every run × attack on this page.
# The in-sample and null-corrected estimators have no such test, nor has PA-GBA: its thresholds give groups of
# different sizes different advantages under equal leakage (−2.2 to −8.1 pp in simulation,
# [coverage/attack_coverage.md](coverage/attack_coverage.md)); read it against its null floor only.

# %%
from fairdp_core.audit.stats import holm

runs_df.loc[runs_df.attack == "gba", "p_delta"] = np.nan  # no valid test against 0 (see above)
runs_df["p_holm"] = holm(runs_df["p_delta"].to_numpy(dtype=float))
n_tests = int(runs_df["p_delta"].notna().sum())
by_attack = runs_df.groupby("attack_label").agg(runs=("run", "nunique"), delta_pp=("delta_pp", "mean"),
                                                null_floor_pp=("null_floor_pp", "mean"),
                                                significant=("p_holm", lambda p: int((p < alpha).sum())
                                                             if p.notna().any() else -1))
by_attack["excess_pp"] = by_attack["delta_pp"] - by_attack["null_floor_pp"]
by_attack = by_attack.sort_values("excess_pp", ascending=False).reset_index()
shown = by_attack.assign(significant=by_attack["significant"].map(lambda v: "no valid test" if v < 0 else str(v)))
table(shown.rename(columns={"attack_label": "attack", "significant": "runs significant after Holm"}),
      f"Per attack, means over the runs: plug-in Δ, null floor and their difference (pp); the runs whose p of 'some "
      f"group differs' stays below α = {alpha:g} after Holm over the {n_tests} tests on this page")
cost = pd.DataFrame([{"audit": "PA-ALOOA, PA-GA, PA-GBA, LiRA (one shared bank)", "models per configuration": f"{2 * s['R']}"}
                     for s in list(summaries.values())[:1]])
if looa_runs:
    cost.loc[len(cost)] = {"audit": "PA-LOOA (exact)", "models per configuration": "2R' per target record"}
table(cost, "Cost of each audit in trained models")

# %% [markdown]
# ## The three per-record estimators and their null distributions
# The first DP-SGD configuration: its loss signal, each estimator observed and under permuted membership labels.

# %%
from fairdp_core.audit import attacks
from fairdp_core.audit.design import AuditDesign
from fairdp_core.config import design_key

name = next((k for k, r in runs.items() if r["algorithm"] == "dpsgd"), next(iter(runs)))
r = runs[name]
design = AuditDesign.load(Path(results_dir).parent / "designs" / f"{design_key(r['dataset'], r['seed'])}.npz")
sig = results.signals(train_dir, name)
scores, mem = -sig["loss"].astype(float), design.membership
rng = np.random.default_rng(seed)
perm = rng.permuted(mem, axis=0)
ests = {"in-sample": attacks.in_sample_advantage, "cross-fitted": attacks.cross_fit_advantage,
        "null-corrected": lambda s, m: attacks.null_corrected_advantage(s, m, rng=rng, n_null=n_null)}
obs = {k: f(scores, mem) for k, f in ests.items()}
null = {k: f(scores, perm) for k, f in ests.items()}
show(plots.estimator_distributions(obs, null, title=f"{results.run_label(r)}: per-record advantage, 2R = {mem.shape[0]}"),
     "estimators", "Per-record advantage (pp) of each estimator, observed (blue) and with membership labels permuted "
     "(grey); dashed lines: the means.")
est_df = pd.DataFrame({"estimator": list(obs), "mean observed (pp)": [100 * obs[k].mean() for k in obs],
                       "mean under null (pp)": [100 * null[k].mean() for k in null]})
table(est_df, f"Mean per-record advantage (pp) of each estimator on {results.run_label(r)}, observed and under "
      "permuted membership labels (where there is no leakage)")

# %% [markdown]
# ## PA-LOOA against PA-ALOOA, record by record
# PA-LOOA trains 2R' models per target record (R' with it, R' without, all else equal); PA-ALOOA reads the one
# shared bank. Agreement: Pearson r with its 95% interval (Fisher z with a jackknife standard error; coverage checked by simulation,
# tests/test_reports.py), Spearman ρ, and the mean difference LOOA − ALOOA over the targets (pp, t interval). Each
# per-record advantage is itself noisy (ALOOA: 2R models; LOOA: 2R'), which pulls r toward 0 even when the two agree
# in expectation; the mean difference is the check that does not suffer from it.

# %%
claims = audit_claims(load_params(params_file), runs_df[runs_df.tau.isna()])
looa_frames = []
for name in looa_runs:
    p = Path(results_dir) / name / "looa.csv"
    if p.is_file():
        d = pd.read_csv(p)
        gnames = summaries[name]["group_names"]
        d["group"] = [gnames[k] for k in d["group"]]
        looa_frames.append(d.assign(run=results.run_label(runs[name])))
if looa_frames:
    looa = pd.concat(looa_frames)
    show(plots.looa_vs_alooa(looa, title=f"{looa['run'].iloc[0]}: cross-fitted advantage per target record"),
         "looa_vs_alooa",
         "PA-LOOA against PA-ALOOA advantage per target record (pp), coloured by group, jittered by up to ±1 pp so "
         "that equal values do not hide each other; dashed: y = x.")
    agree = pd.DataFrame([{"run": results.run_label(runs[k]), "targets": v["n"], "R'": v["R_prime"],
                           "pearson r": v["r"], "r low": v["lo"], "r high": v["hi"], "spearman ρ": v["spearman"],
                           "mean LOOA (pp)": v["looa_pp"], "mean ALOOA (pp)": v["alooa_pp"],
                           "LOOA − ALOOA (pp)": v["mean_diff_pp"], "low (pp)": v["diff_lo"], "high (pp)": v["diff_hi"]}
                          for k, v in claims["looa"].items()])
    table(agree, "PA-LOOA against PA-ALOOA on the same target records: correlation (95% interval: Fisher z, jackknife SE) and mean "
          "difference (95% t interval over targets)")
else:
    agree = pd.DataFrame()
    display(Markdown("No PA-LOOA run in this profile (audit.looa.runs is empty)."))

# %% [markdown]
# ## The attacks against their authors' definitions
# LiRA and RMIA scored as this project scores them and as their reference definitions do
# (`fairdp_core/audit/reference.py`), on a synthetic bank (32 models, 2,000 records, a leak in group b) and on this
# profile's most leaking non-private bank: rank correlation over the (model, record) pairs and each one's AUC.

# %%
from fairdp_core.audit.design import AuditDesign
from fairdp_core.audit.reference import parity_table

_rng = np.random.default_rng(seed)
_mem = np.zeros((32, 2000), bool)
for _r in range(16):
    _half = _rng.permutation(2000) < 1000
    _mem[2 * _r], _mem[2 * _r + 1] = _half, ~_half
_g = (_rng.random(2000) < 0.3).astype(int)
_phi = 2.0 * _rng.normal(size=(1, 2000)) + 0.7 * _rng.normal(size=(32, 2000)) + 0.6 * _mem * (_g == 1)
parity = [parity_table(_phi, _mem, _g, ["a", "b"], bank="synthetic (32 models, leak in b)")]
_sgd = [k for k, r in runs.items() if r["algorithm"] == "sgd" and k in summaries]
# the non-private bank whose records leak most (mean cross-fitted GPR over groups): one with something to find
real = max(_sgd, key=lambda k: np.mean(summaries[k]["attacks"]["alooa_cross_fit"]["gpr"]), default=None)
if real is not None:
    with np.load(Path(train_dir) / real / "signals.npz") as z:
        _rphi = z["phi"]
    _design = AuditDesign.load(Path(train_dir).parent / "designs" / f"{runs[real]['dataset']}-s{runs[real]['seed']}.npz")
    parity.append(parity_table(_rphi, _design.membership, _design.audit_group, summaries[real]["group_names"],
                               bank=results.run_label(runs[real])))
parity = pd.concat(parity, ignore_index=True)
_show = parity.drop(columns=[c for c in parity.columns if c.startswith("tpr1_")])
table(_show.rename(columns={"spearman": "Spearman ρ", "auc_project": "AUC (project)",
                            "auc_reference": "AUC (reference)", "differs": "what differs"}),
      "Each attack scored by the project and by its reference definition", floatfmt="{:.3f}")
_tpr = parity.melt(id_vars=["bank", "attack"], value_vars=[c for c in parity.columns if c.startswith("tpr1_")],
                   var_name="which", value_name="TPR at 1% FPR")
_tpr["scored by"] = _tpr["which"].str.split("_").str[1]
_tpr["group"] = _tpr["which"].str.split("_", n=2).str[2]
rh.linker(figures_dir)(
    _tpr.pivot_table(index=["bank", "attack", "group"], columns="scored by", values="TPR at 1% FPR").reset_index(),
    "parity_tpr", "TPR at 1% FPR per group, scored by the project and by the reference definition")
display(Markdown("Why the project departs from the reference, and the two RMIA corrections measured: "
                 "[docs/attacks.md](../docs/attacks.md)."))

# %% [markdown]
# ## Findings in detail

# %%
bias = est_df.set_index("estimator")["mean under null (pp)"]
lines = [f"- With no leakage (permuted labels) the in-sample estimator averages **{bias['in-sample']:.1f} pp** "
         f"(2R = {mem.shape[0]}), the cross-fitted **{bias['cross-fitted']:.1f} pp** and the null-corrected "
         f"**{bias['null-corrected']:.1f} pp**: the paper's estimator reports advantage where there is none."]
names = {"ga": "PA-GA", "gba": "PA-GBA"}
for key, v in claims["strictness"].items():
    ours, rival = key.split("-")
    est = ("in-sample (the paper's; its level includes the estimator's own bias, "
           f"{bias['in-sample']:.1f} pp under no leakage)" if ours == "alooa_in_sample" else "cross-fitted (unbiased)")
    if v["lo"] is None:
        continue
    verdict = ("stricter" if v["lo"] > 0 else "less strict" if v["hi"] < 0 else "not distinguishable")
    lines.append(f"- PA-ALOOA {est} against {names[rival]}: GPR level {v['mean_pp']:+.1f} pp [{v['lo']:+.1f}, "
                 f"{v['hi']:+.1f}] over {v['runs']} DP runs, higher in {v['higher']}: **{verdict}**.")
_rm = parity[parity.attack == "RMIA (γ = 1)"]
lines.append("- Against their reference definitions (the parity table), RMIA at γ = 1 ranks the (model, record) pairs "
             + ("alike" if (_rm.spearman >= 0.98).all() else "differently") + " (Spearman "
             + ", ".join(f"{r.spearman:.3f}" for r in _rm.itertuples()) + " on the synthetic and the real bank).")
lines.append("- Δ beyond its null floor, mean over runs (pp): " + ", ".join(
    f"{r.attack_label} {r.excess_pp:+.2f}" for r in by_attack.itertuples()) + ".")
for k, v in claims["looa"].items():
    agrees = v["diff_lo"] is not None and v["diff_lo"] <= 0 <= v["diff_hi"]
    half = (v["diff_hi"] - v["diff_lo"]) / 2
    verdict = ("**the levels differ**" if not agrees else
               f"**consistent**: no level difference beyond ±{half:.1f} pp, and r > 0" if v["lo"] > 0 else
               f"**inconclusive**: no level difference beyond ±{half:.1f} pp, and the record-level correlation is not "
               "distinguishable from 0")
    lines.append(f"- PA-LOOA vs PA-ALOOA on {results.run_label(runs[k])} ({v['n']} targets, R' = {v['R_prime']}): "
                 f"r = {v['r']:.2f} [{v['lo']:.2f}, {v['hi']:.2f}], mean difference {v['mean_diff_pp']:+.2f} pp "
                 f"[{v['diff_lo']:+.2f}, {v['diff_hi']:+.2f}]: {verdict}.")
display(Markdown("\n".join(lines)))

# %% tags=["findings"]
# the page's answer, shown first (reporting moves this cell under the title)
sentences = ["With no leakage (permuted labels) the paper's in-sample estimator reports **{bias_in:.1f} pp** of "
             "membership advantage on average, the cross-fitted one {bias_cf:.1f} pp: the paper's estimator finds "
             "advantage where there is none."]
numbers = {"bias_in": float(bias["in-sample"]), "bias_cf": float(bias["cross-fitted"])}
cf = {rival: claims["strictness"].get(f"alooa_cross_fit-{rival}") for rival in ("ga", "gba")}
cf = {k: v for k, v in cf.items() if v and v["lo"] is not None}
if cf:
    parts = [f"minus {name}'s " + "{%s:+.1f} pp [{%s_lo:+.1f}, {%s_hi:+.1f}]" % (k, k, k)
             for k, name in (("ga", "PA-GA"), ("gba", "PA-GBA")) if k in cf]
    reversed_ = all(v["hi"] < 0 for v in cf.values())
    sentences.append("Cross-fitted, PA-ALOOA's GPR level " + "; ".join(parts) + " (t intervals over {strict_runs} DP "
                     "runs): " + ("the paper's \"stricter\" is **reversed** once the estimator's own bias is removed."
                                  if reversed_ else "the paper's \"stricter\" holds only where these are above 0."))
    for k, v in cf.items():
        numbers |= {k: v["mean_pp"], f"{k}_lo": v["lo"], f"{k}_hi": v["hi"]}
    numbers["strict_runs"] = next(iter(cf.values()))["runs"]
looa = {k: v for k, v in claims["looa"].items() if v["lo"] is not None and v["diff_lo"] is not None}
if looa:
    k, v = next(iter(looa.items()))
    sentences.append(f"PA-LOOA and PA-ALOOA on {results.run_label(runs[k])}: " + "record-level r = {r:.2f} "
                     "[{r_lo:.2f}, {r_hi:.2f}] over {targets} targets, mean difference {looa_diff:+.2f} pp "
                     "[{looa_lo:+.2f}, {looa_hi:+.2f}].")
    numbers |= {"r": v["r"], "r_lo": v["lo"], "r_hi": v["hi"], "targets": v["n"], "looa_diff": v["mean_diff_pp"],
                "looa_lo": v["diff_lo"], "looa_hi": v["diff_hi"]}
if len(sentences) < 2:
    sentences.append("Neither the rivals' strictness nor PA-LOOA's agreement is measured in this profile.")
found = rh.findings(sentences, numbers)
rh.write_metrics(metrics_path, {**found, "null_mean_pp": bias.to_dict(),
                                "mean_excess_delta_by_attack": by_attack.set_index("attack_label")["excess_pp"].to_dict(),
                                "strictness": claims["strictness"], "looa": claims["looa"]})
