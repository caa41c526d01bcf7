"""The batched engine against independent references: autograd loops, plain SGD, Opacus, the accountant."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from fairdp_core.engine import (
    FixedClip,
    FuncBackend,
    GroupQuantileClip,
    PoissonBank,
    TrainSpec,
    bernoulli_positions,
    calibrate_sigma,
    clip_factors,
    combine_sigmas,
    epsilon,
    make_backend,
    model_generators,
    split_sigma,
    stack_params,
    train_bank,
)
from fairdp_core.engine.backends import LayerBackend
from fairdp_core.engine.trainer import _init_module, _NoiseBank
from fairdp_core.models import build_model


def _modules(name, shape, C, M, seed=0):
    return [_init_module(build_model(name, shape, C, hidden=16), g["init"]) for g in model_generators(seed, M)]


# ------------------------------------------------------------------ per-sample gradients: slow reference

@pytest.mark.parametrize(("name", "shape", "C", "backend"), [
    ("lr", (7,), 3, "fast"), ("mlp", (7,), 2, "fast"), ("cnn", (1, 28, 28), 10, "fast"),
    ("cnn", (1, 48, 48), 2, "fast"), ("cnn", (1, 28, 28), 10, "torch.func"), ("mlp", (7,), 2, "torch.func"),
    ("cnn_relu", (1, 28, 28), 10, "fast"), ("cnn", (3, 32, 32), 10, "fast")])
def test_per_sample_gradients_match_single_sample_loop(name, shape, C, backend):
    """Every backend, every layer type (Linear, Conv2d, tanh, max-pool): norms and clipped sums equal a loop of
    single-sample autograd gradients (atol 1e-5, rtol 1e-4)."""
    M, W = 3, 5
    torch.manual_seed(0)
    mods = _modules(name, shape, C, M)
    params = stack_params(mods)
    x = torch.randn(M, W, *shape)
    y = torch.randint(0, C, (M, W))
    be = make_backend(mods[0]) if backend == "fast" else FuncBackend(mods[0])
    norms, ctx = be.per_sample(params, x, y)
    factors = torch.rand(M, W)
    sums = be.clipped_sum(ctx, factors)
    for m in range(M):
        ref_sum = {n: torch.zeros_like(p) for n, p in mods[m].named_parameters()}
        for i in range(W):
            mods[m].zero_grad()
            nn.functional.cross_entropy(mods[m](x[m, i:i + 1]), y[m, i:i + 1], reduction="sum").backward()
            g = {n: p.grad.detach().clone() for n, p in mods[m].named_parameters()}
            ref_norm = torch.sqrt(sum((v ** 2).sum() for v in g.values()))
            torch.testing.assert_close(norms[m, i], ref_norm, atol=1e-5, rtol=1e-4)
            for n in g:
                ref_sum[n] += factors[m, i] * g[n]
        for n in ref_sum:
            torch.testing.assert_close(sums[n][m], ref_sum[n], atol=1e-5, rtol=1e-4)


class _OddConvs(nn.Module):
    """Convolutions with every geometry the closed-form patches handle: rectangular kernels, unequal strides,
    padding and dilation, on a non-square input."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(2, 3, (3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2))
        self.c2 = nn.Conv2d(3, 4, 3, stride=1, padding=0, dilation=2)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(torch.tanh(self.c2(torch.tanh(self.c1(x)))).mean((2, 3)))


def test_layer_backend_conv_geometry_matches_torch_func():
    """LayerBackend's strided patches (padding, stride, dilation, rectangular kernels) give the per-sample norms
    and clipped sums of torch.func's materialised gradients (atol 1e-5, rtol 1e-4)."""
    torch.manual_seed(0)
    mods = [_OddConvs() for _ in range(2)]
    params = stack_params(mods)
    x, y = torch.randn(2, 5, 2, 11, 9), torch.randint(0, 3, (2, 5))
    factors = torch.rand(2, 5)
    fast, ref = LayerBackend(mods[0]), FuncBackend(mods[0])
    (n1, c1), (n2, c2) = fast.per_sample(params, x, y), ref.per_sample(params, x, y)
    torch.testing.assert_close(n1, n2, atol=1e-5, rtol=1e-4)
    s1, s2 = fast.clipped_sum(c1, factors), ref.clipped_sum(c2, factors)
    for k in s2:
        torch.testing.assert_close(s1[k], s2[k], atol=1e-5, rtol=1e-4)


