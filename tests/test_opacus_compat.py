"""Agreement with Opacus: one DP-SGD step, DP-SGD-S and the paper's rule made DP through PrivacyEngine, and accuracy on
real Adult data."""

from __future__ import annotations

import copy
import shutil

import numpy as np
import pytest
import torch
import yaml
from opacus import GradSampleModule, PrivacyEngine
from opacus.optimizers import DPOptimizer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fairdp_core.engine import TrainSpec, clip_factors, epsilon, make_backend, stack_params, train_bank
from fairdp_core.engine.accounting import combine_sigmas
from fairdp_core.models import build_model
from fairdp_core.opacus_compat import DPSGDSOptimizer, DPSGDSPaperOptimizer, make_private_dpsgd_s, make_private_dpsgd_s_paper


def _opacus_step(module, x, y, *, sigma, C, B, generator=None):
    gsm = GradSampleModule(module)
    opt = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=1.0), noise_multiplier=sigma, max_grad_norm=C,
                      expected_batch_size=B, generator=generator)
    opt.zero_grad()
    nn.functional.cross_entropy(gsm(x), y).backward()
    opt.pre_step()
    return {n.removeprefix("_module."): p.grad.detach().clone() for n, p in gsm.named_parameters()}, opt


@pytest.mark.parametrize("model", ["lr", "mlp", "cnn"])
def test_one_dpsgd_step_equals_opacus_without_noise(model):
    torch.manual_seed(0)
    shape = (1, 28, 28) if model == "cnn" else (12,)
    mod = build_model(model, shape, 3, hidden=16)
    B, C = 32, 0.05  # a small C so that clipping is active for most samples
    x, y = torch.randn(B - 3, *shape), torch.randint(0, 3, (B - 3,))  # realised batch != expected B
    params = stack_params([mod])
    be = make_backend(mod)
    norms, ctx = be.per_sample(params, x[None], y[None])
    assert (norms > C).float().mean() > 0.5
    ours = be.clipped_sum(ctx, clip_factors(norms, torch.zeros_like(y)[None], torch.tensor([[C]])))
    theirs, _ = _opacus_step(mod, x, y, sigma=0.0, C=C, B=B)
    for n in theirs:  # Opacus' p.grad = clipped sum / expected batch size
        torch.testing.assert_close(ours[n][0] / B, theirs[n], atol=1e-6, rtol=1e-4)


def test_opacus_and_engine_noise_have_the_same_scale():
    """Noise cannot be shared between the two, so compare its std: both must be σ·C (seeded, 0.5%)."""
    torch.manual_seed(1)
    mod = build_model("mlp", (784,), 10, hidden=256)  # 203k parameters
    x, y = torch.randn(8, 784), torch.randint(0, 10, (8,))
    sigma, C, B = 1.7, 0.8, 8
    clean, _ = _opacus_step(_copy(mod), x, y, sigma=0.0, C=C, B=B)
    noisy, _ = _opacus_step(_copy(mod), x, y, sigma=sigma, C=C, B=B, generator=torch.Generator().manual_seed(3))
    diff = torch.cat([(noisy[n] - clean[n]).flatten() * B for n in clean])
    assert abs(diff.double().std().item() / (sigma * C) - 1) < 0.005
    # the engine's noise for the same σ, C (FixedClip.noise_std) is tested at 0.5% in test_engine.py
    from fairdp_core.engine import FixedClip

    assert FixedClip(1, 1, sigma, clip=C).noise_std().item() == pytest.approx(sigma * C)


def _copy(mod):
    return copy.deepcopy(mod)


def _loader(X, y, g, B, seed):
    ds = TensorDataset(torch.as_tensor(X), torch.as_tensor(y), torch.as_tensor(g))
    return DataLoader(ds, batch_size=B, generator=torch.Generator().manual_seed(seed))


