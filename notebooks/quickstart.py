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
# # Quickstart for Opacus users: DP-SGD, reading ε, choosing C privately, DP-SGD-S and its rivals, then a per-group audit
#
# [← the index](index.html)
#
# A plain Opacus training loop on MNIST (a small MLP), as you would write it, in six steps: (1) DP-SGD with
# `PrivacyEngine.make_private`; (2) reading ε from the accountant with the current Opacus API; (3) choosing the
# clipping bound C from the per-sample gradient norms **privately** (a DP percentile whose ε is composed with
# training, `fairdp_core.study.clip_tuning`), beside the usual non-private percentile (tuning outside ε); (4) switching
# to DP-SGD-S (per-group adaptive clipping) with `fairdp_core.opacus_compat.make_private_dpsgd_s`; (5) then to each
# rival: DPSGD-F, DPSGD-Global-Adapt and AdaClip (`make_private_dpsgd_f`, `make_private_global_adapt`,
# `make_private_adaclip`); (6) auditing what you trained, per group, with `fairdp_core.audit.custom.audit_model`. The groups
# here are the digits. The code below is the whole example: copy it into your own notebook.

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
n_train = None
epsilon_target = None

# %%
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fairdp_core.audit.custom import AuditSettings, audit_model
from fairdp_core.audit.one import audit_one, loss_scores
from fairdp_core.data.base import load
from fairdp_core.opacus_compat import (
    make_private_adaclip,
    make_private_dpsgd_f,
    make_private_dpsgd_s,
    make_private_global_adapt,
)

# %%
# the page's plumbing: parameters from params.yaml when papermill did not set them, and the helpers that save each
# table and figure beside the page (in your own notebook, use print/display and plt.show instead)
from fairdp_core.reporting import helpers as rh
from fairdp_core.reporting import plots
from fairdp_core.study import clip_tuning

PARAMETERS = ("train_dir", "results_dir", "prepared_dir", "figures_dir", "metrics_path", "runs", "profile", "alpha",
              "seed", "n_train", "epsilon_target")
globals().update(rh.fill_parameters("quickstart", params_file, {k: globals()[k] for k in PARAMETERS}))  # None: params
show, table = rh.shower(figures_dir), rh.tabler(figures_dir)

# %%
# seed, n_train, epsilon_target and prepared_dir come from params.yaml (the pipeline's: seed 0, 5,000 images, ε = 10,
# data/prepared); set them by hand to run this elsewhere
torch.manual_seed(seed)
data = load(Path(prepared_dir) / "mnist")
idx = np.random.default_rng(seed).permutation(len(data.train))[:n_train]
X = torch.as_tensor(data.train.X[idx]).flatten(1)
y = torch.as_tensor(data.train.y[idx]).long()
g = torch.as_tensor(data.train.group[idx]).long()
Xte, yte = torch.as_tensor(data.test.X).flatten(1), torch.as_tensor(data.test.y).long()
B, EPOCHS, LR, DELTA = 128, 3, 0.5, 1e-5  # LR: DP-SGD and its rivals
LR_S = 0.05  # DP-SGD-S's own lr on MNIST-MLP (as params.yaml's mnist-mlp-dpsgd_s override, from `fairdp tune`)


def mlp() -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(784, 64), nn.Tanh(), nn.Linear(64, 10))


def accuracy(model) -> float:
    with torch.no_grad():
        return float((model(Xte).argmax(1) == yte).float().mean())


def train(model, optimizer, loader, groups_too: bool = False) -> None:
    """The plain Opacus loop: forward, loss, backward, step (DP-SGD-S also needs the batch's groups)."""
    for _ in range(EPOCHS):
        for batch in loader:
            xb, yb = batch[0], batch[1]
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            if groups_too:
                optimizer.set_groups(batch[2])  # DP-SGD-S: the batch's groups, before step()
            optimizer.step()