def test_evaluate_matches_module_forward():
    d, C, M = 6, 3, 4
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, d)).astype(np.float32)
    y = rng.integers(0, C, 600)
    bank = train_bank(X, y, np.zeros(600, np.int64), np.ones((M, 600), bool),
                      TrainSpec(algorithm="sgd", model="mlp", hidden=16, epochs=1, batch_size=50),
                      n_classes=C, n_groups=2, seed=3, progress=False)
    loss, logits = bank.evaluate(X, y, batch_size=128)
    assert loss.shape == (M, 600) and logits.shape == (M, 600, C)
    mod = bank.module()
    mod.load_state_dict({k: v[2] for k, v in bank.params.items()})
    with torch.no_grad():
        z = mod(torch.as_tensor(X))
    np.testing.assert_allclose(logits[2], z.numpy(), atol=1e-5)
    np.testing.assert_allclose(loss[2], nn.functional.cross_entropy(z, torch.as_tensor(y), reduction="none"),
                               atol=1e-5)


# ----------------------------------------------------------------------------- σ = 0, no clip = SGD

@pytest.mark.parametrize("algorithm", ["sgd", "dpsgd"])
def test_engine_reproduces_plain_sgd(algorithm):
    """'sgd', and 'dpsgd' with σ = 0 and C = ∞, equal autograd SGD on the same initial weights and batches."""
    rng = np.random.default_rng(1)
    n, d, C, M, B, lr = 400, 5, 2, 3, 40, 0.3
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = rng.integers(0, C, n)
    g = rng.integers(0, 2, n)
    mem = rng.random((M, n)) < 0.7
    spec = TrainSpec(algorithm=algorithm, model="mlp", hidden=8, epochs=2, batch_size=B, lr=lr, clip=math.inf,
                     noise_multiplier=0.0)
    bank = train_bank(X, y, g, mem, spec, n_classes=C, n_groups=2, seed=11, progress=False)
    # Reference: autograd on nn.Modules, same initial weights and the same Poisson batches, loss summed / B.
    gens = model_generators(11, M)
    mods = [_init_module(build_model("mlp", (d,), C, hidden=8), gg["init"]) for gg in gens]
    pools = [torch.as_tensor(np.flatnonzero(r)) for r in mem]
    sampler = PoissonBank(pools, [B / len(p) for p in pools], [gg["sample"] for gg in gens])
    opts = [torch.optim.SGD(m.parameters(), lr=lr) for m in mods]
    for _ in range(bank.steps):
        idx, w = sampler.next()
        for m in range(M):
            rows = idx[m][w[m] > 0]
            opts[m].zero_grad()
            out = mods[m](torch.as_tensor(X)[rows])
            (nn.functional.cross_entropy(out, torch.as_tensor(y)[rows], reduction="sum") / B).backward()
            opts[m].step()
    for m in range(M):
        for name, p in mods[m].named_parameters():
            torch.testing.assert_close(bank.params[name][m], p.detach(), atol=2e-5, rtol=1e-4)


# ------------------------------------------------------------------------------------ clip factors seam

def test_clip_factors_hand_computed():
    norms = torch.tensor([[0.5, 2.0, 4.0, 0.0]])
    groups = torch.tensor([[0, 0, 1, 1]])
    bounds = torch.tensor([[1.0, 2.0]])
    f = clip_factors(norms, groups, bounds)
    torch.testing.assert_close(f, torch.tensor([[1.0, 1.0 / (2.0 + 1e-6), 2.0 / (4.0 + 1e-6), 1.0]]))
    assert (clip_factors(norms, groups, torch.full((1, 2), math.inf)) == 1).all()


