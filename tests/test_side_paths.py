"""The paths that report an ε outside the engine's main loop, measured against the mechanism they run.

- The Opacus optimizers of every rule (DP-SGD-S, DPSGD-F, Global-Adapt, AdaClip): the gradient noise they add,
  measured on weight coordinates whose gradients are exactly 0, has std σ_g · (the rule's noise bound) at every
  step, with the bound below and above the gradient norms (or below and above C), and it is fresh at every step.
- The engine's gradient noise on a model small enough that 64 steps share one pre-drawn noise block: fresh at
  every step (the weights' random walk has the variance of T independent draws).
- ``tune_clip``: its release is drawn at the ε_q that it charges (the histogram of releases over seeds against
  the exponential mechanism's distribution at that ε_q).
- The accountants: the PRV and RDP ε the project reports against an independent implementation (Google's
  dp-accounting: its PLD accountant for PRV, its RDP accountant for RDP), within 1%.

Seeds and tolerances are stated in each test (SE: standard errors). ``tests/privacy_breakages.py`` breaks each.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from opacus import GradSampleModule
from torch import nn

from fairdp_core.engine import TrainSpec, calibrate_sigma, epsilon, split_sigma, train_bank
from fairdp_core.engine.accounting import history_epsilon
from fairdp_core.models import build_model
from fairdp_core.opacus_compat import AdaClipOptimizer, DPSGDFOptimizer, DPSGDSOptimizer, GlobalAdaptOptimizer
from fairdp_core.study import clip_tuning as ct

# ------------------------------------------------------------------ the Opacus optimizers, step by step

D = 2_000          # zero-input weight coordinates per class: 4,000 noise draws per step (SE of a step's std 1.1%)
BATCH, STEPS = 16, 20
SIGMA_EFF, SIGMA_B = 1.0, 2.0  # σ_g = 1.155 σ_eff (1.033 for AdaClip): noise at σ_eff would show


def _optimizer(rule: str, start: float, params, gen: torch.Generator):
    """The rule's Opacus optimizer with its bound (or Z) starting at ``start``, loss summed (no division by B)."""
    common = dict(noise_multiplier=SIGMA_EFF, expected_batch_size=BATCH, loss_reduction="sum", generator=gen)
    sgd = torch.optim.SGD(params, lr=0.0)  # the model never moves: every step sees the same norms
    if rule == "dpsgd_s":
        return DPSGDSOptimizer(sgd, sigma_b=SIGMA_B, n_groups=2, q_init=(start, start), **common)
    if rule == "dpsgd_f":
        return DPSGDFOptimizer(sgd, sigma_b=SIGMA_B, n_groups=2, clip=start, **common)
    if rule == "global_adapt":
        return GlobalAdaptOptimizer(sgd, sigma_b=SIGMA_B, clip=1.0, z_init=start, **common)
    return AdaClipOptimizer(sgd, target_unclipped_quantile=0.5, clipbound_learning_rate=0.2, max_clipbound=100.0,
                            min_clipbound=0.01, unclipped_num_std=SIGMA_B, max_grad_norm=start, **common)


def _noise_bound(rule: str, opt, before: float) -> float:
    """The rule's noise std, from its published definition and its public state: DP-SGD-S and AdaClip add
    σ_g · (bound before the step's update); DPSGD-F σ_g · max over all groups of the bounds its release set for
    this step; Global-Adapt σ_g · C (every scaled gradient has norm ≤ C, whatever Z)."""
    if rule == "dpsgd_s":
        return split_sigma(SIGMA_EFF, SIGMA_B) * before
    if rule == "dpsgd_f":
        return split_sigma(SIGMA_EFF, SIGMA_B) * float(opt.bounds.max())
    if rule == "global_adapt":
        return split_sigma(SIGMA_EFF, SIGMA_B) * 1.0
    return split_sigma(SIGMA_EFF, 2 * SIGMA_B) * before  # Opacus's AdaClip split: the count's multiplier is 2σ_u


def _bound(rule: str, opt) -> float:
    return {"dpsgd_s": lambda: float(opt.bounds.max()), "dpsgd_f": lambda: float(opt.bounds.max()),
            "global_adapt": lambda: float(opt.Z), "adaclip": lambda: float(opt.max_grad_norm)}[rule]()