display(Markdown(f"{n_train:,} MNIST training images (of {len(data.train):,} prepared), batch {B}, {EPOCHS} epochs, "
                 f"lr {LR:g} (DP-SGD-S: {LR_S:g}, its own tuned value), δ = {DELTA:g}; test accuracy on "
                 f"{len(yte):,} images."))

# %% [markdown]
# ## 1–2. DP-SGD with `make_private`, and ε from the accountant
# `make_private_with_epsilon` calibrates σ to a target ε for the planned epochs; the accountant then reports the ε
# actually spent (`privacy_engine.get_epsilon(delta)`), for the steps taken.

# %%
rows = []
model = mlp()
pe = PrivacyEngine(accountant="rdp")
loader = DataLoader(TensorDataset(X, y), batch_size=B, shuffle=True)
model, opt, dl = pe.make_private_with_epsilon(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR),
                                              data_loader=loader, target_epsilon=epsilon_target, target_delta=DELTA,
                                              epochs=EPOCHS, max_grad_norm=1.0)
train(model, opt, dl)
eps_spent = pe.get_epsilon(DELTA)
rows.append({"method": "DP-SGD, C = 1 (a guess)", "lr": opt.param_groups[0]["lr"], "C": 1.0,
             "σ": opt.noise_multiplier, "q": dl.sample_rate, "T": pe.accountant.history[-1][2], "ε": eps_spent,
             "accuracy_pct": 100 * accuracy(model)})
display(Markdown(f"DP-SGD at C = 1: σ = {opt.noise_multiplier:.3f}, Poisson q = {dl.sample_rate:.4f}, ε spent = "
                 f"**{eps_spent:.3f}** at δ = {DELTA:g} (RDP accountant), test accuracy {100 * accuracy(model):.1f}%."))

# %% [markdown]
# ## 3. Choosing C from the norm percentiles, privately
# The usual advice: set C at the 50th–90th percentile of the per-sample gradient norms. Computed on the training
# data that choice reads every record. `clip_tuning.tune_clip` releases the percentile with the exponential
# mechanism (ε_q = 0.1 here, on the initial model's norms) and calibrates σ so that the quantile release and
# training together stay at the target ε.

# %%
n_batches = len(DataLoader(TensorDataset(X, y), batch_size=B))
q, steps = 1 / n_batches, EPOCHS * n_batches  # Opacus's Poisson rate and the steps the loop below takes
tuned = clip_tuning.tune_clip(X.numpy(), y.numpy(), n_classes=10, model="mlp", quantile=0.5, epsilon_q=0.1,
                              target_epsilon=epsilon_target, sample_rate=q, steps=steps, delta=DELTA, seed=seed)
norms = clip_tuning.gradient_norms(X.numpy(), y.numpy(), model="mlp", n_classes=10, seed=seed)
model = mlp()
pe = PrivacyEngine(accountant="rdp")
model, opt, dl = pe.make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR),
                                 data_loader=DataLoader(TensorDataset(X, y), batch_size=B, shuffle=True),
                                 noise_multiplier=tuned["sigma"], max_grad_norm=tuned["clip"])
train(model, opt, dl)
dp_model = model  # audited alone in section 6
eps_train = pe.get_epsilon(DELTA)
eps_total = clip_tuning.composed_epsilon(tuned["sigma"], sample_rate=dl.sample_rate,
                                         steps=pe.accountant.history[-1][2], delta=DELTA, epsilon_q=0.1)
rows.append({"method": "DP-SGD, C = DP median of the norms", "lr": opt.param_groups[0]["lr"],
             "C": tuned["clip"], "σ": tuned["sigma"], "q": dl.sample_rate, "T": pe.accountant.history[-1][2], "ε": eps_total,
             "accuracy_pct": 100 * accuracy(model)})