def test_noise_std_uses_max_over_all_groups_not_batch():
    pol = FixedClip(2, 3, 1.5, clip=2.0)
    torch.testing.assert_close(pol.noise_std(), torch.tensor([3.0, 3.0]))
    gq = GroupQuantileClip(1, 3, 2.0, sigma_b=5.0, tau=1.0, gamma=0.5, eta=0.2, c_min=0.1, q_init=1.0,
                           generators=[torch.Generator().manual_seed(0)])
    gq.Q = torch.tensor([[0.5, 3.0, 1.0]])
    # a batch holding only group 0 still gets noise scaled by the largest bound (group 1's 3.0)
    torch.testing.assert_close(gq.noise_std(), torch.tensor([6.0]))
    torch.testing.assert_close(gq.bounds(), torch.tensor([[0.5, 3.0, 1.0]]))
    two = GroupQuantileClip(2, 3, 2.0, sigma_b=5.0, tau=1.0, gamma=0.5, eta=0.2, c_min=0.1, q_init=1.0,
                            generators=[torch.Generator().manual_seed(0)] * 2)
    two.Q = torch.tensor([[0.5, 3.0, 1.0], [0.2, 0.3, 0.05]])
    torch.testing.assert_close(two.noise_std(), torch.tensor([6.0, 0.6]))  # each model its own max bound


# --------------------------------------------------------------------------------------- sensitivity

def test_sensitivity_replay_neighbouring_batches():
    """Adding one extreme record of any group moves the clipped sum by at most max_k C_k, and the DP-SGD-S
    counts by at most 1 in one coordinate (L2 sensitivity 1); bounds change only through the noised counts."""
    torch.manual_seed(0)
    d, C, K, W = 6, 2, 3, 30
    mod = _modules("mlp", (d,), C, 1)[0]
    params = stack_params([mod])
    be = make_backend(mod)
    x = torch.randn(1, W, d)
    y = torch.randint(0, C, (1, W))
    grp = torch.randint(0, K, (1, W))
    pol = GroupQuantileClip(1, K, 1.0, sigma_b=4.0, tau=1.2, gamma=0.75, eta=0.2, c_min=0.05, q_init=0.3,
                            generators=[torch.Generator().manual_seed(5)])
    pol.Q = torch.tensor([[0.2, 0.6, 0.4]])
    bounds = pol.bounds()
    n0, c0 = be.per_sample(params, x, y)
    s0 = be.clipped_sum(c0, clip_factors(n0, grp, bounds))
    counts0 = pol.counts(n0, grp, torch.ones(1, W))
    for k in range(K):
        x1 = torch.cat([x, 1e3 * torch.ones(1, 1, d)], 1)  # an extreme record of group k
        y1, g1 = torch.cat([y, torch.tensor([[1]])], 1), torch.cat([grp, torch.tensor([[k]])], 1)
        n1, c1 = be.per_sample(params, x1, y1)
        s1 = be.clipped_sum(c1, clip_factors(n1, g1, bounds))
        diff = torch.sqrt(sum(((s1[n] - s0[n]) ** 2).sum() for n in s0))
        assert diff <= bounds.max() * (1 + 1e-5)
        assert diff <= bounds[0, k] * (1 + 1e-5)  # in fact by at most that group's own bound
        counts1 = pol.counts(n1, g1, torch.ones(1, W + 1))
        assert torch.linalg.norm(counts1 - counts0) <= 1.0
    # the bound update reads the batch only through the counts: same counts and noise -> same Q
    a = GroupQuantileClip(1, K, 1.0, sigma_b=4.0, tau=1.2, gamma=0.75, eta=0.2, c_min=0.05, q_init=0.3,
                          generators=[torch.Generator().manual_seed(9)])
    b = GroupQuantileClip(1, K, 1.0, sigma_b=4.0, tau=1.2, gamma=0.75, eta=0.2, c_min=0.05, q_init=0.3,
                          generators=[torch.Generator().manual_seed(9)])
    norms_a = torch.tensor([[0.1, 0.2, 5.0]])
    norms_b = torch.tensor([[0.25, 0.01, 50.0]])  # different norms, same below/above pattern
    g3 = torch.tensor([[0, 1, 2]])
    a.update(norms_a, g3, torch.ones(1, 3))
    b.update(norms_b, g3, torch.ones(1, 3))
    torch.testing.assert_close(a.Q, b.Q)


