"""DP-SGD-S's rivals: DPSGD-F (Xu et al. 2021), DPSGD-Global-Adapt (Esipova et al. 2023) and AdaClip
(Andrew et al. 2021), in the engine and as Opacus optimizers.

Each rule's bounds (or factors) on a fixed batch with fixed noise against a hand computation of the published
formula; the released counts replayed from each model's own count stream, at σ_b, and the bounds from the release
only; the step noise at σ_g · max over ALL groups of C_k; ε the accountant's at σ_eff; a short deterministic
end-to-end bank; the Opacus optimizers' clipping, noise and accounting. Statistical checks state their seed and
tolerance in standard errors (SE). ``tests/privacy_breakages.py`` breaks each property.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from opacus import GradSampleModule, PrivacyEngine
from opacus.optimizers import AdaClipDPOptimizer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fairdp_core import opacus_compat
from fairdp_core.engine import (
    ALGORITHMS,
    AdaClip,
    DPSGDFClip,
    GlobalAdaptClip,
    PoissonBank,
    TrainSpec,
    combine_sigmas,
    epsilon,
    make_backend,
    model_generators,
    release_key,
    split_sigma,
    stack_params,
    train_bank,
)
from fairdp_core.engine.trainer import _init_module
from fairdp_core.models import build_model
from fairdp_core.opacus_compat import (
    AdaClipOptimizer,
    DPSGDFOptimizer,
    GlobalAdaptOptimizer,
    make_private_adaclip,
    make_private_dpsgd_f,
    make_private_global_adapt,
)

from .conftest import own_settings
from .test_privacy import _rel_err, _weight_noise

RIVALS = ("dpsgd_f", "global_adapt", "adaclip")


# ------------------------------------------------------------------------ the published formulas, by hand

def _reference_dpsgd_f(released: list[float], K: int, c0: float) -> list[float]:
    """A literal transcription of the reference code (layer6ai-labs/fair-dp, trainers/trainer.py,
    DpsgdFTrainer.compute_clipping_bound_per_sample), its noised counts given: m̃ = max(int(m + z), 0), ..."""
    m2k = [max(int(released[k]), 0) for k in range(K)]
    o2k = [max(int(released[K + k]), 0) for k in range(K)]
    array = [1.0 if m2k[k] + o2k[k] == 0 else m2k[k] * 1.0 / (m2k[k] + o2k[k]) for k in range(K)]
    return [c0 * (1 + array[k] / (float(np.mean(array)) + 1e-8)) for k in range(K)]


def test_dpsgd_f_bounds_follow_the_published_formula(monkeypatch):
    """C0 = 0.5, K = 3. A fixed batch: group 0 has norms (0.2, 0.7, 0.9, 0.4), group 1 (0.1, 0.3, 0.6), group 2
    none (a padded slot of group 2 has weight 0). Exact counts m = (2, 1, 0), o = (2, 2, 0); fixed noise
    (+1.7, −0.4, +0.3 | +0.6, +2.2, −0.5) gives m̃ = max(trunc(·), 0) = (3, 0, 0), õ = (2, 4, 0), b̃ = (5, 4, 0), so
    a = (0.6, 0, 1) (a group with b̃ = 0 gets 1), mean 8/15, and C_k = C0·(1 + a_k / (8/15)) =
    (0.5·2.125, 0.5, 0.5·2.875). A literal transcription of the reference code agrees on 200 random releases."""
    rule = DPSGDFClip(1, 3, 1.0, clip=0.5, sigma_b=1.0, generators=[None])
    norms = torch.tensor([[0.2, 0.7, 0.9, 0.4, 0.1, 0.3, 0.6, 5.0]])
    groups = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 2]])
    w = torch.tensor([[1.0, 1, 1, 1, 1, 1, 1, 0]])
    torch.testing.assert_close(rule.counts(norms, groups, w), torch.tensor([[2.0, 1, 0, 2, 2, 0]]))
    noise = [1.7, -0.4, 0.3, 0.6, 2.2, -0.5]
    monkeypatch.setattr(DPSGDFClip, "count_noise", lambda self: torch.tensor([noise]))
    rule.before_step(norms, groups, w)
    torch.testing.assert_close(rule.released, torch.tensor([[3.7, 0.6, 0.3, 2.6, 4.2, -0.5]]))
    a_mean = (0.6 + 0 + 1) / 3
    want = torch.tensor([[0.5 * (1 + 0.6 / a_mean), 0.5, 0.5 * (1 + 1 / a_mean)]])
    torch.testing.assert_close(rule.bounds(), want)
    torch.testing.assert_close(want, torch.tensor([[0.5 * 2.125, 0.5, 0.5 * 2.875]]))
    assert rule.noise_std().item() == pytest.approx(0.5 * 2.875)  # the absent group's bound sets the scale
    rng = np.random.default_rng(0)
    for _ in range(200):
        rel = (rng.integers(0, 12, 6) + rng.normal(0, 3, 6)).tolist()
        got = rule.bounds_from_release(torch.tensor([rel], dtype=torch.float64))[0].tolist()
        assert got == pytest.approx(_reference_dpsgd_f(rel, 3, 0.5), rel=1e-9)


def test_global_adapt_factors_and_z_update_follow_the_published_rule(monkeypatch):
    """The authors' factor: C = 1, Z = 4: norms 0.5, 2, 3.9 (below Z) all get C/Z = 0.25, 8 gets C/8; with Z = 0.5
    < C it is plain clipping at C: 0.2, 0.8 unscaled, 3 gets 1/3. Every scaled norm is ≤ C. Z's update on a fixed
    batch: τ = 1.5, Z = 2 counts the norms above 3 (two of five, one padded slot ignored), fixed noise +1.0, B = 10:
    ã = 3, Z ← 2·exp(3/10 − 0.1) (η = 1, γ = 0.9: the code's exp(−η_Z + ã/B) with η_Z = 0.1)."""
    rule = GlobalAdaptClip(2, 2, 1.0, clip=1.0, z_init=4.0, threshold=1.5, sigma_b=1.0, gamma=0.9, eta=1.0,
                           batch_size=10, generators=[None, None])
    rule.T = torch.tensor([4.0, 0.5])
    norms = torch.tensor([[0.5, 2.0, 3.9, 8.0], [0.2, 0.8, 3.0, 0.0]])
    f = rule.factors(norms, torch.zeros(2, 4, dtype=torch.int64))
    torch.testing.assert_close(f, torch.tensor([[0.25, 0.25, 0.25, 1 / 8], [1.0, 1.0, 1 / 3, 1.0]]), rtol=1e-5,
                               atol=1e-6)
    rng = np.random.default_rng(1)
    many = torch.as_tensor(rng.exponential(3.0, (2, 500)), dtype=torch.float32)
    assert ((rule.factors(many, torch.zeros(2, 500, dtype=torch.int64)) * many) <= 1.0 + 1e-5).all()
    torch.testing.assert_close(rule.bounds(), torch.ones(2, 2))  # the sensitivity: C for every group
    rule.T = torch.tensor([2.0, 2.0])
    norms = torch.tensor([[1.0, 2.9, 3.1, 7.0, 0.2, 9.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    w = torch.tensor([[1.0, 1, 1, 1, 1, 0], [1.0, 1, 0, 0, 0, 0]])
    torch.testing.assert_close(rule.counts(norms, torch.zeros_like(norms, dtype=torch.int64), w),
                               torch.tensor([2.0, 0.0]))
    monkeypatch.setattr(GlobalAdaptClip, "count_noise", lambda self: torch.tensor([1.0, -0.5]))
    rule.update(norms, torch.zeros_like(norms, dtype=torch.int64), w)
    torch.testing.assert_close(rule.Z, torch.tensor([2 * math.exp(0.3 - 0.1), 2 * math.exp(-0.05 - 0.1)]))


def _opacus_adaclip(C: float, *, B: int, gamma=0.5, eta=0.2, c_min=0.01, c_max=100.0) -> AdaClipDPOptimizer:
    gsm = GradSampleModule(build_model("lr", (3,), 2))
    return AdaClipDPOptimizer(torch.optim.SGD(gsm.parameters(), lr=1.0), noise_multiplier=1.0,
                              target_unclipped_quantile=gamma, clipbound_learning_rate=eta, max_clipbound=c_max,
                              min_clipbound=c_min, unclipped_num_std=5.0, max_grad_norm=C, expected_batch_size=B)


def test_adaclip_update_follows_andrew_et_al_and_opacus(monkeypatch):
    """C = 1, B = 10. A fixed batch of 8 (2 padded slots): 6 norms below C, 2 above (1.000001 counts as clipped:
    Opacus's C/(‖g‖ + 1e-6) < 1). The centred count Σ(b_i − ½) = 6·½ − 2·½ = 2; fixed noise +0.5: s̃ = 2.5,
    b̃ = s̃/B + ½ = 0.75, C ← exp(−0.2·(0.75 − 0.5)) = e^(−0.05). The cap and floor clip the update. Opacus's own
    ``update_max_grad_norm``, given the same noised count (its form: Σ b_i + noise = 6.5 over the realised batch, 10
    here so that realised = expected), makes the same update; with a realised batch of 8 it does not (it divides by
    the private batch size), and the engine does not follow it there."""
    rule = AdaClip(1, 2, 1.0, clip=1.0, sigma_b=1.0, gamma=0.5, eta=0.2, c_min=0.01, c_max=100.0, batch_size=10,
                   generators=[None])
    norms = torch.tensor([[0.1, 0.5, 0.9, 0.99, 0.3, 0.2, 1.5, 1.000001, 9.0, 9.0]])
    w = torch.tensor([[1.0, 1, 1, 1, 1, 1, 1, 1, 0, 0]])
    groups = torch.zeros(1, 10, dtype=torch.int64)
    torch.testing.assert_close(rule.counts(norms, groups, w), torch.tensor([2.0]))
    monkeypatch.setattr(AdaClip, "count_noise", lambda self: torch.tensor([0.5]))
    rule.update(norms, groups, w)
    torch.testing.assert_close(rule.bounds(), torch.full((1, 2), math.exp(-0.05)))
    tight = AdaClip(1, 1, 1.0, clip=1.0, sigma_b=1.0, gamma=0.5, eta=0.2, c_min=0.99, c_max=1.001, batch_size=10,
                    generators=[None])
    torch.testing.assert_close(tight.update_from_release(torch.tensor([1.0]), torch.tensor([-5.0])),
                               torch.tensor([1.001]))
    torch.testing.assert_close(tight.update_from_release(torch.tensor([1.0]), torch.tensor([5.0])),
                               torch.tensor([0.99]))
    for C, released, c_min, c_max in [(1.0, 2.5, 0.01, 100.0), (0.3, -4.2, 0.01, 100.0), (2.0, 5.0, 1.9, 3.0)]:
        theirs = _opacus_adaclip(C, B=10, c_min=c_min, c_max=c_max)
        theirs.unclipped_num, theirs.sample_size = torch.tensor(released + 10 / 2), 10  # Σ b_i + noise
        theirs.update_max_grad_norm()
        ours = AdaClip(1, 1, 1.0, clip=C, sigma_b=1.0, gamma=0.5, eta=0.2, c_min=c_min, c_max=c_max, batch_size=10,
                       generators=[None]).update_from_release(torch.tensor([C]), torch.tensor([released]))
        assert float(theirs.max_grad_norm) == pytest.approx(float(ours[0]), rel=1e-6)
    theirs = _opacus_adaclip(1.0, B=10)
    theirs.unclipped_num, theirs.sample_size = torch.tensor(6.5), 8  # realised 8 ≠ B = 10
    theirs.update_max_grad_norm()
    assert float(theirs.max_grad_norm) != pytest.approx(math.exp(-0.05), rel=1e-3)


# ---------------------------------------------------- releases replayed: own stream, σ_b, bounds from them only

def _first_batch(spec: TrainSpec, X, y, g, mem, seed):
    """The bank's first step, rebuilt from the init and sample streams: (norms [M, W], groups [M, W], weights)."""
    gens = model_generators(seed, mem.shape[0])
    mods = [_init_module(build_model(spec.model, X.shape[1:], 2, hidden=spec.hidden), gg["init"]) for gg in gens]
    pools = [torch.as_tensor(np.flatnonzero(r)) for r in mem]
    idx, w = PoissonBank(pools, [spec.batch_size / len(p) for p in pools], [gg["sample"] for gg in gens]).next()
    Xt = torch.as_tensor(X)
    x_sq = (Xt.flatten(1) ** 2).sum(1)[idx]
    norms, _ = make_backend(mods[0]).per_sample(stack_params(mods), Xt[idx], torch.as_tensor(y)[idx], x_sq=x_sq)
    return norms, torch.as_tensor(g)[idx], w


@pytest.mark.parametrize("algorithm", RIVALS)
def test_counts_are_noised_at_sigma_b_from_each_models_stream_and_the_bounds_use_only_the_release(algorithm):
    """One step, 2 models on different pools, K = 3 groups. The released counts equal the exact counts of the
    model's Poisson batch (replayed from its init and sample streams) plus σ_b times the next draws of THAT model's
    count stream (replayed from the seed and the release key); the state after the step is the rule applied to
    that release, and differs from the rule applied to the exact counts."""
    rng = np.random.default_rng(3)
    n, d, B, K, seed = 300, 5, 60, 3, 7
    X = rng.normal(size=(n, d)).astype(np.float32)
    y, g = rng.integers(0, 2, n), rng.integers(0, K, n)
    mem = np.ones((2, n), bool)
    mem[1, :50] = False
    common = dict(model="lr", epochs=B / mem.sum(1).mean(), batch_size=B, lr=0.3, noise_multiplier=1.0, sigma_b=4.0)
    spec = {"dpsgd_f": TrainSpec(algorithm="dpsgd_f", clip=1.0, **common),
            "global_adapt": TrainSpec(algorithm="global_adapt", clip=0.5, q_init=1.0, tau=1.0, gamma=0.9, eta_q=1.0,
                                      **common),
            "adaclip": TrainSpec(algorithm="adaclip", clip=1.0, gamma=0.5, eta_q=0.2, **common)}[algorithm]
    bank = train_bank(X, y, g, mem, spec, n_classes=2, n_groups=K, seed=seed, progress=False)
    assert bank.steps == 1
    a = bank.accounting[0]
    norms, groups, w = _first_batch(spec, X, y, g, mem, seed)
    gens = model_generators(seed, 2, release=release_key(spec))
    width = 2 * K if algorithm == "dpsgd_f" else 1
    noise = torch.stack([torch.randn(width, generator=gg["count"]) for gg in gens]) * 4.0
    cls = {"dpsgd_f": DPSGDFClip, "global_adapt": GlobalAdaptClip, "adaclip": AdaClip}[algorithm]
    kw = {"dpsgd_f": dict(clip=1.0, sigma_b=4.0),
          "global_adapt": dict(clip=0.5, z_init=1.0, threshold=1.0, sigma_b=4.0, gamma=0.9, eta=1.0, batch_size=B),
          "adaclip": dict(clip=1.0, sigma_b=4.0, gamma=0.5, eta=0.2, c_min=spec.c_min, c_max=spec.q_max,
                          batch_size=B)}[algorithm]
    rule = cls(2, K, a.sigma_g, generators=[None, None], **kw)
    exact = rule.counts(norms, groups, w)
    released = bank.policy_state["released_counts"]
    torch.testing.assert_close(released, exact + noise.reshape(exact.shape))
    if algorithm == "dpsgd_f":
        assert torch.equal(exact.sum(1), w.sum(1))  # each sample in exactly one cell
        assert (exact[:, :K].sum(1) > 0).all() and (exact[:, K:].sum(1) > 0).all()
        after, from_exact = rule.bounds_from_release(released), rule.bounds_from_release(exact)
        state = bank.policy_state["bounds"]
    else:
        start = rule.T.clone()
        after, from_exact = rule.update_from_release(start, released), rule.update_from_release(start, exact)
        state = bank.policy_state["upper_bounds"] if algorithm == "global_adapt" else bank.policy_state["bounds"][:, 0]
        assert (exact != 0).all()
    torch.testing.assert_close(state, after)
    assert not torch.allclose(after, from_exact, rtol=1e-4, atol=0)


# ------------------------------------------------------------------ gradient noise: σ_g · max over ALL groups

@pytest.mark.parametrize("algorithm", RIVALS)
def test_step_noise_is_sigma_g_times_the_max_bound_over_all_groups(algorithm):
    """Seed 0, one step on all-zero inputs (the weight update is the noise alone), 50,000 coordinates per model
    (SE of the std 0.32%), every record in group 0 of K = 3: the noise has std σ_g · max over ALL groups of C_k
    within 2% (6 SE). DPSGD-F, C0 = 5 (every norm below it: a_0 = 0) and σ_b = 0.3 (the absent groups' noised
    counts truncate to 0: a_1 = a_2 = 1): the bounds are C0·(1, 2.5, 2.5) and the absent groups' 12.5 sets the scale
    (the present group's 5 would be the bug). Global-Adapt: σ_g·C whatever Z. AdaClip: σ_g·C with σ_g =
    (σ_eff⁻² − (2σ_b)⁻²)^(-1/2) (the bound before the step's update)."""
    group = np.zeros(300, np.int64)
    if algorithm == "dpsgd_f":
        spec = TrainSpec(algorithm="dpsgd_f", epochs=0.1, batch_size=30, lr=0.5, clip=5.0, noise_multiplier=0.2,
                         sigma_b=0.3)
    elif algorithm == "global_adapt":
        spec = TrainSpec(algorithm="global_adapt", epochs=0.1, batch_size=30, lr=0.5, clip=0.7, q_init=50.0,
                         noise_multiplier=1.3, sigma_b=6.0)
    else:
        spec = TrainSpec(algorithm="adaclip", epochs=0.1, batch_size=30, lr=0.5, clip=0.7, noise_multiplier=1.3,
                         sigma_b=6.0)
    noise, bank = _weight_noise(spec, group, n_groups=3)
    a = bank.accounting[0]
    if algorithm == "dpsgd_f":
        bounds = bank.policy_state["bounds"]
        torch.testing.assert_close(bounds, torch.tensor([[5.0, 12.5, 12.5]] * 2))
        scale = bounds.amax(1)
        assert a.sigma_g == pytest.approx(split_sigma(0.2, 0.3))
    else:
        scale = torch.full((2,), 0.7)
        mult = 12.0 if algorithm == "adaclip" else 6.0
        assert a.sigma_g == pytest.approx(split_sigma(1.3, mult))
    for m in range(2):
        assert _rel_err(noise[m], a.sigma_g * float(scale[m])) < 0.02, (noise[m].std(), a.sigma_g * float(scale[m]))
    assert abs(np.corrcoef(noise[0].numpy(), noise[1].numpy())[0, 1]) < 5 / math.sqrt(noise.shape[1])


# ------------------------------------------------------------------------------------------------- accounting

@pytest.mark.parametrize("algorithm", RIVALS)
def test_reported_epsilon_is_the_accountants_at_sigma_eff(algorithm):
    """Target ε = 2, membership rows of 1,000 / 700 records: σ_eff is calibrated at the larger q, the split
    composes back to it (counts' multiplier σ_b; AdaClip's centred count 2σ_b), every model's reported ε is the
    accountant's for (σ_eff, q_m, T, δ), none above the target, the larger not needlessly below it."""
    rng = np.random.default_rng(5)
    n = 1000
    X = rng.normal(size=(n, 3)).astype(np.float32)
    y, g = rng.integers(0, 2, n), rng.integers(0, 2, n)
    mem = np.zeros((2, n), bool)
    mem[0], mem[1, :700] = True, True
    spec = TrainSpec(algorithm=algorithm, epochs=1, batch_size=50, target_epsilon=2.0,
                     **own_settings(algorithm, sigma_b=20.0, q_init=5.0))
    bank = train_bank(X, y, g, mem, spec, n_classes=2, n_groups=2, seed=0, progress=False)
    for m, a in enumerate(bank.accounting):
        mult = 2 * a.sigma_b if algorithm == "adaclip" else a.sigma_b
        assert a.sigma_b == 20.0 and combine_sigmas(a.sigma_g, mult) == pytest.approx(a.sigma_eff, rel=1e-12)
        assert a.sigma_g > a.sigma_eff and a.guaranteed and a.algorithm == algorithm
        assert a.sample_rate == pytest.approx(50 / mem[m].sum())
        assert a.epsilon == pytest.approx(epsilon(a.sigma_eff, sample_rate=a.sample_rate, steps=a.steps,
                                                  delta=a.delta), rel=1e-12)
        assert a.epsilon <= 2.0
    assert max(a.epsilon for a in bank.accounting) > 0.97 * 2.0
    assert any("σ_b" in s for s in bank.accounting[0].public_assumptions)


# ------------------------------------------------------------------------------------------ end to end

def _blobs(n=600, seed=0):
    rng = np.random.default_rng(seed)
    g = (rng.random(n) < 0.3).astype(np.int64)
    X = (rng.normal(size=(n, 6)) * np.where(g == 1, 3.0, 1.0)[:, None]).astype(np.float32)
    y = (X[:, 0] + 0.5 * rng.normal(size=n) > 0).astype(np.int64)
    return X, y, g


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", RIVALS)
def test_a_short_bank_trains_and_is_deterministic_under_its_seed(algorithm):
    """600 records, MLP, 3 epochs at ε = 3, 2 models: the same seed gives bit-identical parameters and policy state,
    another seed other ones; the models learn (accuracy > 0.75 on the training data, chance 0.5); state finite."""
    X, y, g = _blobs()
    spec = TrainSpec(algorithm=algorithm, model="mlp", hidden=16, epochs=3, batch_size=60, lr=0.5, clip=0.5,
                     target_epsilon=3.0, **own_settings(algorithm, sigma_b=10.0, q_init=5.0))
    mem = np.ones((2, len(y)), bool)
    a, b, c = (train_bank(X, y, g, mem, spec, n_classes=2, n_groups=2, seed=s, progress=False) for s in (1, 1, 2))
    assert all(torch.equal(a.params[k], b.params[k]) for k in a.params)
    assert all(torch.equal(a.policy_state[k], b.policy_state[k]) for k in a.policy_state)
    assert not all(torch.equal(a.params[k], c.params[k]) for k in a.params)
    assert all(torch.isfinite(v).all() for v in a.policy_state.values())
    assert (a.accuracy(X, y) > 0.75).all(), a.accuracy(X, y)


# --------------------------------------------------------------------------------------- Opacus optimizers

def _loader(n=500, d=6, B=50, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    g = (rng.random(n) < 0.3).astype(np.int64)
    y = ((X[:, 0] + g) > 0.3).astype(np.int64)
    ds = TensorDataset(torch.as_tensor(X), torch.as_tensor(y), torch.as_tensor(g))
    return DataLoader(ds, batch_size=B, generator=torch.Generator().manual_seed(seed)), X, y


@pytest.mark.parametrize("rule", RIVALS)
def test_make_private_trains_and_charges_sigma_eff_as_the_engine(rule):
    """Each make_private_<rule> on a tiny MLP, 2 epochs of Poisson batches (q = 1/10): the accountant's history is
    σ_eff at the loader's q for every step, and its ε equals the engine's accountant for (σ_eff, q, steps, δ)."""
    loader, X, y = _loader()
    torch.manual_seed(0)
    model = build_model("mlp", (6,), 2, hidden=8)
    engine = PrivacyEngine(accountant="rdp")
    sigma_eff = 1.1
    common = dict(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5), data_loader=loader,
                  noise_multiplier=sigma_eff, generator=torch.Generator().manual_seed(1))
    if rule == "dpsgd_f":
        model, opt, loader = make_private_dpsgd_f(engine, sigma_b=10.0, n_groups=2, clip=0.5, **common)
    elif rule == "global_adapt":
        model, opt, loader = make_private_global_adapt(engine, sigma_b=10.0, clip=0.5, z_init=5.0, **common)
    else:
        model, opt, loader = make_private_adaclip(engine, sigma_b=5.0, clip=0.5, **common)
    steps = 0
    for _ in range(2):
        for xb, yb, gb in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            if rule == "dpsgd_f":
                opt.set_groups(gb)
            opt.step()
            steps += 1
    q = loader.sample_rate
    assert all(h[0] == pytest.approx(sigma_eff) and h[1] == pytest.approx(q) for h in engine.accountant.history)
    assert sum(h[2] for h in engine.accountant.history) == steps
    assert engine.get_epsilon(1e-5) == pytest.approx(epsilon(sigma_eff, sample_rate=q, steps=steps, delta=1e-5))
    state = {"dpsgd_f": lambda: opt.bounds, "global_adapt": lambda: opt.Z,
             "adaclip": lambda: torch.tensor(opt.max_grad_norm)}[rule]()
    assert torch.isfinite(state).all()
    if rule == "adaclip":
        assert isinstance(opt, AdaClipDPOptimizer)  # Opacus's own optimizer, its update from the engine's rule
        assert opt.max_grad_norm != 0.5


def _gsm_batch(d=5, n=20, seed=2):
    torch.manual_seed(seed)
    mod = build_model("lr", (d,), 2)
    x, y = torch.randn(n, d) * 3, torch.randint(0, 2, (n,))
    return mod, x, y, torch.randint(0, 2, (n,))


def _grads(gsm):
    return {k.removeprefix("_module."): p.grad.detach().clone() for k, p in gsm.named_parameters()}


def test_dpsgd_f_optimizer_clips_like_the_engine_and_refuses_virtual_steps():
    """Noise off (σ_g = 0) and the counts' noise tiny (σ_b = 1e-4): the optimizer's bounds are the engine rule's
    on the exact counts of its batch, and its clipped gradient is the engine's clipped sum at those bounds
    (autograd-free comparison through the engine's backend). A skipped (virtual) step is refused."""
    import copy

    mod, x, y, grp = _gsm_batch()
    gsm = GradSampleModule(copy.deepcopy(mod))
    opt = DPSGDFOptimizer(torch.optim.SGD(gsm.parameters(), lr=1.0), noise_multiplier=1e-5, sigma_b=1e-4,
                          n_groups=2, expected_batch_size=20, clip=1.0)
    opt.grad_noise_multiplier = 0.0
    nn.functional.cross_entropy(gsm(x), y).backward()
    opt.set_groups(grp)
    opt.pre_step()
    be = make_backend(mod)
    norms, ctx = be.per_sample(stack_params([mod]), x[None], y[None])
    rule = DPSGDFClip(1, 2, 0.0, clip=1.0, sigma_b=1.0, generators=[None])
    exact = rule.counts(norms, grp[None], torch.ones(1, 20))
    assert (exact[0, :2] > 0).any() and (exact[0, 2:] > 0).any()
    torch.testing.assert_close(opt.released, exact[0], atol=1e-3, rtol=0)
    bounds = rule.bounds_from_release(exact)
    torch.testing.assert_close(opt.bounds, bounds[0])
    want = be.clipped_sum(ctx, rule.factors(norms, grp[None], bounds))
    for k, v in _grads(gsm).items():
        torch.testing.assert_close(v, want[k][0] / 20, atol=1e-6, rtol=1e-4)
    opt.zero_grad()
    opt.signal_skip_step(True)
    nn.functional.cross_entropy(gsm(x), y).backward()
    opt.set_groups(grp)
    with pytest.raises(RuntimeError, match="virtual steps"):
        opt.pre_step()


def test_dpsgd_f_optimizer_noise_is_sigma_g_times_the_max_bound_over_all_groups():
    """Seed 0, 50,000 weight coordinates on all-zero inputs (weight gradients exactly 0), a batch of group 0 only
    (K = 3), C0 = 5 above every norm, σ_b = 0.3: bounds C0·(1, 2.5, 2.5); the weight gradient's std is σ_g · 12.5
    (the absent groups' bound) within 2% (6 SE)."""
    d = 25_000
    torch.manual_seed(0)
    gsm = GradSampleModule(build_model("lr", (d,), 2))
    opt = DPSGDFOptimizer(torch.optim.SGD(gsm.parameters(), lr=1.0), noise_multiplier=0.2, sigma_b=0.3, n_groups=3,
                          expected_batch_size=10, clip=5.0, loss_reduction="sum",
                          generator=torch.Generator().manual_seed(0))
    nn.functional.cross_entropy(gsm(torch.zeros(5, d)), torch.zeros(5, dtype=torch.int64), reduction="sum").backward()
    opt.set_groups(torch.zeros(5, dtype=torch.int64))
    opt.pre_step()
    torch.testing.assert_close(opt.bounds, torch.tensor([5.0, 12.5, 12.5]))
    assert _rel_err(_grads(gsm)["fc.weight"].flatten(), split_sigma(0.2, 0.3) * 12.5) < 0.02


@pytest.mark.parametrize("rule", ["dpsgd_f", "global_adapt"])
def test_opacus_rival_optimizers_release_their_counts_plus_noise_at_sigma_b(rule, monkeypatch):
    """One step, σ_b = 4: the released counts are the exact counts of the batch (the engine rule's, on the engine's
    norms) plus the draw of Opacus's ``_generate_noise`` at std σ_b with the optimizer's secure_mode (recorded), a
    nonzero draw; the bounds (DPSGD-F) or the new Z (Global-Adapt) come from that release."""
    import copy

    calls = []
    original = getattr(opacus_compat, rule)._generate_noise

    def recording(*, std, reference, generator, secure_mode):
        out = original(std=std, reference=reference, generator=generator, secure_mode=secure_mode)
        calls.append((std, secure_mode, out.clone()))
        return out

    monkeypatch.setattr(getattr(opacus_compat, rule), "_generate_noise", recording)
    mod, x, y, grp = _gsm_batch()
    gsm = GradSampleModule(copy.deepcopy(mod))
    common = dict(noise_multiplier=1.0, sigma_b=4.0, expected_batch_size=20, clip=1.0,
                  generator=torch.Generator().manual_seed(3))
    sgd = torch.optim.SGD(gsm.parameters(), lr=1.0)
    opt = DPSGDFOptimizer(sgd, n_groups=2, **common) if rule == "dpsgd_f" else \
        GlobalAdaptOptimizer(sgd, z_init=2.0, **common)
    nn.functional.cross_entropy(gsm(x), y).backward()
    if rule == "dpsgd_f":
        opt.set_groups(grp)
    opt.pre_step()
    norms, _ = make_backend(mod).per_sample(stack_params([mod]), x[None], y[None])
    assert len(calls) == 1 and calls[0][0] == 4.0 and calls[0][1] is False
    noise = calls[0][2]
    assert (noise != 0).all()
    if rule == "dpsgd_f":
        rule_ = DPSGDFClip(1, 2, 0.0, clip=1.0, sigma_b=4.0, generators=[None])
        exact = rule_.counts(norms, grp[None], torch.ones(1, 20))[0]
        torch.testing.assert_close(opt.released, exact + noise)
        torch.testing.assert_close(opt.bounds, rule_.bounds_from_release(opt.released[None])[0])
    else:
        rule_ = GlobalAdaptClip(1, 1, 0.0, clip=1.0, z_init=2.0, threshold=1.0, sigma_b=4.0, gamma=0.9, eta=1.0,
                                batch_size=20, generators=[None])
        exact = rule_.counts(norms, torch.zeros(1, 20, dtype=torch.int64), torch.ones(1, 20))[0]
        torch.testing.assert_close(opt.released, exact + noise)
        torch.testing.assert_close(opt.Z.reshape(1), rule_.update_from_release(torch.tensor([2.0]),
                                                                                opt.released.reshape(1)))


def test_global_adapt_optimizer_scales_like_the_engine_and_counts_over_virtual_steps(monkeypatch):
    """Noise off: C = 1, Z = 2, the optimizer's gradient is the engine's sum with GlobalAdaptClip.factors (some
    norms below Z, some above). Two physical batches of one logical step: the count released once covers both
    (σ_b = 1e-3, so released ≈ exact within 0.01), drawn by Opacus's _generate_noise with secure_mode as set; then
    Z moves by the engine's rule from that release."""
    import copy

    mod, x, y, _ = _gsm_batch()
    gsm = GradSampleModule(copy.deepcopy(mod))
    opt = GlobalAdaptOptimizer(torch.optim.SGD(gsm.parameters(), lr=1.0), noise_multiplier=1e-4, sigma_b=1e-3,
                               expected_batch_size=40, clip=1.0, z_init=2.0)
    opt.grad_noise_multiplier = 0.0
    calls = []
    original = opacus_compat.global_adapt._generate_noise

    def recording(*, std, reference, generator, secure_mode):
        calls.append((std, secure_mode))
        return original(std=std, reference=reference, generator=generator, secure_mode=secure_mode)

    monkeypatch.setattr(opacus_compat.global_adapt, "_generate_noise", recording)
    be = make_backend(mod)
    norms, ctx = be.per_sample(stack_params([mod]), x[None], y[None])
    assert (norms < 2).any() and (norms > 2).any()
    rule = GlobalAdaptClip(1, 1, 0.0, clip=1.0, z_init=2.0, threshold=1.0, sigma_b=1.0, gamma=0.9, eta=1.0,
                           batch_size=40, generators=[None])
    zeros = torch.zeros(1, 20, dtype=torch.int64)
    want = be.clipped_sum(ctx, rule.factors(norms, zeros))
    opt.signal_skip_step(True)
    nn.functional.cross_entropy(gsm(x), y).backward()
    opt.pre_step()
    opt.zero_grad()
    assert opt.released == 0 and calls == []  # nothing released on a skipped (virtual) step
    nn.functional.cross_entropy(gsm(x), y).backward()
    opt.pre_step()
    for k, v in _grads(gsm).items():
        torch.testing.assert_close(v, 2 * want[k][0] / 40, atol=1e-6, rtol=1e-4)
    exact = 2 * rule.counts(norms, zeros, torch.ones(1, 20))[0]
    assert abs(float(opt.released) - float(exact)) < 0.01 and (1e-3, False) in calls
    torch.testing.assert_close(opt.Z.reshape(1), rule.update_from_release(torch.tensor([2.0]), opt.released.reshape(1)))


def test_adaclip_optimizer_is_opacus_with_the_engines_update(monkeypatch):
    """Our AdaClipOptimizer on a batch of 20 with expected batch size 20 and the stock AdaClipDPOptimizer (same
    seed, same generator) take the same step and the same new bound; the count noise, recorded, plus the engine's
    exact centred count, gives the engine rule's new bound. With expected batch size 25 (realised 20) the stock
    optimizer divides by 20, ours by the public 25 as the engine. Two physical batches of one logical step: our
    counts cover both (Opacus's zero_grad would keep the last one's only)."""
    import copy

    import opacus.optimizers.adaclipoptimizer as ada

    recorded = []
    original = ada._generate_noise

    def recording(*, std, reference, generator, secure_mode=False):
        out = original(std=std, reference=reference, generator=generator, secure_mode=secure_mode)
        if reference.dim() == 0:
            recorded.append(float(out))
        return out

    monkeypatch.setattr(ada, "_generate_noise", recording)
    mod, x, y, _ = _gsm_batch()
    kw = dict(noise_multiplier=1.0, target_unclipped_quantile=0.5, clipbound_learning_rate=0.2, max_clipbound=100.0,
              min_clipbound=0.01, unclipped_num_std=3.0, max_grad_norm=1.5)
    out = {}
    for name, cls, B in [("ours", AdaClipOptimizer, 20), ("opacus", AdaClipDPOptimizer, 20),
                         ("ours25", AdaClipOptimizer, 25), ("opacus25", AdaClipDPOptimizer, 25)]:
        gsm = GradSampleModule(copy.deepcopy(mod))
        opt = cls(torch.optim.SGD(gsm.parameters(), lr=1.0), expected_batch_size=B,
                  generator=torch.Generator().manual_seed(4), **kw)
        nn.functional.cross_entropy(gsm(x), y).backward()
        opt.pre_step()
        out[name] = (float(opt.max_grad_norm), _grads(gsm), recorded[-1])
    assert out["ours"][0] == pytest.approx(out["opacus"][0], rel=1e-6)
    assert all(torch.equal(out["ours"][1][k], out["opacus"][1][k]) for k in out["ours"][1])
    norms, _ = make_backend(mod).per_sample(stack_params([mod]), x[None], y[None])
    for name, B in [("ours", 20), ("ours25", 25)]:
        rule = AdaClip(1, 1, 0.0, clip=1.5, sigma_b=3.0, gamma=0.5, eta=0.2, c_min=0.01, c_max=100.0, batch_size=B,
                       generators=[None])
        exact = rule.counts(norms, torch.zeros(1, 20, dtype=torch.int64), torch.ones(1, 20))
        assert 0 < float(exact[0]) + 10 < 20  # some clipped, some not
        new = rule.update_from_release(torch.tensor([1.5]), exact + out[name][2])
        assert out[name][0] == pytest.approx(float(new[0]), rel=1e-5)
    assert out["opacus25"][0] != pytest.approx(out["ours25"][0], rel=1e-4)
    # virtual steps: the counts of both physical batches reach the release
    gsm = GradSampleModule(copy.deepcopy(mod))
    opt = AdaClipOptimizer(torch.optim.SGD(gsm.parameters(), lr=1.0), expected_batch_size=40, **kw)
    opt.signal_skip_step(True)
    nn.functional.cross_entropy(gsm(x), y).backward()
    opt.pre_step()
    opt.zero_grad()
    nn.functional.cross_entropy(gsm(x), y).backward()
    opt.pre_step()
    assert opt.sample_size == 40
    exact = 2 * float(AdaClip(1, 1, 0.0, clip=1.5, sigma_b=3.0, gamma=0.5, eta=0.2, c_min=0.01, c_max=100.0,
                              batch_size=40, generators=[None]).counts(norms, torch.zeros(1, 20, dtype=torch.int64),
                                                                         torch.ones(1, 20))[0])
    assert float(opt.released) == pytest.approx(exact + recorded[-1], abs=1e-4)


def _recording_noise(monkeypatch, module) -> list[float]:
    """Record every scalar draw (a count's noise) of ``module._generate_noise``, in order; the draws are unchanged."""
    recorded = []
    original = module._generate_noise

    def recording(*, std, reference, generator, secure_mode=False):
        out = original(std=std, reference=reference, generator=generator, secure_mode=secure_mode)
        if reference.dim() == 0:
            recorded.append(float(out))
        return out

    monkeypatch.setattr(module, "_generate_noise", recording)
    return recorded


def test_global_adapt_optimizer_moves_z_by_the_public_expected_batch_size(monkeypatch):
    """A realised batch of 20 with expected batch size B = 40 (as AdaClip's B = 25 case): the released count is the
    exact count plus the recorded draw of Opacus's ``_generate_noise`` (generator seed 5, σ_b = 4), and Z moves by
    the engine's rule with the public B = 40 applied to that release, not with the realised 20 (a private
    quantity: the reference code's division, which gives another Z here)."""
    import copy

    recorded = _recording_noise(monkeypatch, opacus_compat.global_adapt)
    mod, x, y, _ = _gsm_batch()
    gsm = GradSampleModule(copy.deepcopy(mod))
    opt = GlobalAdaptOptimizer(torch.optim.SGD(gsm.parameters(), lr=1.0), noise_multiplier=1.0, sigma_b=4.0,
                               expected_batch_size=40, clip=1.0, z_init=2.0, generator=torch.Generator().manual_seed(5))
    nn.functional.cross_entropy(gsm(x), y).backward()
    opt.pre_step()
    norms, _ = make_backend(mod).per_sample(stack_params([mod]), x[None], y[None])
    zeros = torch.zeros(1, 20, dtype=torch.int64)
    rule = {B: GlobalAdaptClip(1, 1, 0.0, clip=1.0, z_init=2.0, threshold=1.0, sigma_b=4.0, gamma=0.9, eta=1.0,
                               batch_size=B, generators=[None]) for B in (40, 20)}
    exact = rule[40].counts(norms, zeros, torch.ones(1, 20))[0]
    assert len(recorded) == 1 and recorded[0] != 0 and 0 < float(exact) < 20
    torch.testing.assert_close(opt.released, exact + recorded[0])
    want = rule[40].update_from_release(torch.tensor([2.0]), opt.released.reshape(1))
    realised = rule[20].update_from_release(torch.tensor([2.0]), opt.released.reshape(1))
    torch.testing.assert_close(opt.Z.reshape(1), want)
    assert float(want[0]) != pytest.approx(float(realised[0]), rel=1e-3)  # the test tells the two apart


@pytest.mark.parametrize("rule", ["global_adapt", "adaclip"])
def test_opacus_rival_optimizers_release_each_logical_steps_own_count(rule, monkeypatch):
    """Two logical steps (pre_step, zero_grad, pre_step) on two different batches of 20 (B = 20), generator seed 6:
    each release is THAT step's exact count (the engine rule's, at the bound the step used) plus its own recorded
    draw of Opacus's ``_generate_noise``; the second is not the sum over both steps (the first step's count is
    nonzero, so a count kept across real steps would show). The bound after each step is the engine rule applied
    to that step's release."""
    import copy

    import opacus.optimizers.adaclipoptimizer as ada

    recorded = _recording_noise(monkeypatch, opacus_compat.global_adapt if rule == "global_adapt" else ada)
    mod, x, y, _ = _gsm_batch()
    g2 = torch.Generator().manual_seed(9)
    x2, y2 = torch.randn(20, 5, generator=g2) * 3, torch.randint(0, 2, (20,), generator=g2)
    gsm = GradSampleModule(copy.deepcopy(mod))
    sgd, gen = torch.optim.SGD(gsm.parameters(), lr=1.0), torch.Generator().manual_seed(6)
    zeros, ones = torch.zeros(1, 20, dtype=torch.int64), torch.ones(1, 20)
    if rule == "global_adapt":
        opt = GlobalAdaptOptimizer(sgd, noise_multiplier=1.0, sigma_b=4.0, expected_batch_size=20, clip=1.0,
                                   z_init=2.0, generator=gen)
        engine = GlobalAdaptClip(1, 1, 0.0, clip=1.0, z_init=2.0, threshold=1.0, sigma_b=4.0, gamma=0.9, eta=1.0,
                                 batch_size=20, generators=[None])
        bound = lambda: opt.Z.reshape(1)  # noqa: E731
    else:
        opt = AdaClipOptimizer(sgd, noise_multiplier=1.0, target_unclipped_quantile=0.5, clipbound_learning_rate=0.2,
                               max_clipbound=100.0, min_clipbound=0.01, unclipped_num_std=3.0, max_grad_norm=1.5,
                               expected_batch_size=20, generator=gen)
        engine = AdaClip(1, 1, 0.0, clip=1.5, sigma_b=3.0, gamma=0.5, eta=0.2, c_min=0.01, c_max=100.0,
                         batch_size=20, generators=[None])
        bound = lambda: torch.tensor([float(opt.max_grad_norm)])  # noqa: E731
    exacts = []
    for step, (xb, yb) in enumerate([(x, y), (x2, y2)]):
        opt.zero_grad()
        before = bound()
        nn.functional.cross_entropy(gsm(xb), yb).backward()
        opt.pre_step()
        engine.T = before.clone()  # the bound this step clipped and counted with
        norms, _ = make_backend(mod).per_sample(stack_params([mod]), xb[None], yb[None])
        exact = engine.counts(norms, zeros, ones)[0]
        exacts.append(float(exact))
        assert len(recorded) == step + 1 and recorded[-1] != 0
        assert float(opt.released) == pytest.approx(float(exact) + recorded[-1], abs=1e-4)
        torch.testing.assert_close(bound(), engine.update_from_release(before, opt.released.reshape(1)))
    assert exacts[0] != 0  # a count kept across the steps would add it to the second release
    assert float(opt.released) != pytest.approx(sum(exacts) + recorded[-1], abs=1e-2)


# --------------------------------------------------------------------------------------- config, plan, reports

def test_plans_carry_the_rivals_published_defaults():
    """A grid with the three rivals on Adult LR (and an algorithm's own clip override for AdaClip): each plan's
    TrainSpec builds, with C (C0, AdaClip's initial C) = train.clip or its override and each rule's published
    defaults (DPSGD-F σ_b = 10; Global-Adapt Z = 100, τ = 1, γ = 0.9, η = 1, σ_b = 10; AdaClip γ = 0.5, η = 0.2,
    σ_b None (B/20), C in [0.01, 100]). DP-SGD-S's γ override does not reach them."""
    from fairdp_core.config import GridEntry, Params, expand_runs, expected_designs
    from fairdp_core.stages.plan import train_plan

    raw = {"seed": 0, "data": {"datasets": {"adult": {}}},
           "train": {"clip": 0.8, "overrides": {"adult-lr": {"lr": 0.5, "gamma": 0.6},
                                                "adult-lr-adaclip": {"clip": 0.3}}},
           "grid": [{"dataset": "adult", "model": "lr", "algorithms": list(RIVALS), "epsilons": [1.0], "seeds": 1}]}
    runs = expand_runs([GridEntry(**raw["grid"][0])], None)
    params = Params.model_validate({**raw, "runs": runs, "designs": expected_designs(runs)})
    specs = {r["algorithm"]: TrainSpec(**train_plan(params, name)["spec"]) for name, r in runs.items()}
    assert set(specs) == set(RIVALS) and all(s.target_epsilon == 1.0 and s.lr == 0.5 for s in specs.values())
    assert specs["dpsgd_f"].clip == specs["global_adapt"].clip == 0.8 and specs["adaclip"].clip == 0.3
    assert specs["dpsgd_f"].sigma_b == 10.0
    ga = specs["global_adapt"]
    assert (ga.q_init, ga.tau, ga.gamma, ga.eta_q, ga.sigma_b) == (100.0, 1.0, 0.9, 1.0, 10.0)
    ac = specs["adaclip"]
    assert (ac.gamma, ac.eta_q, ac.sigma_b, ac.c_min, ac.q_max) == (0.5, 0.2, None, 0.01, 100.0)


def test_every_algorithm_has_a_label_and_a_colour():
    from fairdp_core.reporting import plots, results

    assert set(results.ALGORITHM_LABELS) == set(ALGORITHMS)
    assert all(results.ALGORITHM_LABELS[a] in plots.ALGORITHM_COLORS for a in ALGORITHMS)
    assert len(set(plots.ALGORITHM_COLORS.values())) == len(plots.ALGORITHM_COLORS)


# --------------------------------------------------------------------------------------------------- CUDA

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: bash tests/gpu_check.sh on a GPU machine")


@CUDA
@pytest.mark.parametrize("algorithm", RIVALS)
def test_cuda_rival_training_runs_and_accounts_like_cpu(algorithm):
    X, y, g = _blobs(400)
    spec = TrainSpec(algorithm=algorithm, epochs=2, batch_size=40, target_epsilon=3.0,
                     **own_settings(algorithm, sigma_b=8.0, q_init=5.0))
    gpu = train_bank(X, y, g, np.ones((3, 400), bool), spec, n_classes=2, n_groups=2, seed=0, device="cuda",
                     progress=False)
    cpu = train_bank(X, y, g, np.ones((3, 400), bool), spec, n_classes=2, n_groups=2, seed=0, progress=False)
    assert all(torch.isfinite(v).all() for v in gpu.params.values())
    assert all(torch.isfinite(v).all() for v in gpu.policy_state.values())
    assert [a.epsilon for a in gpu.accounting] == [a.epsilon for a in cpu.accounting]


@CUDA
@pytest.mark.parametrize("rule", RIVALS)
def test_cuda_rival_opacus_optimizer_step(rule):
    gsm = GradSampleModule(build_model("lr", (3,), 2).cuda())
    common = dict(noise_multiplier=1.0, expected_batch_size=4, generator=torch.Generator(device="cuda").manual_seed(0))
    if rule == "dpsgd_f":
        opt = DPSGDFOptimizer(torch.optim.SGD(gsm.parameters(), lr=1.0), sigma_b=5.0, n_groups=2, **common)
    elif rule == "global_adapt":
        opt = GlobalAdaptOptimizer(torch.optim.SGD(gsm.parameters(), lr=1.0), sigma_b=5.0, **common)
    else:
        opt = AdaClipOptimizer(torch.optim.SGD(gsm.parameters(), lr=1.0), unclipped_num_std=5.0, max_grad_norm=1.0,
                               target_unclipped_quantile=0.5, clipbound_learning_rate=0.2, max_clipbound=10.0,
                               min_clipbound=0.01, **common)
    nn.functional.cross_entropy(gsm(torch.randn(4, 3, device="cuda")),
                                torch.zeros(4, dtype=torch.int64, device="cuda")).backward()
    if rule == "dpsgd_f":
        opt.set_groups(torch.tensor([0, 1, 0, 1]))
    opt.step()
    assert all(torch.isfinite(p).all() for p in gsm.parameters())