pct = [clip_tuning.nonprivate_percentile(norms, p / 100) for p in (50, 75, 90)]  # outside ε: to compare only
display(Markdown(f"DP median of the norms: C = **{tuned['clip']:.3g}** (non-private 50th / 75th / 90th "
                 f"percentiles {pct[0]:.3g} / {pct[1]:.3g} / {pct[2]:.3g}, outside ε: shown to compare, not to "
                 f"choose); σ = {tuned['sigma']:.3f} keeps training ({eps_train:.3f}) and the quantile release "
                 f"(ε_q = 0.1) at ε = {eps_total:.3f} in total."))

# %% [markdown]
# ## 4. DP-SGD-S in the same loop
# `make_private_dpsgd_s` returns Opacus's module and Poisson loader with a `DPSGDSOptimizer`: each group k (here a
# digit) is clipped at C_k = max(τ·Q_k, C_min), Q_k tracking the γ-quantile of the group's norms from counts noised
# with σ_b, and the accountant is charged σ_eff = (σ_g⁻² + σ_b⁻²)^(-1/2) for the gradient and the counts together.
# Tell it the batch's groups with `set_groups` before each `step()`.

# %%
from opacus.accountants.utils import get_noise_multiplier

model = mlp()
pe = PrivacyEngine(accountant="rdp")
loader = DataLoader(TensorDataset(X, y, g), batch_size=B, shuffle=True)
sigma_eff = get_noise_multiplier(target_epsilon=epsilon_target, target_delta=DELTA, sample_rate=1 / len(loader),
                                 epochs=EPOCHS, accountant="rdp")
model, opt, dl = make_private_dpsgd_s(pe, module=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR_S),
                                      data_loader=loader, noise_multiplier=sigma_eff, sigma_b=B / 20, n_groups=10,
                                      tau=1.0, gamma=0.75, q_init=tuned["clip"])
train(model, opt, dl, groups_too=True)
eps_s = pe.get_epsilon(DELTA)
rows.append({"method": "DP-SGD-S (quantile rule, σ_b = B/20)", "lr": opt.param_groups[0]["lr"],
             "C": float(opt.bounds.max()), "σ": sigma_eff, "q": dl.sample_rate, "T": pe.accountant.history[-1][2], "ε": eps_s,
             "accuracy_pct": 100 * accuracy(model)})
s_bounds = opt.bounds.detach().numpy()
bounds = pd.DataFrame({"digit": ["final bound C_k"], **{str(k): [float(v)] for k, v in enumerate(s_bounds)}})
table(bounds, "DP-SGD-S: each digit's clipping bound at the end of training (from the noised counts alone)")

# %% [markdown]
# ## 5. The rivals in the same loop: DPSGD-F, DPSGD-Global-Adapt, AdaClip
# Each is one `make_private_<rule>` call, charged at σ_eff like DP-SGD-S (the counts it releases are noised and
# counted): **DPSGD-F** (Xu et al. 2021) raises a group's bound C_k = C0·(1 + a_k / mean_j a_j) with its share a_k of
# gradients above C0 in the batch's noised counts (it needs the batch's groups, like DP-SGD-S); **DPSGD-Global-Adapt**
# (Esipova et al. 2023) scales every gradient by C / max(Z, ‖g‖), Z tracking a high quantile of the norms from a
# noised count; **AdaClip** (Andrew et al. 2021) is Opacus's own `AdaClipDPOptimizer`, one bound C tracking the
# median norm. Same data, lr, epochs and target ε as above; C0 (DPSGD-F's base bound, Global-Adapt's C, AdaClip's
# starting C) is the private median.

