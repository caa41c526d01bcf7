"""The engine's Adam option (UTKFace's released config trains with Adam): torch.optim.Adam's update, per model of a
bank, on the same clipped and noised gradient; SGD banks keep their release keys and plans."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fairdp_core.engine import TrainSpec, train_bank
from fairdp_core.engine.spec import KEY_DEFAULTS, release_key
from fairdp_core.engine.trainer import _Adam


def test_adam_matches_torch_optim_adam_per_model():
    """Ten steps on random gradients: each row of the stacked bank moves as its own torch.optim.Adam would."""
    gen = torch.Generator().manual_seed(0)
    M, lr = 3, 0.01
    params = {"w": torch.randn(M, 4, 5, generator=gen), "b": torch.randn(M, 4, generator=gen)}
    ref = [{n: torch.nn.Parameter(p[m].clone()) for n, p in params.items()} for m in range(M)]
    opts = [torch.optim.Adam(list(r.values()), lr=lr, foreach=False) for r in ref]
    ours = _Adam(lr)
    for _ in range(10):
        grads = {n: torch.randn(p.shape, generator=gen) * 7 for n, p in params.items()}  # a summed gradient
        ours.step(params, grads, 1 / 7)
        for m in range(M):
            for n, p in ref[m].items():
                p.grad = grads[n][m] / 7
            opts[m].step()
    for m in range(M):
        for n in params:
            torch.testing.assert_close(params[n][m], ref[m][n].detach(), rtol=1e-6, atol=1e-7)


def _bank(**kw):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 6)).astype(np.float32)
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(np.int64)
    spec = TrainSpec(algorithm="sgd", model="lr", epochs=1, batch_size=600, **kw)  # q = 1: one step, every record
    return train_bank(X, y, np.zeros(600, np.int64), np.ones((2, 600), bool), spec, n_classes=2, n_groups=1,
                      seed=5, progress=False)


def test_one_adam_step_in_the_engine_is_lr_times_the_gradient_sign():
    """After one step from zero moments, Adam's bias-corrected update is -lr·g/(|g| + 1e-8): every coordinate moves
    by lr (without the bias correction it would be lr/√(1-β2)·(1-β1) = 3.16·lr). The SGD-optimizer banks share
    the Adam bank's initial weights and batches (both are drawn from the seed and model alone), so the
    gradient g is read off an SGD step of lr 1, and the initial weights off one of lr 1e-30."""
    eta = 0.05
    start, sgd, adam = (_bank(lr=1e-30), _bank(lr=1.0), _bank(lr=eta, optimizer="adam"))
    assert adam.steps == 1
    for n in start.params:
        g = start.params[n] - sgd.params[n]
        assert (g.abs() > 1e-4).all()
        want = start.params[n] - eta * g / (g.abs() + 1e-8)
        torch.testing.assert_close(adam.params[n], want, rtol=1e-5, atol=1e-6)


def test_dp_adam_bank_spends_the_same_epsilon_and_changes_only_the_update():
    kw = dict(algorithm="dpsgd", model="lr", epochs=2, batch_size=100, lr=0.01, clip=1.0, target_epsilon=3.0)
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(400, 5)).astype(np.float32), rng.integers(0, 2, 400)
    banks = [train_bank(X, y, np.zeros(400, np.int64), np.ones((2, 400), bool), TrainSpec(**kw, optimizer=o),
                        n_classes=2, n_groups=1, seed=3, progress=False) for o in ("sgd", "adam")]
    a, b = (bk.accounting[0] for bk in banks)
    assert (a.sigma_eff, a.sample_rate, a.steps, a.epsilon) == (b.sigma_eff, b.sample_rate, b.steps, b.epsilon)
    assert not torch.equal(banks[0].params["fc.weight"], banks[1].params["fc.weight"])


def test_sgd_release_keys_and_plans_are_unchanged_by_the_option():
    """The option (and the rules' ``settings`` pairs, added later) entered the key only when set: an SGD spec's key
    is the hash of the fields it had before."""
    import hashlib
    import json

    spec = TrainSpec(algorithm="dpsgd", model="lr", target_epsilon=1.0, clip=5.0, epochs=20)
    old = {k: KEY_DEFAULTS[k] if v is None and k in KEY_DEFAULTS else v  # DP-SGD's rule fields: as first stored
           for k, v in dataclasses.asdict(spec).items() if k not in ("optimizer", "settings")}
    blob = json.dumps(old, sort_keys=True, default=str).encode()
    assert release_key(spec) == int.from_bytes(hashlib.sha256(blob).digest()[:8], "big") % (2**63 - 1)
    # golden: the keys of two specs as the code before the option computed them (its commit 352185f)
    assert release_key(spec) == 5161900553481454404
    assert release_key(TrainSpec(algorithm="dpsgd_s_paper", model="cnn", target_epsilon=10.0, clip=10.0, epochs=20,
                                 lr=0.2, ratio_cap=2.0)) == 6301271956524552433
    assert release_key(dataclasses.replace(spec, optimizer="adam")) != release_key(spec)
    with pytest.raises(ValueError, match="optimizer"):
        TrainSpec(algorithm="sgd", optimizer="rmsprop")


def test_plans_name_the_optimizer_only_when_set(tmp_path):
    """An SGD plan (and so every claims summary's plan hash) is what it was; Adam, set for one dataset-model
    (the default grid's COMPAS LR), reaches that one's plans alone."""
    import shutil
    from pathlib import Path

    import yaml

    from fairdp_core.config import load_params
    from fairdp_core.stages.plan import train_plan

    root = Path(__file__).resolve().parents[1]
    shutil.copy(root / "runs.yaml", tmp_path / "runs.yaml")
    raw = yaml.safe_load((root / "params.yaml").read_text())
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    before = load_params(tmp_path / "params.yaml")
    assert not any("optimizer" in train_plan(before, n)["spec"] for n in before.runs)
    raw["train"]["overrides"].setdefault("compas-lr", {})["optimizer"] = "adam"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    after = load_params(tmp_path / "params.yaml")
    changed = {n for n in before.runs if train_plan(before, n) != train_plan(after, n)}
    assert changed == {n for n in before.runs if n.startswith("compas-lr-")} and changed
    assert all(train_plan(after, n)["spec"]["optimizer"] == "adam" for n in changed)


def test_saved_banks_store_the_optimizer_only_when_set(tmp_path):
    """A bank file written before the option existed is byte-identical now (its spec has no optimizer key); an Adam
    bank keeps its optimizer through save and load."""
    from fairdp_core.engine.trainer import TrainedBank

    for optimizer in ("sgd", "adam"):
        bank = _bank(lr=0.01, optimizer=optimizer)
        bank.save(tmp_path / f"{optimizer}.pt")
        stored = torch.load(tmp_path / f"{optimizer}.pt", weights_only=False)["spec"]
        assert ("optimizer" in stored) == (optimizer == "adam")
        assert TrainedBank.load(tmp_path / f"{optimizer}.pt").spec.optimizer == optimizer


def test_adam_gets_the_noised_clipped_sum_over_the_expected_batch_size(monkeypatch):
    """What the engine hands Adam: a DP bank with every record in its one batch (q = 1) and a bound C no gradient
    reaches, so the clipped sum is the plain gradient sum. The scale is 1/B, and grads minus that sum (read off an
    SGD bank of the same initial weights: θ₀ − θ₁ = lr/B · Σ g) is Gaussian noise of std σ·C (50 models × 14
    weights; seeded, 10%). Adam on the clean sum, or the wrong scale, fails."""
    seen = []
    real = _Adam.step

    def spy(self, params, grads, scale):
        if not seen:
            seen.append(({n: g.clone() for n, g in grads.items()}, scale))
        return real(self, params, grads, scale)

    monkeypatch.setattr(_Adam, "step", spy)
    rng = np.random.default_rng(0)
    n, M, C, sigma = 600, 50, 1000.0, 1.0
    X = rng.normal(size=(n, 6)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    mem = np.ones((M, n), bool)

    def bank(**kw):
        spec = TrainSpec(model="lr", epochs=1, batch_size=n, **kw)
        return train_bank(X, y, np.zeros(n, np.int64), mem, spec, n_classes=2, n_groups=1, seed=5, progress=False)

    bank(algorithm="dpsgd", lr=0.01, clip=C, noise_multiplier=sigma, optimizer="adam")
    grads, scale = seen[0]
    assert scale == 1 / n
    start, step = bank(algorithm="sgd", lr=1e-30), bank(algorithm="sgd", lr=1.0)
    noise = torch.cat([(grads[k] - (start.params[k] - step.params[k]) * n).flatten() for k in grads]).double()
    assert abs(noise.std().item() / (sigma * C) - 1) < 0.1 and abs(noise.mean().item()) < 0.1 * sigma * C
