"""DP-SGD-S with the paper code's rule, C_k = max(C_min, C0 · min(s, ‖ḡ‖/‖ḡ_k‖)): DP-correct and as the code has it.

The bounds are checked against the published formula on fixed, hand-computed releases; the DP-correct variant's
statistics against an autograd loop (gradients clipped at C0, summed per group) and its noise against σ_s·C0 and
σ_b; the trainer's step noise and accounting against σ_eff = (σ_g⁻² + σ_s⁻² + σ_b⁻²)^(-1/2). Statistical checks
state their seed and tolerance in standard errors (SE). ``tests/privacy_breakages.py`` breaks each property.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from fairdp_core.engine import (
    GroupMeanRatioClip,
    GroupMeanRatioClipCode,
    PoissonBank,
    TrainSpec,
    combine_sigmas,
    epsilon,
    model_generators,
    release_key,
    split_sigma,
    train_bank,
)
from fairdp_core.engine.trainer import _init_module
from fairdp_core.models import build_model

from .conftest import own_settings


def _rule(M=1, K=2, **kw) -> GroupMeanRatioClip:
    args = dict(clip=5.0, ratio_cap=2.0, sigma_s=3.0, sigma_b=6.0, c_min=0.01, floor=1.0, generators=[None] * M)
    return GroupMeanRatioClip(M, K, 1.0, **{**args, **kw})


def test_paper_rule_bounds_follow_the_published_formula():
    """Hand-computed: released counts (4, 2), sums S_0 = (4, 0), S_1 = (0, 6): ḡ_0 = (1, 0), ḡ_1 = (0, 3),
    ḡ = (4, 6)/6, ‖ḡ‖ = √13/3 = 1.20185. C0 = 5: C_0 = 5·1.20185 = 6.0093 (group 0, the smaller mean gradient, gets
    the LARGER bound), C_1 = 5·1.20185/3 = 2.0031. With s = 1.1 the cap binds for group 0 (5.5); with C_min = 2.5
    the floor for group 1; a noised count below the public floor (0.5 < 1) is replaced by the floor."""
    sums = torch.tensor([[[4.0, 0.0], [0.0, 6.0]]])
    counts = torch.tensor([[4.0, 2.0]])
    g = math.sqrt(13) / 3
    torch.testing.assert_close(_rule().bounds_from_release(sums, counts), torch.tensor([[5 * g, 5 * g / 3]]))
    torch.testing.assert_close(_rule(ratio_cap=1.1).bounds_from_release(sums, counts), torch.tensor([[5.5, 5 * g / 3]]))
    torch.testing.assert_close(_rule(c_min=2.5).bounds_from_release(sums, counts), torch.tensor([[5 * g, 2.5]]))
    low = torch.tensor([[0.5, 2.0]])  # ḡ_0 = S_0 / 1, ḡ = (4, 6) / 2.5
    g2 = math.sqrt(52) / 2.5
    torch.testing.assert_close(_rule().bounds_from_release(sums, low), torch.tensor([[5 * min(2, g2 / 4), 5 * g2 / 3]]))


def test_paper_code_rule_as_the_code_has_it():
    """The code's quirk, exact sums, no noise: the "overall mean" is the LAST group present in the batch. Three
    groups with mean norms 1, 4, 2 (group 2 last): C = C0·min(s, 2/‖ḡ_k‖) = (10, 2.5, 5). With group 2 absent
    from the batch, group 1 is the last present: C_0 = min(2, 4/1)·5 = 10, C_1 = 5 and group 2 keeps its bound.
    For two groups only group 0's bound moves."""
    rule = GroupMeanRatioClipCode(1, 3, 1.0, clip=5.0, ratio_cap=2.0, c_min=0.01)
    groups = torch.tensor([[0, 0, 1, 2, 2]])
    w = torch.ones(1, 5)
    sums = torch.tensor([[[2.0, 0.0], [0.0, 4.0], [4.0, 0.0]]])  # per group, the SUM of its members' gradients
    rule.observe_sums(sums, groups, w)
    torch.testing.assert_close(rule.bounds(), torch.tensor([[10.0, 2.5, 5.0]]))
    rule.observe_sums(sums, groups, torch.tensor([[1.0, 1.0, 1.0, 0.0, 0.0]]))
    torch.testing.assert_close(rule.bounds(), torch.tensor([[10.0, 5.0, 5.0]]))
    two = GroupMeanRatioClipCode(1, 2, 1.0, clip=5.0, ratio_cap=2.0, c_min=0.01)
    two.observe_sums(torch.tensor([[[0.0, 3.0], [1.0, 0.0]]]), torch.tensor([[0, 1, 1]]), torch.ones(1, 3))
    torch.testing.assert_close(two.bounds(), torch.tensor([[5.0 * (0.5 / 3.0), 5.0]]))
    assert not two.guaranteed and torch.equal(two.sum_factors(torch.tensor([[9.0]])), torch.ones(1, 1))