# %%
RIVALS = {
    "DPSGD-F": lambda pe, m, o, ld, s: make_private_dpsgd_f(pe, module=m, optimizer=o, data_loader=ld, noise_multiplier=s,
                                                           sigma_b=10.0, n_groups=10, clip=tuned["clip"]),
    "DPSGD-Global-Adapt": lambda pe, m, o, ld, s: make_private_global_adapt(
        pe, module=m, optimizer=o, data_loader=ld, noise_multiplier=s, sigma_b=10.0, clip=tuned["clip"]),
    "AdaClip": lambda pe, m, o, ld, s: make_private_adaclip(pe, module=m, optimizer=o, data_loader=ld,
                                                           noise_multiplier=s, sigma_b=B / 20, clip=tuned["clip"]),
}
for name, make in RIVALS.items():
    model = mlp()
    pe = PrivacyEngine(accountant="rdp")
    loader = DataLoader(TensorDataset(X, y, g), batch_size=B, shuffle=True)
    model, opt, dl = make(pe, model, torch.optim.SGD(model.parameters(), lr=LR), loader, sigma_eff)
    train(model, opt, dl, groups_too=name == "DPSGD-F")
    final_c = (float(opt.bounds.max()) if hasattr(opt, "bounds") else float(opt.clip) if name == "DPSGD-Global-Adapt"
               else float(opt.max_grad_norm))
    rows.append({"method": name, "lr": opt.param_groups[0]["lr"], "C": final_c, "σ": sigma_eff,
                 "q": dl.sample_rate,
                 "T": pe.accountant.history[-1][2], "ε": pe.get_epsilon(DELTA), "accuracy_pct": 100 * accuracy(model)})

# %% [markdown]
# ## Summary
# The rivals' C is the one at the end of training (DPSGD-F: the largest group bound; Global-Adapt: its C; AdaClip: its
# tracked bound).

# %%
summary = pd.DataFrame(rows)
table(summary, f"The {len(summary)} runs on {n_train:,} images: lr, C (DP-SGD-S, DPSGD-F: the largest group bound), σ "
      "(σ_eff where counts are released), Poisson q, steps T, ε at δ = 1e-5 (RDP; the tuned run's includes its "
      "quantile release), test accuracy", "{:.3f}")
fig, ax = plots.plt.subplots(figsize=(5.5, 1.7))
kinds = ["DP-SGD", "DP-SGD", "DP-SGD-S", *RIVALS]
ax.barh(summary["method"], summary["accuracy_pct"], color=[plots.ALGORITHM_COLORS[k] for k in kinds])
ax.invert_yaxis()
ax.tick_params(labelsize=7)
ax.set_xlabel("test accuracy (%)", fontsize=8)
fig.tight_layout()
fig.fairdp_colors = {k: plots.ALGORITHM_COLORS[k] for k in dict.fromkeys(kinds)}
show(fig, "accuracy", f"Test accuracy (%) of the {len(summary)} runs at ε = {epsilon_target:g} (δ = 1e-5).")
s_row = rows[2]
display(Markdown(f"- All {len(summary)} runs spend at most ε = {epsilon_target:g} (the tuned one including its quantile "
                 "release); the σ, q and T behind each are in the table.\n"
                 f"- DP-SGD-S (lr {s_row['lr']:g}, its own tuned value) ends with group bounds from "
                 f"{float(s_bounds.min()):.3g} to {s_row['C']:.3g}; its gradient noise scales with the largest, "
                 f"and its test accuracy is {s_row['accuracy_pct']:.1f}% against DP-SGD's "
                 f"{rows[1]['accuracy_pct']:.1f}% at the private median C.\n"
                 f"- The rivals, at DP-SGD's lr {rows[3]['lr']:g} and the same ε: " + ", ".join(f"{r['method']} {r['accuracy_pct']:.1f}%" for r in rows[3:])
                 + ".\n"
                 "- The non-private percentiles are shown for comparison only; the DP one is the one to use."))

# %% [markdown]
# ## 6. Audit what you trained, per group
# Membership risk is a property of the training recipe, so an audit needs more than the one model above:
# `audit_model` trains 2R copies of the same network with the same DP-SGD recipe (the private-median C, lr, epochs and
# target ε) on complementary halves of the audited images, runs the study's membership attacks on them, and gives
# each group's risk (GPR: its mean per-record membership advantage, in pp) with a 95% interval. 2R = 16 here, a quick
# look; the study audits with more models.