@pytest.mark.parametrize("start", [0.2, 5.0], ids=["bound-below", "bound-above"])
@pytest.mark.parametrize("rule", ["dpsgd_s", "dpsgd_f", "global_adapt", "adaclip"])
def test_opacus_optimizer_noise_is_the_rules_bound_in_every_regime_and_fresh_each_step(rule, start):
    """Seed 0, an LR on inputs that are 0 but for the bias: every per-sample gradient norm is ≈ 0.7 (the bias's),
    so a bound of 0.2 sits below every norm and 5 above (for Global-Adapt, Z below and above C = 1). For 20 steps
    the weight gradient is the noise alone: each step's std is the rule's σ_g · bound within 6% (5 SE), their mean
    within 2%; successive steps' draws are uncorrelated (|r| < 5/√4000). A bound read at the wrong time, noise at
    the initial bound, at C instead of max_k C_k, or one draw reused, fails here."""
    torch.manual_seed(0)
    gsm = GradSampleModule(build_model("lr", (D,), 2))
    opt = _optimizer(rule, start, gsm.parameters(), torch.Generator().manual_seed(0))
    x, y = torch.zeros(BATCH, D), torch.arange(BATCH) % 2
    groups = torch.arange(BATCH) % 2
    ratios, draws, bounds = [], [], []
    for _ in range(STEPS):
        before = _bound(rule, opt)
        bounds.append(before)
        opt.zero_grad()
        nn.functional.cross_entropy(gsm(x), y, reduction="sum").backward()
        if rule in ("dpsgd_s", "dpsgd_f"):
            opt.set_groups(groups)
        opt.step()
        noise = gsm._module.fc.weight.grad.detach().flatten().double()
        draws.append(noise)
        ratios.append(noise.std().item() / _noise_bound(rule, opt, before))
    ratios = np.array(ratios)
    assert np.abs(ratios - 1).max() < 0.06, ratios
    assert abs(ratios.mean() - 1) < 0.02, ratios.mean()
    z = torch.stack(draws)
    z = (z - z.mean(1, keepdim=True)) / z.std(1, keepdim=True)
    lag1 = (z[1:] * z[:-1]).mean(1)
    assert lag1.abs().max() < 5 / math.sqrt(z.shape[1]), lag1
    # the regime was the one named: the bound (or Z) sat on its side of the norms ≈ 0.7 (of C = 1) for at least
    # two of the measured steps (DPSGD-F's bounds are C0·(1 + a_k / mean a): ≥ C0 throughout)
    side = np.array(bounds)
    assert ((side < 0.7) if start < 1 else (side > 1)).sum() >= 2, bounds


# ------------------------------------------------------------------ the engine: one noise block, many steps

def test_engine_noise_is_fresh_at_every_step_within_a_noise_block():
    """Every Poisson batch empty (no record is a member; the sampler still runs over all n = 100 at q = 0.1), an LR
    with 50 inputs (102 parameters: 64 steps share one pre-drawn noise block), T = 200 steps, 8 models: each weight
    moves by the sum of T independent draws, std η/B · σ·C · √T, within 10% (800 weights, SE 2.5%). A draw reused
    for two steps would give √2 times that, a block never redrawn about 1.8 times. (Noise shared between models
    is tested in tests/test_engine.py.)"""
    from fairdp_core.engine.trainer import _NoiseBank

    from .test_privacy import _init_params

    n, d, B, lr, C, sigma = 100, 50, 10, 0.5, 0.8, 1.2
    spec = TrainSpec(algorithm="dpsgd", epochs=20, batch_size=B, lr=lr, clip=C, noise_multiplier=sigma)
    X = np.zeros((n, d), np.float32)
    bank = train_bank(X, np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros((8, n), bool), spec, n_classes=2,
                      n_groups=1, seed=0, progress=False, sample_over=np.ones((8, n), bool))
    assert bank.steps == 200
    assert _NoiseBank([torch.Generator()], 2 * d + 2, "cpu").block == 64
    w0 = _init_params(spec, 0, 8, (d,))["fc.weight"]
    moved = (bank.params["fc.weight"] - w0).flatten().double() * B / lr
    want = sigma * C * math.sqrt(bank.steps)
    assert abs(moved.std().item() / want - 1) < 0.10, (moved.std().item(), want)


# ------------------------------------------------------------------ tune_clip: released at the ε_q it charges

def test_tune_clip_releases_its_bound_at_the_epsilon_q_it_charges(monkeypatch):
    """Fixed norms (seed 0: 400 lognormal), ε_q = 0.05: over 3,000 seeds the releases' histogram on the candidate
    grid matches the exponential mechanism at the ε_q tune_clip reports (χ² p > 0.001) and not at 2 ε_q
    (p < 1e-6): the statistic that sets C is released at the ε that is charged for it. (The mechanism's
    distribution itself, its exp(ε_q·u/2) scale, is checked by hand and on neighbouring datasets in
    tests/test_clip_tuning.py.)"""
    from scipy import stats

    norms = np.random.default_rng(0).lognormal(0, 0.5, 400)
    monkeypatch.setattr(ct, "gradient_norms", lambda *a, **k: norms)
    eps_q = 0.05
    got = [ct.tune_clip(np.zeros((400, 1)), np.zeros(400), n_classes=2, epsilon_q=eps_q, seed=s) for s in range(3000)]
    assert {g["epsilon_quantile"] for g in got} == {eps_q}
    idx = np.searchsorted(ct.CANDIDATES, [g["clip"] for g in got])
    counts = np.bincount(idx, minlength=len(ct.CANDIDATES))

    def p_value(e: float) -> float:
        pr = ct.quantile_probabilities(norms, 0.5, e)
        keep = pr * len(got) >= 5  # cells with enough expected draws; the rest pooled into one
        obs = np.r_[counts[keep], counts[~keep].sum()]
        exp = np.r_[pr[keep], pr[~keep].sum()] * len(got)
        return float(stats.chisquare(obs, exp).pvalue)

    assert p_value(eps_q) > 1e-3
    assert p_value(2 * eps_q) < 1e-6