def test_paper_rule_release_noise_is_sigma_s_c0_and_sigma_b():
    """Seed 0, zero statistics, K = 4,000 groups × P = 10 coordinates per model (2 models): the released sums
    have std σ_s·C0 = 15 within 2% (SE 0.35%) and the counts std σ_b = 6 within 5% (SE 0.8%); the models' noise
    is uncorrelated (|r| < 5 SE)."""
    M, K, P = 2, 4000, 10
    gens = [g["count"] for g in model_generators(0, M)]
    rule = _rule(M=M, K=K, generators=gens)
    sums, counts = rule.release(torch.zeros(M, K, P), torch.zeros(M, K))
    for m in range(M):
        assert abs(sums[m].double().std().item() / 15.0 - 1) < 0.02
        assert abs(counts[m].double().std().item() / 6.0 - 1) < 0.05
    assert abs(np.corrcoef(sums[0].flatten().numpy(), sums[1].flatten().numpy())[0, 1]) < 5 / math.sqrt(K * P)


@pytest.mark.parametrize("algorithm", ["dpsgd_s_paper", "dpsgd_s_paper_code"])
def test_paper_rule_statistics_are_per_group_sums_of_gradients_clipped_at_c0(algorithm, monkeypatch):
    """The first step's per-group sums, captured from the trainer, equal an autograd loop over the same Poisson
    batch: each sample's gradient clipped at C0 = 0.05 (most clip: the DP variant's sensitivity is C0) or not at
    all (the code's variant), summed over the group's samples (atol 1e-5). The group bounds are set to s·C0 before
    the step, so statistics clipped at the group bounds instead of C0 would fail."""
    rng = np.random.default_rng(2)
    n, d, M, B, C0, seed = 200, 4, 2, 40, 0.05, 5
    X = rng.normal(size=(n, d)).astype(np.float32)
    y, g = rng.integers(0, 2, n), rng.integers(0, 2, n)
    mem = rng.random((M, n)) < 0.8
    captured = []
    cls = GroupMeanRatioClip if algorithm == "dpsgd_s_paper" else GroupMeanRatioClipCode
    original = cls.observe_sums
    monkeypatch.setattr(cls, "observe_sums", lambda self, sums, gr, w: (captured.append(sums.clone()),
                                                                       original(self, sums, gr, w)))
    init = cls.__init__

    def wide_bounds(self, *a, **kw):  # group bounds s·C0 ≠ C0 from the start: the statistics must still use C0
        init(self, *a, **kw)
        self._b = torch.full_like(self._b, 2.0 * self.c0)

    monkeypatch.setattr(cls, "__init__", wide_bounds)
    spec = TrainSpec(algorithm=algorithm, model="mlp", hidden=6, epochs=B / n * 0.8, batch_size=B, lr=0.3, clip=C0,
                     noise_multiplier=1.0, **own_settings(algorithm, sigma_b=10.0))
    bank = train_bank(X, y, g, mem, spec, n_classes=2, n_groups=2, seed=seed, progress=False)
    assert bank.steps == 1 and len(captured) == 1
    gens = model_generators(seed, M)
    mods = [_init_module(build_model("mlp", (d,), 2, hidden=6), gg["init"]) for gg in gens]
    pools = [torch.as_tensor(np.flatnonzero(r)) for r in mem]
    idx, w = PoissonBank(pools, [B / len(p) for p in pools], [gg["sample"] for gg in gens]).next()
    clipped = 0
    for m in range(M):
        expect = torch.zeros(2, captured[0].shape[-1])
        for i in idx[m][w[m] > 0].tolist():
            mods[m].zero_grad()
            nn.functional.cross_entropy(mods[m](torch.as_tensor(X[i:i + 1])), torch.as_tensor(y[i:i + 1]),
                                        reduction="sum").backward()
            gi = torch.cat([p.grad.flatten() for p in mods[m].parameters()])
            f = min(1.0, C0 / (gi.norm().item() + 1e-6)) if algorithm == "dpsgd_s_paper" else 1.0
            clipped += int(gi.norm() > C0)
            expect[g[i]] += f * gi
        torch.testing.assert_close(captured[0][m], expect, atol=1e-5, rtol=1e-4)
    assert clipped > 0.5 * len(idx[0])
    if algorithm == "dpsgd_s_paper":
        # the bounds after the step come from the NOISED release alone: replay each model's count stream
        a = bank.accounting[0]
        gens = model_generators(seed, M, release=release_key(spec))
        rule = GroupMeanRatioClip(M, 2, a.sigma_g, clip=C0, ratio_cap=2.0, sigma_s=a.sigma_s, sigma_b=a.sigma_b,
                                  c_min=spec.c_min, generators=[gg["count"] for gg in gens])
        counts = torch.stack([torch.bincount(torch.as_tensor(g)[idx[m][w[m] > 0]], minlength=2).float()
                              for m in range(M)])
        expected = rule.bounds_from_release(*rule.release(captured[0], counts))
        torch.testing.assert_close(bank.policy_state["bounds"], expected)
        assert not torch.allclose(expected, rule.bounds_from_release(captured[0], counts), rtol=1e-3)