# %%
audit = audit_model(X.numpy(), y.numpy(), g.numpy(),
                    AuditSettings(model=mlp, algorithm="dpsgd", epsilon=epsilon_target, R=8, epochs=EPOCHS,
                                  batch_size=B, lr=LR, clip=tuned["clip"], seed=seed, progress=False),
                    group_names=[f"digit {k}" for k in range(10)])
a = audit.summary["attacks"]["alooa_cross_fit"]
table(audit.table().sort_values("gpr_pp", ascending=False),
      f"Each digit's risk under the recipe above (PA-ALOOA cross-fitted, {audit.summary['m']:,} images, "
      f"2R = {audit.summary['n_models']}): GPR, pp, 95% interval")
display(Markdown(f"The riskiest and safest digits differ by Δ = **{a['delta_pp']:.2f} pp** (95% interval "
                 f"[{a['delta_lo']:.2f}, {a['delta_hi']:.2f}]; null floor {a['null_floor_pp']:.2f} pp, the Δ that "
                 "permuted digit labels give): "
                 + ("the audit tells some digits' risks apart." if a["delta_lo"] > 0 else
                    "at this size the audit cannot tell the digits' risks apart.")
                 + " `audit.write('audit/')` saves the per-group tables, ROC curves and the accounting."))
# the model of section 3 alone: its losses on its training images against the test images
one = audit_one(loss_scores(dp_model, X, y), loss_scores(dp_model, Xte, yte), g.numpy(), data.test.group,
                alpha=alpha, seed=seed)
d1, t1 = one.delta(), one.table()  # the same result type as the bank's audit above
display(Markdown(f"**The model of section 3 alone** (`audit_one`): per-digit advantage intervals hold 0 for "
                 f"{int(((t1.lo_pp <= 0) & (t1.hi_pp >= 0)).sum())} of 10 digits; Δ = "
                 f"{d1['delta_pp']:.2f} pp [{d1['delta_lo']:.2f}, {d1['delta_hi']:.2f}], null floor "
                 f"{d1['null_floor_pp']:.2f}."))

# %% tags=["findings", "hide-input"]
# the page's answer, shown first (reporting moves this cell under the title)
found = rh.findings(
    ["At ε = {eps:g}, DP-SGD in a plain Opacus loop reaches **{acc_dp:.1f}%** test accuracy with C from a private "
     "median ({acc_c1:.1f}% at a guessed C = 1), and DP-SGD-S {acc_s:.1f}%.",
     "Every run spends at most ε = {eps_max:.3f} by Opacus's RDP accountant (δ = 1e-5), the private choice of C "
     "included.",
     "The per-group audit of the DP-SGD recipe (2R = {n_models}) puts the riskiest and safest digits {delta:.2f} pp "
     "apart (simultaneous 95% interval [{delta_lo:.2f}, {delta_hi:.2f}], null floor {floor:.2f} pp): "
     + ("some digits' risks differ." if a["delta_lo"] > 0 else "at this size it cannot tell the digits apart.")],
    {"eps": epsilon_target, "acc_dp": rows[1]["accuracy_pct"], "acc_c1": rows[0]["accuracy_pct"],
     "acc_s": rows[2]["accuracy_pct"], "eps_max": max(r["ε"] for r in rows), "n_models": audit.summary["n_models"],
     "delta": a["delta_pp"], "delta_lo": a["delta_lo"], "delta_hi": a["delta_hi"], "floor": a["null_floor_pp"]})
rh.write_metrics(metrics_path, {**found, **{key: {"epsilon": r["ε"], "accuracy": r["accuracy_pct"] / 100}
                                            for key, r in zip(("dpsgd_c1", "dpsgd_dp_median", "dpsgd_s", "dpsgd_f",
                                                               "global_adapt", "adaclip"), rows)}})