def _minority_data(n: int = 2000, d: int = 6):
    """X [n, d], labels y and groups g (a minority group 1, about 20%) that a small model learns to above 0.8."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d)).astype(np.float32)
    g = (rng.random(n) < 0.2).astype(np.int64)
    w = rng.normal(size=d)
    y = ((X @ w + 2.0 * g + 0.3 * rng.normal(size=n)) > 0).astype(np.int64)
    return X, y, g


def test_dpsgd_s_optimizer_through_privacy_engine(tmp_path):
    X, y, g = _minority_data()
    n, d = X.shape
    torch.manual_seed(0)
    model = build_model("mlp", (d,), 2, hidden=16)
    engine = PrivacyEngine(accountant="rdp")
    sigma_eff, sigma_b, B = 1.1, 5.0, 100
    model, opt, loader = make_private_dpsgd_s(
        engine, module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        data_loader=_loader(X, y, g, B, 0), noise_multiplier=sigma_eff, sigma_b=sigma_b,
        n_groups=2, tau=1.0, gamma=0.75, eta_q=0.3, q_init=5.0,
        generator=torch.Generator().manual_seed(1))
    assert isinstance(opt, DPSGDSOptimizer)
    assert opt.grad_noise_multiplier == pytest.approx((sigma_eff ** -2 - sigma_b ** -2) ** -0.5)
    assert combine_sigmas(opt.grad_noise_multiplier, sigma_b) == pytest.approx(sigma_eff)
    steps = 0
    for _ in range(3):
        for xb, yb, gb in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.set_groups(gb)
            opt.step()
            steps += 1
    q = 1 / len(loader)
    assert engine.accountant.history[-1][0] == pytest.approx(sigma_eff)  # charged σ_eff, counts included
    assert engine.get_epsilon(1e-5) == pytest.approx(epsilon(sigma_eff, sample_rate=q, steps=steps, delta=1e-5))
    assert opt.Q.max() < 5.0  # quantiles were tracked down from the initial 5.0
    with torch.no_grad():
        acc = (model(torch.as_tensor(X)).argmax(1).numpy() == y).mean()
    assert acc > 0.8
    with pytest.raises(RuntimeError, match="set_groups"):
        opt.zero_grad()
        nn.functional.cross_entropy(model(torch.as_tensor(X[:10])), torch.as_tensor(y[:10])).backward()
        opt.step()


def test_dpsgd_s_optimizer_clips_per_group_like_the_engine():
    torch.manual_seed(2)
    mod = build_model("lr", (5,), 2)
    x, y = torch.randn(20, 5) * 3, torch.randint(0, 2, (20,))
    grp = torch.randint(0, 2, (20,))
    gsm = GradSampleModule(_copy(mod))
    opt = DPSGDSOptimizer(torch.optim.SGD(gsm.parameters(), lr=1.0), noise_multiplier=0.5, sigma_b=1e9,
                          n_groups=2, expected_batch_size=20)
    opt.Q = torch.tensor([0.3, 1.5])
    opt.grad_noise_multiplier = 0.0  # isolate the clipping
    opt.zero_grad()
    nn.functional.cross_entropy(gsm(x), y).backward()
    opt.set_groups(grp)
    opt.pre_step()
    got = {n.removeprefix("_module."): p.grad for n, p in gsm.named_parameters()}
    be = make_backend(mod)
    norms, ctx = be.per_sample(stack_params([mod]), x[None], y[None])
    want = be.clipped_sum(ctx, clip_factors(norms, grp[None], torch.tensor([[0.3, 1.5]])))
    for n in got:
        torch.testing.assert_close(got[n], want[n][0] / 20, atol=1e-6, rtol=1e-4)


def _paper_batch(seed=3, n=40, d=5):
    torch.manual_seed(seed)
    mod = build_model("lr", (d,), 2)
    x, y = torch.randn(n, d) * 3, torch.randint(0, 2, (n,))
    grp = (torch.arange(n) % 4 == 0).long() * 2 + (torch.arange(n) % 7 == 0).long()  # 3 groups of unequal sizes
    return mod, x, y, grp.clamp(max=2)


def _paper_step(opt, gsm, batches):
    """One logical step of ``opt`` over physical ``batches`` [(x, y, groups)] (virtual steps between them, as
    Opacus's BatchMemoryManager takes them: zero_grad keeps a skipped step's clipped sum)."""
    for i, (x, y, grp) in enumerate(batches):
        opt.zero_grad()
        nn.functional.cross_entropy(gsm(x), y).backward()
        opt.set_groups(grp)
        if i < len(batches) - 1:
            opt.signal_skip_step(do_skip=True)
        opt.step()


def test_paper_rule_optimizer_releases_the_engines_sums_and_sets_its_bounds(monkeypatch):
    """With the release's noise switched off: the released sums are the engine backend's per-group sums of the
    gradients clipped at C0 (not at the group bounds), the counts are the group sizes, the bounds of the next step
    are the engine rule's from them, and the step clips each group at the bound set before it, as the engine does. The sums and counts of two virtual steps add up to those of their one logical batch."""
    from fairdp_core.opacus_compat import DPSGDSPaperOptimizer, dpsgd_s_paper
    from fairdp_core.rules.dpsgd_s_paper import GroupMeanRatioClip

    zero = lambda std, reference, generator, secure_mode: torch.zeros_like(reference)  # noqa: E731
    monkeypatch.setattr(dpsgd_s_paper, "_generate_noise", zero)
    mod, x, y, grp = _paper_batch()
    n, K, C0 = len(y), 3, 0.8
    be = make_backend(mod)
    norms, ctx = be.per_sample(stack_params([mod]), x[None], y[None])
    rule = GroupMeanRatioClip(1, K, 1.0, clip=C0, ratio_cap=2.0, sigma_s=10.0, sigma_b=10.0, c_min=0.01,
                              generators=[None])
    want_sums = be.group_sums(ctx, rule.sum_factors(norms), grp[None], K)
    want_flat = torch.cat([want_sums[n_].flatten(2) for n_ in ("fc.weight", "fc.bias")], 2)[0]
    want_counts = torch.bincount(grp, minlength=K).float()
    want_bounds = rule.bounds_from_release(want_flat[None], want_counts[None])[0]
    assert not torch.allclose(want_bounds, torch.full((K,), C0))  # the check can tell the bounds moved
    set_before = torch.tensor([[0.3, 1.5, 0.8]])  # other than C0, and another order than want_bounds
    for split in ([slice(0, n)], [slice(0, 17), slice(17, n)]):
        gsm = GradSampleModule(_copy(mod))
        opt = DPSGDSPaperOptimizer(torch.optim.SGD(gsm.parameters(), lr=1.0), noise_multiplier=1.0, n_groups=K,
                                   expected_batch_size=n, clip=C0, sigma_s=10.0, sigma_b=10.0)
        opt.grad_noise_multiplier = 0.0  # isolate the clipping
        opt._rule._b = set_before.clone()  # as a previous step's release would have set them
        before = {k: v.detach().clone() for k, v in gsm.named_parameters()}
        _paper_step(opt, gsm, [(x[s], y[s], grp[s]) for s in split])
        torch.testing.assert_close(opt.released_sums, want_flat, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(opt.released_counts, want_counts)
        torch.testing.assert_close(opt.bounds, want_bounds, atol=1e-6, rtol=1e-5)
        step = {k.removeprefix("_module."): before[k] - p.detach() for k, p in gsm.named_parameters()}
        clipped = be.clipped_sum(ctx, clip_factors(norms, grp[None], set_before))
        for k in step:
            torch.testing.assert_close(step[k], clipped[k][0] / n, atol=1e-6, rtol=1e-4)


def test_paper_rule_optimizer_gradient_noise_is_at_the_largest_bound_set_before_the_step(monkeypatch):
    """The gradient's noise: N(0, (σ_g · max_k C_k)²) with the bounds set BEFORE the step (here [0.3, 1.5, 0.8], so
    1.5; the release then sets bounds of at most s·C0 = 0.2, which noise drawn after it would use), over all
    ~4,600 coordinates of one step, within 6% (seeded); the release's own noise off."""
    from fairdp_core.opacus_compat import dpsgd_s_paper

    monkeypatch.setattr(dpsgd_s_paper, "_generate_noise", lambda std, reference, generator, secure_mode:
                        torch.zeros_like(reference))
    torch.manual_seed(4)
    mod = build_model("mlp", (20,), 2, hidden=200)
    x, y = torch.randn(64, 20), torch.randint(0, 2, (64,))
    grp = torch.arange(64) % 3
    steps = {}
    for sigma in (None, 0.0):
        gsm = GradSampleModule(_copy(mod))
        opt = DPSGDSPaperOptimizer(torch.optim.SGD(gsm.parameters(), lr=1.0), noise_multiplier=1.0, n_groups=3,
                                   expected_batch_size=64, clip=0.1, sigma_s=10.0, sigma_b=10.0,
                                   generator=torch.Generator().manual_seed(5))
        sigma_g = opt.grad_noise_multiplier
        if sigma is not None:
            opt.grad_noise_multiplier = sigma
        opt._rule._b = torch.tensor([[0.3, 1.5, 0.8]])
        opt.zero_grad()
        nn.functional.cross_entropy(gsm(x), y).backward()
        opt.set_groups(grp)
        opt.step()
        steps[sigma] = torch.cat([p.grad.flatten() for p in opt.params]) * 64  # the sum, before Opacus's mean
        assert opt.bounds.max() <= 0.2 + 1e-6
    noise = steps[None] - steps[0.0]
    assert noise.numel() > 4000
    assert noise.std().item() == pytest.approx(sigma_g * 1.5, rel=0.06)


def test_paper_rule_optimizer_refuses_bad_labels_and_takes_float64_models():
    """set_groups takes integer labels in 0..K-1 only (one line, before the step: -1 would be read as group K-1 and
    a float would be truncated); a float64 model steps (its counts are kept in float32)."""
    mod, x, y, grp = _paper_batch()
    gsm = GradSampleModule(_copy(mod).double())
    opt = DPSGDSPaperOptimizer(torch.optim.SGD(gsm.parameters(), lr=1.0), noise_multiplier=1.0, n_groups=3,
                               expected_batch_size=len(y), clip=0.8)
    for bad, match in ((grp - 1, r"must lie in 0\.\.2, got -1\.\.1"), (grp + 1, r"0\.\.2, got 1\.\.3"),
                       (grp.float(), "integer group labels")):
        with pytest.raises(ValueError, match=match):
            opt.set_groups(bad)
    opt.zero_grad()
    nn.functional.cross_entropy(gsm(x.double()), y).backward()
    opt.set_groups(grp)
    opt.step()
    assert opt.released_counts.sum().item() == pytest.approx(len(y), abs=15)  # σ_b = B/20 = 2 per count


def test_paper_rule_optimizer_noise_scales_and_accounting(tmp_path):
    """Through PrivacyEngine: σ_g from σ_eff, σ_s and σ_b (the engine's defaults √10·σ_eff and B/20 where unset);
    the accountant charged σ_eff; the released sums' noise has sd σ_s·C0 and the counts' σ_b (seeded, within 3 and
    25 % over 2·P·60 and 120 draws: a sums' scale without C0 misses); the next step's bounds are the engine rule's
    from the release alone; the model still learns."""
    from fairdp_core.rules.dpsgd_s_paper import GroupMeanRatioClip

    X, y, g = _minority_data()
    n, d = X.shape
    torch.manual_seed(0)
    model = build_model("mlp", (d,), 2, hidden=256)
    engine = PrivacyEngine(accountant="rdp")
    sigma_eff, B, C0 = 0.9, 100, 0.7
    model, opt, loader = make_private_dpsgd_s_paper(
        engine, module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5), data_loader=_loader(X, y, g, B, 0),
        noise_multiplier=sigma_eff, n_groups=2, clip=C0, generator=torch.Generator().manual_seed(1))
    assert isinstance(opt, DPSGDSPaperOptimizer)
    assert (opt.sigma_s, opt.sigma_b) == (pytest.approx(10 ** 0.5 * sigma_eff), pytest.approx(B / 20))
    assert combine_sigmas(opt.grad_noise_multiplier, opt.sigma_s, opt.sigma_b) == pytest.approx(sigma_eff)
    ref = GroupMeanRatioClip(1, 2, 1.0, clip=C0, ratio_cap=2.0, sigma_s=opt.sigma_s, sigma_b=opt.sigma_b, c_min=0.01,
                             generators=[None])
    steps, sums_noise, counts_noise = 0, [], []
    for _ in range(3):
        for xb, yb, gb in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.set_groups(gb)
            gs = torch.cat([p.grad_sample.reshape(len(xb), -1) for p in opt.params], 1)
            f0 = torch.clamp(C0 / (gs.norm(dim=1) + 1e-6), max=1.0)
            exact = torch.stack([(gs * (f0 * (gb == k))[:, None]).sum(0) for k in range(2)])
            opt.step()
            # the next step's bounds from the release alone
            torch.testing.assert_close(opt.bounds, ref.bounds_from_release(opt.released_sums[None],
                                                                           opt.released_counts[None])[0])
            sums_noise.append((opt.released_sums - exact).flatten())
            counts_noise.append(opt.released_counts - torch.bincount(gb, minlength=2))
            steps += 1
    q = 1 / len(loader)
    assert engine.accountant.history[-1][0] == pytest.approx(sigma_eff)
    assert engine.get_epsilon(1e-5) == pytest.approx(epsilon(sigma_eff, sample_rate=q, steps=steps, delta=1e-5))
    assert torch.cat(sums_noise).std().item() == pytest.approx(opt.sigma_s * C0, rel=0.03)
    assert torch.cat(counts_noise).std().item() == pytest.approx(opt.sigma_b, rel=0.25)
    with torch.no_grad():
        acc = (model(torch.as_tensor(X)).argmax(1).numpy() == y).mean()
    assert acc > 0.8
    with pytest.raises(RuntimeError, match="set_groups"):
        opt.zero_grad()
        nn.functional.cross_entropy(model(torch.as_tensor(X[:10])), torch.as_tensor(y[:10])).backward()
        opt.step()