def _weight_noise(spec: TrainSpec, d: int = 25_000, seed: int = 0):
    """One step on all-zero inputs: the weight update is the added noise alone (noise = −Δθ · B / η)."""
    n = 60
    group = np.arange(n) % 2
    bank = train_bank(np.zeros((n, d), np.float32), np.zeros(n, np.int64), group, np.ones((2, n), bool), spec,
                      n_classes=2, n_groups=2, seed=seed, progress=False)
    w0 = [_init_module(build_model("lr", (d,), 2), gg["init"]).fc.weight.detach() for gg in model_generators(seed, 2)]
    return -(bank.params["fc.weight"] - torch.stack(w0)).flatten(1) * spec.batch_size / spec.lr, bank


def test_paper_rule_step_noise_and_accounting_pay_for_the_statistics():
    """σ_eff = 1.3 with σ_s = 5 and σ_b = 6: σ_g = (1.3⁻² − 5⁻² − 6⁻²)^(-1/2) = 1.3815; the first step's noise
    (bounds C0 = 0.7 for both groups) has std σ_g·C0 within 2% (50,000 coordinates, SE 0.32%); the accounting
    records σ_s and charges σ_eff, and the reported ε is the accountant's for σ_eff. The not-guaranteed code
    variant draws noise σ·max_k C_k with no statistics charged and says so."""
    spec = TrainSpec(algorithm="dpsgd_s_paper", epochs=0.5, batch_size=30, lr=0.5, clip=0.7, noise_multiplier=1.3,
                     sigma_s=5.0, sigma_b=6.0)
    noise, bank = _weight_noise(spec)
    a = bank.accounting[0]
    assert a.sigma_g == pytest.approx(split_sigma(1.3, 5.0, 6.0)) and a.sigma_g == pytest.approx(1.3815, abs=1e-3)
    assert combine_sigmas(a.sigma_g, a.sigma_s, a.sigma_b) == pytest.approx(1.3) and a.sigma_eff == 1.3
    assert a.epsilon == pytest.approx(epsilon(1.3, sample_rate=a.sample_rate, steps=a.steps, delta=a.delta))
    assert a.guaranteed and any("σ_s" in s for s in a.public_assumptions)
    for m in range(2):
        assert abs(noise[m].double().std().item() / (a.sigma_g * 0.7) - 1) < 0.02
    code = TrainSpec(algorithm="dpsgd_s_paper_code", epochs=0.5, batch_size=30, lr=0.5, clip=0.7,
                     noise_multiplier=1.3)
    noise, bank = _weight_noise(code)
    assert not bank.accounting[0].guaranteed and bank.accounting[0].sigma_g == 1.3
    # all-zero inputs: both groups' mean gradients are the same bias gradient, so the ratio is 1 and C_k = C0
    torch.testing.assert_close(bank.policy_state["bounds"], torch.full((2, 2), 0.7))
    for m in range(2):
        assert abs(noise[m].double().std().item() / (1.3 * 0.7) - 1) < 0.02


def test_default_sigma_s_takes_a_tenth_of_the_budget():
    """sigma_s None: σ_s = √10·σ_eff, so σ_g = (σ_eff⁻²·0.9 − σ_b⁻²)^(-1/2)."""
    spec = TrainSpec(algorithm="dpsgd_s_paper", epochs=0.5, batch_size=30, lr=0.5, clip=0.7, noise_multiplier=1.3,
                     sigma_b=6.0)
    _, bank = _weight_noise(spec, d=5)
    a = bank.accounting[0]
    assert a.sigma_s == pytest.approx(math.sqrt(10) * 1.3)
    assert a.sigma_g == pytest.approx((0.9 / 1.3 ** 2 - 1 / 36) ** -0.5)