def test_sigma_split_and_combination():
    for se, sb in [(1.0, 12.8), (0.7, 2.0), (3.0, 3.5)]:
        assert math.isclose(combine_sigmas(split_sigma(se, sb), sb), se, rel_tol=1e-12)
        assert split_sigma(se, sb) > se
    with pytest.raises(ValueError, match="must leave budget"):
        split_sigma(2.0, 1.5)
    # several statistics (the paper rule: group sums and counts): 1.3⁻² = σ_g⁻² + 5⁻² + 6⁻²
    assert math.isclose(combine_sigmas(split_sigma(1.3, 5.0, 6.0), 5.0, 6.0), 1.3, rel_tol=1e-12)
    assert math.isclose(split_sigma(1.3, 5.0, 6.0), (1.3 ** -2 - 5.0 ** -2 - 6.0 ** -2) ** -0.5, rel_tol=1e-12)
    with pytest.raises(ValueError, match="must leave budget"):
        split_sigma(1.3, 1.5, 2.0)  # 1.5⁻² + 2⁻² = 0.69 ≥ 1.3⁻² = 0.59


# ------------------------------------------------------------------------------------------- sampling

def test_bernoulli_positions_is_a_bernoulli_process():
    """Seed 0: 10^6 cells at q = 0.01. Count within 4 SE; every cell's inclusion is independent of its
    neighbour's (adjacent-pair frequency q² within 4 SE); positions strictly increase (no duplicates)."""
    size, q = 10**6, 0.01
    pos = bernoulli_positions(size, q, torch.Generator().manual_seed(0))
    assert (pos[1:] > pos[:-1]).all() and pos.min() >= 0 and pos.max() < size
    assert abs(len(pos) - size * q) < 4 * math.sqrt(size * q * (1 - q))
    pairs = (pos[1:] - pos[:-1] == 1).sum().item()
    assert abs(pairs - size * q * q) < 4 * math.sqrt(size * q * q) + 1
    assert len(bernoulli_positions(0, q, torch.Generator())) == 0
    assert len(bernoulli_positions(50, 1.0, torch.Generator())) == 50
    # the same generator's first chunk of Geometric(q) gaps, cumulated and cut at size by a boolean mask
    size, q = 20_000, 0.03
    expected = size * q
    gaps = torch.empty(int(expected + 6 * math.sqrt(expected) + 16), dtype=torch.float64).geometric_(
        q, generator=torch.Generator().manual_seed(5))
    ref = torch.cumsum(gaps, 0) - 1
    assert ref[-1] >= size  # one chunk covers the range, so this reference is complete
    assert torch.equal(bernoulli_positions(size, q, torch.Generator().manual_seed(5)), ref[ref < size].long())
    # a position exactly at size is cut too (the first seed of 0..99 whose draws hit it)
    size, q = 40, 0.5
    for seed in range(100):
        ref = torch.cumsum(torch.empty(int(size * q + 6 * math.sqrt(size * q) + 16), dtype=torch.float64).geometric_(
            q, generator=torch.Generator().manual_seed(seed)), 0) - 1
        if (ref == size).any() and ref[-1] >= size:
            break
    assert (ref == size).any()
    assert torch.equal(bernoulli_positions(size, q, torch.Generator().manual_seed(seed)), ref[ref < size].long())