@pytest.mark.slow
def test_dpsgd_eps10_on_adult_matches_opacus_accuracy(tmp_path):
    """Real Adult, LR, ε = 10, δ = 1e-5, B = 256, 2 epochs, C = 1, η = 1: Opacus (one model, hooks, Poisson
    DataLoader) and the engine (4 models on the same full training set) reach the same test accuracy."""
    from fairdp_core.config import load_params
    from fairdp_core.data import load_dataset, sources_from_params

    from .conftest import ROOT, mirror_dir

    base = yaml.safe_load((ROOT / "params.yaml").read_text())
    base["data"]["mirror"] = str(mirror_dir())
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(base))
    shutil.copy(ROOT / "runs.yaml", tmp_path / "runs.yaml")
    params = load_params(tmp_path / "params.yaml")
    d = load_dataset("adult", params.data.datasets["adult"], sources_from_params(params), seed=params.seed)
    n, B, epochs, lr = len(d.train), 256, 2, 1.0
    spec = TrainSpec(algorithm="dpsgd", model="lr", epochs=epochs, batch_size=B, lr=lr, clip=1.0,
                     target_epsilon=10.0, delta=1e-5)
    bank = train_bank(d.train.X, d.train.y, d.train.group, np.ones((4, n), bool), spec, n_classes=2, n_groups=2, seed=5,
                      progress=False)
    ours = bank.accuracy(d.test.X, d.test.y).mean()
    sigma = bank.accounting[0].sigma_g

    torch.manual_seed(0)
    model = build_model("lr", d.input_shape, 2)
    pe = PrivacyEngine(accountant="rdp")
    model, opt, loader = pe.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=lr),
        data_loader=DataLoader(TensorDataset(torch.as_tensor(d.train.X), torch.as_tensor(d.train.y)),
                               batch_size=B), noise_multiplier=sigma, max_grad_norm=1.0)
    for _ in range(epochs):
        for xb, yb in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
    with torch.no_grad():
        theirs = (model(torch.as_tensor(d.test.X)).argmax(1).numpy() == d.test.y).mean()
    print(f"Adult LR DP-SGD eps=10 (sigma={sigma:.3f}): engine {ours:.4f}, Opacus {theirs:.4f}")
    assert bank.accounting[0].epsilon <= 10.0
    assert pe.get_epsilon(1e-5) == pytest.approx(bank.accounting[0].epsilon, rel=0.02)
    assert ours > 0.80 and theirs > 0.80
    assert abs(ours - theirs) < 0.015