def test_the_rules_move_opposite_ways_where_one_group_has_larger_gradients():
    """Group 1's inputs are 6× larger, so its per-sample gradients and its mean gradient are larger. After 3 steps
    of 1,000 records at σ_eff = 0.5 (seed 0, 4 models; early in training, where mean gradients are large beside
    the released sums' noise, about 0.006 in ‖ḡ_k‖): the paper rule gives group 1 the SMALLER bound in every
    model, the quantile rule (DP-SGD-S as the study describes it, from Q_init = 3 between the two groups' typical
    norms) the LARGER one; and the clipped-fraction
    diagnostic shows group 1 clipped more often under DP-SGD at C = 2."""
    rng = np.random.default_rng(0)
    n, d, M = 2000, 5, 4
    g = (np.arange(n) % 2).astype(np.int64)
    X = (rng.normal(size=(n, d)) * np.where(g == 1, 6.0, 1.0)[:, None]).astype(np.float32)
    y = (X[:, 0] + rng.normal(size=n) * 3 > 0).astype(np.int64)
    mem = np.ones((M, n), bool)
    common = dict(epochs=1.5, batch_size=1000, lr=0.2, noise_multiplier=0.5)
    paper = train_bank(X, y, g, mem, TrainSpec(algorithm="dpsgd_s_paper", clip=0.5, **common), n_classes=2,
                       n_groups=2, seed=0, progress=False)
    quant = train_bank(X, y, g, mem, TrainSpec(algorithm="dpsgd_s", q_init=3.0, **common), n_classes=2,
                       n_groups=2, seed=0, progress=False)
    dp = train_bank(X, y, g, mem, TrainSpec(algorithm="dpsgd", clip=2.0, **common), n_classes=2, n_groups=2, seed=0,
                    progress=False)
    bp, bq = paper.policy_state["bounds"], quant.policy_state["bounds"]
    assert (bp[:, 1] < bp[:, 0]).all(), bp
    assert (bq[:, 1] > bq[:, 0]).all(), bq
    frac = dp.clip_stats["clipped"].sum(0) / dp.clip_stats["seen"].sum(0)
    assert frac[1] > frac[0] + 0.2, frac


def _full_grams(S: torch.Tensor, scale: float, n: int, seed: int, dim_noise: int | None = None) -> torch.Tensor:
    """[n, K, K]: Gram matrices of S + scale·Z drawn the slow way, Z [dim, K] in full."""
    gen = torch.Generator().manual_seed(seed)
    Z = torch.randn(n, *S.shape, generator=gen, dtype=torch.float64)
    T = S.double() + scale * Z
    return T.transpose(1, 2) @ T