def test_poisson_batch_sizes_and_membership():
    n_pool, q, M, T = 5000, 0.02, 4, 800
    rng = np.random.default_rng(0)
    pools = [torch.as_tensor(np.sort(rng.choice(20000, n_pool, replace=False))) for _ in range(M)]
    gens = [g["sample"] for g in model_generators(7, M)]
    bank = PoissonBank(pools, [q] * M, gens)
    sizes = np.zeros((T, M))
    for t in range(T):
        idx, w = bank.next()
        for m in range(M):
            rows = idx[m][w[m] > 0].numpy()
            sizes[t, m] = len(rows)
            assert len(np.unique(rows)) == len(rows)
            assert np.isin(rows, pools[m].numpy()).all()
    mean, var = n_pool * q, n_pool * q * (1 - q)
    se = math.sqrt(var / (T * M))
    assert abs(sizes.mean() - mean) < 4 * se, (sizes.mean(), mean, se)
    assert abs(sizes.var() / var - 1) < 0.1
    assert abs(np.corrcoef(sizes[:, 0], sizes[:, 1])[0, 1]) < 0.15  # models do not share draws


def test_poisson_bank_places_each_models_draws_as_a_slow_reference_does():
    """Seed 3: pools of different sizes and rates, several blocks. A per-model, per-step Python reference built
    from the same generators' positions (record p mod n_m at step p // n_m, in draw order, padded with index 0 and
    weight 0 to the widest model of the step) equals what the vectorised :class:`PoissonBank` returns, bit for bit."""
    rng = np.random.default_rng(3)
    sizes, rates, block, T = [700, 1500, 40, 1100], [0.02, 0.005, 0.3, 0.01], 8, 20
    pools = [torch.as_tensor(np.sort(rng.choice(5000, n, replace=False))) for n in sizes]
    bank = PoissonBank(pools, rates, [torch.Generator().manual_seed(10 + m) for m in range(4)], block=block)
    ref_gens = [torch.Generator().manual_seed(10 + m) for m in range(4)]
    per_step: list[list[list[int]]] = [[] for _ in range(T)]
    for s in range(0, T, block):
        for pool, q, g in zip(pools, rates, ref_gens):
            pos = bernoulli_positions(block * len(pool), q, g).tolist()
            for t in range(block):
                if s + t < T:
                    per_step[s + t].append([int(pool[p % len(pool)]) for p in pos if p // len(pool) == t])
    for t in range(T):
        idx, w = bank.next()
        W = max(len(r) for r in per_step[t])
        assert idx.shape == w.shape == (4, W) and idx.dtype == torch.int64 and w.dtype == torch.float32
        for m, rows in enumerate(per_step[t]):
            assert idx[m].tolist() == rows + [0] * (W - len(rows)), (t, m)
            assert w[m].tolist() == [1.0] * len(rows) + [0.0] * (W - len(rows)), (t, m)


def test_poisson_inclusion_is_uniform_over_records():
    """Seed 1: 300 records, q = 0.05, 4000 steps: each record's inclusion count is Binomial(4000, 0.05);
    the chi-square statistic over records stays below the 99.9% quantile; a biased sampler would fail it."""
    from scipy import stats

    n, q, T = 300, 0.05, 4000
    bank = PoissonBank([torch.arange(n)], [q], [torch.Generator().manual_seed(1)])
    counts = np.zeros(n)
    for _ in range(T):
        idx, w = bank.next()
        np.add.at(counts, idx[0][w[0] > 0].numpy(), 1)
    chi2 = ((counts - T * q) ** 2 / (T * q * (1 - q))).sum()
    assert chi2 < stats.chi2.ppf(0.999, n - 1)
    biased = counts * (1 + 0.3 * (np.arange(n) < n // 2))  # over-includes the first half by 30%
    assert ((biased - biased.mean()) ** 2 / (T * q * (1 - q))).sum() > stats.chi2.ppf(0.999, n - 1)


# ---------------------------------------------------------------------------------------------- noise

def _std_ok(samples: torch.Tensor, expected: float, tol: float = 0.005) -> bool:
    return abs(samples.double().std().item() / expected - 1) <= tol


def test_noise_std_within_half_percent_and_rejects_wrong_scales():
    """Seed 0, 10^6 draws: the std estimate's SE is 0.07%, so a 0.5% tolerance is 7 SE."""
    gens = [g["noise"] for g in model_generators(0, 4)]
    nb = _NoiseBank(gens, 250_000, "cpu")
    std = FixedClip(4, 1, 1.3, clip=0.7).noise_std()  # σ·C = 0.91
    draws = nb.next() * std[:, None]
    assert draws.numel() == 10**6
    assert _std_ok(draws, 0.91)
    assert abs(draws.double().mean().item()) < 5 * 0.91 / 1000
    assert not _std_ok(draws * 0.9, 0.91)
    assert not _std_ok(draws * 1.1, 0.91)


def test_noise_independent_across_models_and_of_bank_size():
    a = _NoiseBank([g["noise"] for g in model_generators(5, 3)], 100_000, "cpu").next()
    b = _NoiseBank([g["noise"] for g in model_generators(5, 6)], 100_000, "cpu").next()
    torch.testing.assert_close(a, b[:3])  # model m's stream does not depend on M
    c = torch.corrcoef(a)
    off = c[~torch.eye(3, dtype=torch.bool)]
    assert off.abs().max() < 5 / math.sqrt(100_000)


def test_training_is_deterministic_and_model_independent_of_bank():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(500, 4)).astype(np.float32)
    y = rng.integers(0, 2, 500)
    g = rng.integers(0, 2, 500)
    mem = rng.random((4, 500)) < 0.6
    spec = TrainSpec(algorithm="dpsgd_s", model="lr", epochs=2, batch_size=50, noise_multiplier=1.0, sigma_b=5.0)
    b1 = train_bank(X, y, g, mem, spec, n_classes=2, n_groups=2, seed=4, progress=False)
    b2 = train_bank(X, y, g, mem, spec, n_classes=2, n_groups=2, seed=4, progress=False)
    b3 = train_bank(X, y, g, mem[:2], spec, n_classes=2, n_groups=2, seed=4, progress=False)
    for k in b1.params:
        torch.testing.assert_close(b1.params[k], b2.params[k], rtol=0, atol=0)
        torch.testing.assert_close(b1.params[k][:2], b3.params[k], rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------------------- accounting

def test_rdp_golden_value():
    assert abs(epsilon(1.5, sample_rate=0.04, steps=2250, delta=1e-5) - 7.32911117) < 1e-6
    assert epsilon(0.0, sample_rate=0.04, steps=10, delta=1e-5) == math.inf


@settings(max_examples=12, deadline=None)
@given(eps=st.sampled_from([0.5, 1.0, 2.0, 5.0, 10.0]), q=st.floats(0.001, 0.1), epochs=st.integers(1, 20),
       delta=st.sampled_from([1e-5, 1e-6]))
@pytest.mark.slow
def test_calibration_never_overshoots(eps, q, epochs, delta):
    steps = int(epochs / q)
    sigma = calibrate_sigma(eps, sample_rate=q, steps=steps, delta=delta)
    got = epsilon(sigma, sample_rate=q, steps=steps, delta=delta)
    assert got <= eps
    assert got >= 0.95 * eps  # and is not needlessly loose


def test_accounting_records_everything_and_dpsgd_s_charges_counts():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(1000, 4)).astype(np.float32)
    y = rng.integers(0, 2, 1000)
    g = rng.integers(0, 2, 1000)
    mem = np.ones((2, 1000), bool)
    dp = train_bank(X, y, g, mem, TrainSpec(algorithm="dpsgd", epochs=2, batch_size=100, target_epsilon=2.0),
                    n_classes=2, n_groups=2, seed=0, progress=False)
    s = train_bank(X, y, g, mem, TrainSpec(algorithm="dpsgd_s", epochs=2, batch_size=100, target_epsilon=2.0,
                                           sigma_b=5.0), n_classes=2, n_groups=2, seed=0, progress=False)
    a, b = dp.accounting[0], s.accounting[0]
    assert a.steps == b.steps == 20 and a.sample_rate == b.sample_rate == 0.1
    assert a.epsilon <= 2.0 and b.epsilon <= 2.0 and a.accountant == "rdp" and a.sampling == "poisson"
    assert b.sigma_eff == pytest.approx(a.sigma_eff)  # the same total budget...
    assert b.sigma_g > a.sigma_g  # ...so the gradient gets more noise: the counts are paid for
    assert b.sigma_eff == pytest.approx(combine_sigmas(b.sigma_g, b.sigma_b))
    ns = train_bank(X, y, g, mem, TrainSpec(algorithm="dpsgd_s_nonprivate", epochs=1, batch_size=100,
                                            target_epsilon=2.0), n_classes=2, n_groups=2, seed=0, progress=False)
    assert not ns.accounting[0].guaranteed and a.guaranteed


def test_coupled_models_share_everything_but_the_target():
    """PA-LOOA pairs: same stream id and sampling set; IN trains on D, OUT on D∖{z}. With z's label flipped to
    be far from the rest, the pair differs; a pair with identical membership is bit-identical."""
    rng = np.random.default_rng(4)
    n = 400
    X = rng.normal(size=(n, 3)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    g = np.zeros(n, np.int64)
    mem = np.ones((4, n), bool)
    mem[1, 7] = False  # model 1 = model 0 without record 7
    spec = TrainSpec(algorithm="dpsgd", model="lr", epochs=3, batch_size=40, noise_multiplier=1.0, lr=0.5)
    bank = train_bank(X, y, g, mem, spec, n_classes=2, n_groups=2, seed=0, progress=False,
                      stream_ids=np.array([0, 0, 1, 1]), sample_over=np.ones((4, n), bool))
    p = bank.params["fc.weight"]
    assert torch.equal(p[2], p[3])  # same stream, same data: identical
    assert not torch.equal(p[0], p[1])  # the target record makes the only difference...
    assert (p[0] - p[1]).abs().max() < (p[0] - p[2]).abs().max()  # ...and a small one next to another stream's
    assert bank.accounting[1].sample_rate == bank.accounting[0].sample_rate == 40 / n


def test_cnn_backend_leaves_the_callers_module_untouched():
    """The CNN backend switches conv outputs to channels_last through hooks on a private copy; the caller's
    module (which Opacus may wrap later, wrong in that layout) keeps no hook."""
    mod = build_model("cnn", (1, 28, 28), 10)
    make_backend(mod)
    assert all(not m._forward_hooks for m in mod.modules())


def test_row_sq_in_cache_sized_slices_is_the_full_sum_bit_for_bit():
    """The dense backend's norms sum squares over slices of the bank: the bits of (x * x).sum(-1) at any slice size
    and on 1 or 2 threads, including long rows where a slice of one row would let torch split the row itself (the
    slicing must then not happen: [3, 400000] differed by up to 0.03 before that guard)."""
    from fairdp_core.engine.backends import _row_sq

    torch.manual_seed(0)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for shape in [(37, 64, 33), (5, 300), (3, 1, 7), (3, 400_000), (4, 1, 300_000), (130, 2, 5_000)]:
                x = torch.randn(*shape)
                want = (x * x).sum(-1)
                for chunk in (1, 100, 10_000, 1 << 18):
                    assert torch.equal(_row_sq(x, chunk_elems=chunk), want), (threads, shape, chunk)
    finally:
        torch.set_num_threads(before)


def test_noise_drawn_on_threads_is_the_one_thread_draw(monkeypatch):
    """Each model's generator draws its own sequence on a pool thread: the same bits as drawing the models one after
    the other, and the pool is used (the bank is large enough)."""
    import fairdp_core.engine.trainer as tr

    seqs = {}
    for threads in (1, 2):
        monkeypatch.setattr(torch, "get_num_threads", lambda t=threads: t)
        nb = _NoiseBank([g["noise"] for g in model_generators(3, 5)], 20_000, "cpu")
        assert (nb._pool is None) == (threads == 1)
        seqs[threads] = torch.stack([nb.next() for _ in range(nb.block + 1)])
    assert torch.equal(seqs[1], seqs[2])
    assert tr._noise_pool(2) is tr._noise_pool(2)  # one pool per process