# ------------------------------------------------------------------ the accountants against dp-accounting

# the study's designs: Law and Adult at the claims profile (m = n, B = 256, 20 epochs), COMPAS (50 epochs), MNIST
DESIGNS = [(1.0, 256 / 20_798, 20), (10.0, 256 / 20_798, 20), (1.0, 256 / 45_222, 20), (10.0, 256 / 45_222, 20),
           (10.0, 256 / 6_172, 50), (10.0, 0.01, 5)]


def _pld_epsilon(sigma: float, q: float, steps: int, delta: float) -> float:
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def _rdp_epsilon(sigma: float, q: float, steps: int, delta: float) -> float:
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant

    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    acc = rdp_privacy_accountant.RdpAccountant()
    acc.compose(event)
    return float(acc.get_epsilon(delta))


@pytest.mark.slow
@pytest.mark.parametrize("target,q,epochs", DESIGNS)
def test_prv_epsilon_agrees_with_dp_accountings_pld_within_one_percent(target, q, epochs):
    """At each study design, σ calibrated by the project (PRV, δ = 1e-5) and its reported ε against Google's
    dp-accounting PLD accountant (an independent implementation; discretisation 1e-3) for the same (σ, q, T).
    Opacus's PRV ε is an upper bound, its estimate plus the error margin handed to it (0.01 at these targets): the
    PLD ε lies below it, and within 0.5% of its estimate (tighter than the 1% asked: measured 0.2% at ε = 1); and
    the PLD ε does not exceed the target. A margin 10 times larger fails here at ε = 1 (and in the composed test)."""
    steps = round(epochs / q)
    sigma = calibrate_sigma(target, sample_rate=q, steps=steps, delta=1e-5, accountant="prv")
    ours = epsilon(sigma, sample_rate=q, steps=steps, delta=1e-5, accountant="prv", target_epsilon=target)
    pld = _pld_epsilon(sigma, q, steps, 1e-5)
    assert pld <= ours, (ours, pld)
    assert abs((ours - 0.01) / pld - 1) < 0.005, (ours, pld)  # measured: 0.2% at ε = 1, 0.002% at ε = 10
    assert pld <= target


def test_composed_histories_agree_with_dp_accounting():
    """A composition of three Poisson-subsampled Gaussian mechanisms (two at one q and different σ, a third at
    another q), PRV against dp-accounting's PLD (PRV's ε less its 0.01 margin) and RDP against its RDP accountant, within 1%."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant

    history = [(1.1, 0.02, 400), (3.0, 0.02, 400), (0.9, 0.005, 300)]
    events = dp_accounting.ComposedDpEvent([dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s)), t) for s, q, t in history])
    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    pld.compose(events)
    rdp = rdp_privacy_accountant.RdpAccountant()
    rdp.compose(events)
    ours_prv = history_epsilon(history, delta=1e-5, accountant="prv")  # upper bound: estimate + 0.01
    ours_rdp = history_epsilon(history, delta=1e-5, accountant="rdp")
    assert pld.get_epsilon(1e-5) <= ours_prv
    assert abs((ours_prv - 0.01) / pld.get_epsilon(1e-5) - 1) < 0.005, (ours_prv, pld.get_epsilon(1e-5))
    assert abs(ours_rdp / rdp.get_epsilon(1e-5) - 1) < 0.01, (ours_rdp, rdp.get_epsilon(1e-5))


@pytest.mark.parametrize("target,q,epochs", DESIGNS[:2])
def test_rdp_epsilon_agrees_with_dp_accountings_rdp(target, q, epochs):
    """The RDP path (the custom audit's and tune_clip's accountant) against dp-accounting's RDP accountant within 1%."""
    steps = round(epochs / q)
    sigma = calibrate_sigma(target, sample_rate=q, steps=steps, delta=1e-5, accountant="rdp")
    ours = epsilon(sigma, sample_rate=q, steps=steps, delta=1e-5, accountant="rdp")
    assert abs(ours / _rdp_epsilon(sigma, q, steps, 1e-5) - 1) < 0.01