@pytest.mark.parametrize("dim", [8, 4])
def test_noised_gram_has_the_law_of_the_full_draw(dim):
    """Three sums of dim coordinates (one group absent: a zero column; norms 3, 1.5 and 0, S_0·S_1 = 2), noise
    scale 1.2: 12,000 draws of the K-dimensional release (Bartlett's Wishart for dim = 8, Gaussian rows for dim = 4,
    where dim − K < K) against 12,000 of the full one. Two-sample KS on each of the five statistics the rule reads
    or that pin the joint law (the three diagonal entries, G̃_01, the total): every p > 0.001/5 (Bonferroni, seed 0
    and 1). The same test rejects (p < 1e-6 somewhere) a Wishart with dim instead of dim − K degrees of freedom, and
    a release that forgets the sums' span (R + scale·Z₁ replaced by R)."""
    from scipy.stats import ks_2samp

    from fairdp_core.rules.policy import noised_gram

    K, n, scale = 3, 12_000, 1.2
    S = torch.zeros(dim, K, dtype=torch.float64)
    S[0, 0], S[1, 0] = 3.0 * 0.8, 3.0 * 0.6
    S[0, 1], S[2, 1] = 2.0 / 2.4, math.sqrt(1.5 ** 2 - (2.0 / 2.4) ** 2)
    gram = S.T @ S
    assert gram[0, 1].item() == pytest.approx(2.0) and gram[1, 1].item() == pytest.approx(2.25)
    gen = torch.Generator().manual_seed(1)
    fast = torch.stack([noised_gram(gram, dim, scale, gen) for _ in range(n)])
    slow = _full_grams(S, scale, n, seed=0)

    def stats(G):
        return [G[:, 0, 0], G[:, 1, 1], G[:, 2, 2], G[:, 0, 1], G.sum((1, 2))]

    pvals = [ks_2samp(a.numpy(), b.numpy()).pvalue for a, b in zip(stats(fast), stats(slow))]
    assert min(pvals) > 0.001 / 5, pvals
    # power at this n: two wrong laws are rejected
    lam, V = torch.linalg.eigh(gram)
    R = (V * lam.clamp(min=0).sqrt()) @ V.T
    g2 = torch.Generator().manual_seed(2)
    Z1 = torch.randn(n, K, K, generator=g2, dtype=torch.float64)
    W_rows = torch.randn(n, dim, K, generator=g2, dtype=torch.float64)  # Wishart_K(dim): one too many K rows
    A = R + scale * Z1
    wrong_df = A.transpose(1, 2) @ A + scale ** 2 * W_rows.transpose(1, 2) @ W_rows
    W_right = W_rows[:, : dim - K]
    no_span = R.expand(n, K, K).transpose(1, 2) @ R + scale ** 2 * W_right.transpose(1, 2) @ W_right
    for wrong in (wrong_df, no_span):
        assert min(ks_2samp(a.numpy(), b.numpy()).pvalue for a, b in zip(stats(wrong), stats(slow))) < 1e-6


def test_noised_gram_law_with_collinear_sums_and_four_groups():
    """K = 4, dim = 11, sums of rank 1 (groups 0 and 1 collinear, 2 a multiple of them, 3 absent), scale 0.8:
    10,000 fast draws against 10,000 full ones, two-sample KS on every entry of the upper triangle, the total, the
    determinant and the smallest eigenvalue (12 statistics): every p > 0.001/12 (seeds 3 and 4). Bartlett's degrees
    of freedom one too high is rejected (p < 1e-6)."""
    from scipy.stats import ks_2samp

    from fairdp_core.rules.policy import noised_gram

    K, dim, n, scale = 4, 11, 10_000, 0.8
    u = torch.zeros(dim, dtype=torch.float64)
    u[0], u[4] = 0.6, 0.8
    S = torch.stack([2.0 * u, -1.0 * u, 0.5 * u, 0 * u], 1)
    gram = S.T @ S
    gen = torch.Generator().manual_seed(3)
    fast = torch.stack([noised_gram(gram, dim, scale, gen) for _ in range(n)])
    slow = _full_grams(S, scale, n, seed=4)
    iu = torch.triu_indices(K, K)

    def stats(G):
        return ([G[:, i, j] for i, j in iu.T.tolist()] + [G.sum((1, 2)), torch.linalg.det(G),
                                                          torch.linalg.eigvalsh(G)[:, 0]])

    pvals = [ks_2samp(a.numpy(), b.numpy()).pvalue for a, b in zip(stats(fast), stats(slow))]
    assert len(pvals) == 13
    assert min(pvals) > 0.001 / len(pvals), pvals
    # Bartlett with one degree of freedom too many: the Wishart part drawn from dim − K + 1 rows
    lam, V = torch.linalg.eigh(gram)
    R = (V * lam.clamp(min=0).sqrt()) @ V.T
    g2 = torch.Generator().manual_seed(5)
    A = R + scale * torch.randn(n, K, K, generator=g2, dtype=torch.float64)
    rows = torch.randn(n, dim - K + 1, K, generator=g2, dtype=torch.float64)
    wrong = A.transpose(1, 2) @ A + scale ** 2 * rows.transpose(1, 2) @ rows
    assert min(ks_2samp(a.numpy(), b.numpy()).pvalue for a, b in zip(stats(wrong), stats(slow))) < 1e-6


def test_paper_rule_bounds_from_the_gram_equal_those_from_the_sums():
    """On the same released sums the bounds read from their Gram matrix equal those read from the sums (5 groups,
    one with a noised count under the floor); and the code's variant's bounds from the exact sums' Gram equal its
    bounds from the sums, a group absent from the batch keeping its bound."""
    torch.manual_seed(0)
    M, K, P = 2, 5, 30
    sums = torch.randn(M, K, P)
    counts = torch.tensor([[4.0, 9.0, 0.3, 2.0, 7.0], [1.0, 2.0, 3.0, 4.0, 5.0]])
    rule = _rule(M=M, K=K)
    gram = torch.bmm(sums.double(), sums.double().transpose(1, 2))
    torch.testing.assert_close(rule.bounds_from_gram(gram, counts), rule.bounds_from_release(sums, counts))
    groups = torch.tensor([[0, 1, 1, 3, 4, 4], [0, 1, 2, 2, 3, 4]])
    w = torch.ones(M, 6)
    a, b = (GroupMeanRatioClipCode(M, K, 1.0, clip=5.0, ratio_cap=2.0, c_min=0.01) for _ in range(2))
    a.observe_sums(sums, groups, w)
    b.observe_gram(gram, groups, w, dim=P)
    torch.testing.assert_close(a.bounds(), b.bounds())
    assert a.bounds()[0, 2] == 5.0  # group 2 absent from model 0's batch: its bound stays C0


def test_paper_rule_with_more_groups_reads_the_gram_of_sums_clipped_at_c0(monkeypatch):
    """An MLP with K = 3 groups (the Gram route): the first step's Gram matrix, captured from the trainer, equals
    that of an autograd loop's per-group sums of gradients clipped at C0 = 0.05 (rtol 1e-4); the bounds after the
    step replay from each model's count stream through noised_gram, and differ from the un-noised bounds."""
    from fairdp_core.rules.policy import noised_gram

    rng = np.random.default_rng(2)
    n, d, M, B, C0, seed, K = 200, 4, 2, 40, 0.05, 5, 3
    X = rng.normal(size=(n, d)).astype(np.float32)
    y, g = rng.integers(0, 2, n), rng.integers(0, K, n)
    mem = rng.random((M, n)) < 0.8
    captured = []
    original = GroupMeanRatioClip.observe_gram
    monkeypatch.setattr(GroupMeanRatioClip, "observe_gram", lambda self, gram, gr, w, dim: (
        captured.append((gram.clone(), dim)), original(self, gram, gr, w, dim=dim)))
    spec = TrainSpec(algorithm="dpsgd_s_paper", model="mlp", hidden=6, epochs=B / n * 0.8, batch_size=B, lr=0.3,
                     clip=C0, noise_multiplier=1.0, sigma_b=10.0)
    bank = train_bank(X, y, g, mem, spec, n_classes=2, n_groups=K, seed=seed, progress=False)
    assert bank.steps == 1 and len(captured) == 1
    gram, dim = captured[0]
    gens = model_generators(seed, M)
    mods = [_init_module(build_model("mlp", (d,), 2, hidden=6), gg["init"]) for gg in gens]
    assert dim == sum(p.numel() for p in mods[0].parameters())
    pools = [torch.as_tensor(np.flatnonzero(r)) for r in mem]
    idx, w = PoissonBank(pools, [B / len(p) for p in pools], [gg["sample"] for gg in gens]).next()
    for m in range(M):
        S = torch.zeros(K, dim, dtype=torch.float64)
        for i in idx[m][w[m] > 0].tolist():
            mods[m].zero_grad()
            nn.functional.cross_entropy(mods[m](torch.as_tensor(X[i:i + 1])), torch.as_tensor(y[i:i + 1]),
                                        reduction="sum").backward()
            gi = torch.cat([p.grad.flatten() for p in mods[m].parameters()]).double()
            S[g[i]] += min(1.0, C0 / (gi.norm().item() + 1e-6)) * gi
        torch.testing.assert_close(gram[m], S @ S.T, rtol=1e-4, atol=1e-9)
    a = bank.accounting[0]
    gens = model_generators(seed, M, release=release_key(spec))
    rule = GroupMeanRatioClip(M, K, a.sigma_g, clip=C0, ratio_cap=2.0, sigma_s=a.sigma_s, sigma_b=a.sigma_b,
                              c_min=spec.c_min, generators=[gg["count"] for gg in gens])
    counts = torch.stack([torch.bincount(torch.as_tensor(g)[idx[m][w[m] > 0]], minlength=K).float()
                          for m in range(M)])
    noisy = torch.stack([noised_gram(gram[m], dim, a.sigma_s * C0, gg["count"]) for m, gg in enumerate(gens)])
    released = counts + torch.stack([torch.randn(K, generator=gg["count"]) for gg in gens]) * a.sigma_b
    torch.testing.assert_close(bank.policy_state["bounds"], rule.bounds_from_gram(noisy, released))
    assert not torch.allclose(bank.policy_state["bounds"], rule.bounds_from_gram(gram, counts), rtol=1e-3)
