"""DPDSyn (issue 14): the DP step's noise scale, ε against the accountant, the generator as post-processing of the
releases, the released table's schema, and task-oriented beating random on a toy task. Fast (seconds), seeded."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from fairdp_core.synth.dpdsyn import (
    DPDSynSpec,
    calibrate_dpdsyn,
    dpdsyn_epsilon,
    noisy_label_marginal,
    private_gradient,
    sample_table,
    train_dpdsyn,
)
from fairdp_core.synth.evaluate import fidelity, fit_classifier, predict_proba
from fairdp_core.synth.layout import Layout

torch.set_num_threads(1)

NAMES = ("a", "b", "c=x", "c=y", "c=z", "d=p", "d=q")
SCHEMA = {"numeric": {"a": {}, "b": {}}, "categorical": {"c": ["x", "y", "z"], "d": ["p", "q"]}}


def toy(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A toy task in the layout NAMES: y depends on the numeric a and on the category of c."""
    rng = np.random.default_rng(seed)
    X = np.zeros((n, len(NAMES)), np.float32)
    X[:, 0] = rng.uniform(-1, 1, n)
    X[:, 1] = rng.uniform(-1, 1, n)
    c = rng.integers(0, 3, n)
    X[np.arange(n), 2 + c] = 1
    X[np.arange(n), 5 + rng.integers(0, 2, n)] = 1
    logit = 6.0 * X[:, 0] + 4.0 * (c == 2) - 2.0
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    return X, y


def _noise_std(sigma: float, *, scale: float = 1.0, seed: int = 0) -> tuple[float, int]:
    """Release an empty batch (only noise) of P = 20,000 coordinates; estimate the noise std in units of C/B."""
    clip, B = 2.0, 64
    gen = torch.Generator().manual_seed(seed)
    out = private_gradient(torch.zeros(0, 10_000), torch.zeros(0, dtype=torch.long), n_classes=2, clip=clip,
                           sigma=sigma * scale, batch_size=B, generator=gen)
    z = (out * B / clip).double().flatten()
    return float(z.std()), z.numel()


def test_private_gradient_noise_has_the_stated_scale():
    """Seed 0, P = 20,000 noise coordinates: the sample std of (release · B / C) is σ within 3 standard errors of
    a normal sample std (σ/√(2P)), and a chi-square test of var = σ² keeps p > 0.001."""
    sigma = 1.7
    s, P = _noise_std(sigma)
    assert abs(s - sigma) < 3 * sigma / math.sqrt(2 * P)
    chi2 = (P - 1) * s ** 2 / sigma ** 2
    p = 2 * min(stats.chi2.cdf(chi2, P - 1), stats.chi2.sf(chi2, P - 1))
    assert p > 1e-3


@pytest.mark.parametrize("scale", [2 / 3, 0.5, 1.5])
def test_noise_scale_test_rejects_a_wrong_scale(scale):
    """The same check rejects noise whose scale is off by ×2/3, ×1/2 or ×1.5 (the test can fail)."""
    sigma = 1.7
    s, P = _noise_std(sigma, scale=scale)
    assert abs(s - sigma) > 3 * sigma / math.sqrt(2 * P)


def test_private_gradient_clips_each_sample_and_divides_by_expected_batch():
    """With σ = 0: two samples of norm 10 and 0.5 in class 1, clip 1, B = 4 → row 1 = (unit + small) / 4."""
    g = torch.tensor([[10.0, 0.0], [0.0, 0.5]])
    out = private_gradient(g, torch.tensor([1, 1]), n_classes=2, clip=1.0, sigma=0.0, batch_size=4,
                           generator=torch.Generator().manual_seed(0))
    assert torch.allclose(out, torch.tensor([[0.0, 0.0], [0.25, 0.125]]))


def test_epsilon_is_the_accountants_composition():
    """ε reported by training equals an independent Opacus RDP accountant's for the history [(σ, q, T),
    (σ_c, 1, 1)], and calibration meets the target without overshooting (within 2%)."""
    from opacus.accountants import RDPAccountant

    X, y = toy(1000, 0)
    spec = DPDSynSpec(epochs=1, batch_size=100, target_epsilon=2.0, label_sigma_ratio=20.0, synth_batch=32,
                      reinit_every=5)
    res = train_dpdsyn(X, y, Layout.from_names(NAMES, SCHEMA), spec, n_classes=2, seed=3)
    a = res.accounting
    acc = RDPAccountant()
    acc.history = [(a["sigma"], 0.1, 10), (20.0 * a["sigma"], 1.0, 1)]
    assert a["steps"] == 10 and a["sample_rate"] == pytest.approx(0.1)
    assert a["sigma_label"] == pytest.approx(20.0 * a["sigma"])
    assert a["epsilon"] == pytest.approx(acc.get_epsilon(delta=1e-5), rel=1e-9)
    assert 1.96 <= a["epsilon"] <= 2.0
    # the label release is really composed: without it ε would be smaller at the same σ
    alone = RDPAccountant()
    alone.history = [(a["sigma"], 0.1, 10)]
    assert alone.get_epsilon(delta=1e-5) < a["epsilon"]


def test_epsilon_edge_cases():
    assert dpdsyn_epsilon(0.0, sample_rate=0.1, steps=10, delta=1e-5, label_sigma_ratio=20) == math.inf
    s = calibrate_dpdsyn(1.0, sample_rate=0.01, steps=100, delta=1e-5, label_sigma_ratio=20)
    assert dpdsyn_epsilon(s, sample_rate=0.01, steps=100, delta=1e-5, label_sigma_ratio=20) <= 1.0


def test_label_marginal_noise_and_floor():
    rng = np.random.default_rng(0)
    y = np.array([0] * 900 + [1] * 100)
    p = noisy_label_marginal(y, 2, sigma_c=0.0, floor=1.0, rng=rng)
    assert np.allclose(p, [0.9, 0.1])
    draws = np.array([noisy_label_marginal(y, 2, sigma_c=50.0, floor=1.0, rng=rng)[1] * 1000 for _ in range(400)])
    assert 80 < draws.mean() < 120 and 30 < draws.std() < 70  # ≈ N(100, 50²) counts (renormalised)


def test_generator_is_post_processing_of_the_releases():
    """Two different private datasets of the same size whose two releases are replaced by the same recorded
    values give bit-identical generators: G sees the private data only through the releases."""
    X1, y1 = toy(400, 1)
    X2, y2 = toy(400, 2)
    lay = Layout.from_names(NAMES, SCHEMA)
    spec = DPDSynSpec(epochs=1, batch_size=50, target_epsilon=5.0, synth_batch=32, reinit_every=3)
    recorded = []
    r1 = train_dpdsyn(X1, y1, lay, spec, n_classes=2, seed=5, on_release=lambda t, g: recorded.append(g.clone()))
    labels = r1.label_probs

    it = iter(recorded)

    def replay(per_sample, labels_, **kw):
        return next(it)

    r2 = train_dpdsyn(X2, y2, lay, spec, n_classes=2, seed=5, release=replay,
                      label_release=lambda *a, **k: labels)
    for (k, p1), p2 in zip(r1.generator.state_dict().items(), r2.generator.state_dict().values()):
        assert torch.equal(p1, p2), k
    # and the releases did depend on the data (the replay is not vacuous)
    r3 = train_dpdsyn(X2, y2, lay, spec, n_classes=2, seed=5)
    assert not torch.equal(r1.generator.net[0].weight, r3.generator.net[0].weight)


def test_training_releases_at_the_calibrated_sigma_and_clip():
    """Every step's release is called with the σ the accountant was charged and the spec's C and B."""
    X, y = toy(400, 0)
    seen = []

    def spy(per_sample, labels, **kw):
        seen.append(kw)
        return private_gradient(per_sample, labels, **kw)

    spec = DPDSynSpec(epochs=1, batch_size=50, clip=0.7, target_epsilon=3.0, synth_batch=16)
    res = train_dpdsyn(X, y, Layout.from_names(NAMES, SCHEMA), spec, n_classes=2, seed=0, release=spy)
    assert len(seen) == res.accounting["steps"] == 8
    assert all(k["sigma"] == res.accounting["sigma"] > 0 and k["clip"] == 0.7 and k["batch_size"] == 50
               for k in seen)


def test_synthetic_table_has_the_prepared_schema():
    X, y = toy(500, 0)
    lay = Layout.from_names(NAMES, SCHEMA)
    res = train_dpdsyn(X, y, lay, DPDSynSpec(epochs=1, batch_size=50, target_epsilon=1.0, synth_batch=32),
                       n_classes=2, seed=0)
    Xs, ys = sample_table(res, 300, seed=1)
    assert Xs.shape == (300, len(NAMES)) and Xs.dtype == np.float32 and ys.dtype == np.int64
    assert lay.feature_names == NAMES
    num = Xs[:, list(lay.numeric)]
    assert (num >= -1).all() and (num <= 1).all()
    for _, s, e in lay.blocks:
        blk = Xs[:, s:e]
        assert np.array_equal(blk.sum(1), np.ones(300, np.float32)) and set(np.unique(blk)) <= {0.0, 1.0}
    assert set(np.unique(ys)) <= {0, 1}
    f = fidelity(X, y, Xs, ys, lay)
    assert 0 <= f["tv_1way"] <= 1 and 0 <= f["tv_2way"] <= 1 and f["corr_gap"] >= 0


def test_layout_from_prepared_adult_schema():
    from pathlib import Path

    from fairdp_core.data.base import load

    d = Path(__file__).resolve().parents[1] / "data/prepared/adult"
    if not (d / "meta.json").is_file():
        pytest.skip("data/prepared/adult not prepared")
    data = load(d)
    lay = Layout.from_data(data)
    assert lay.d == len(data.feature_names) and len(lay.numeric) == 6
    assert [b[0] for b in lay.blocks][:2] == ["workclass", "education"]
    assert sum(e - s for _, s, e in lay.blocks) + len(lay.numeric) == lay.d


def test_fidelity_is_zero_on_identical_tables_and_positive_otherwise():
    X, y = toy(500, 0)
    lay = Layout.from_names(NAMES, SCHEMA)
    f = fidelity(X, y, X, y, lay)
    assert f["tv_1way"] == 0 and f["tv_2way"] == 0 and f["corr_gap"] == 0
    Xr = X.copy()
    Xr[:, 0] = 0.95  # one column collapsed into one bin: its TV is 0.9
    f = fidelity(X, y, Xr, y, lay)
    assert f["tv_1way"] == pytest.approx(np.mean([0.9, 0, 0, 0, 0]), abs=0.03) and f["corr_gap"] > 0


def test_task_oriented_generator_beats_a_random_generator():
    """Toy task, seeds fixed: on real held-out data, the classifier trained on DPDSyn's table (ε = 10) beats those
    trained on untrained (random) generators' tables (mean of 3 seeds, the same released label marginal) by at
    least 5 points and closes at least half of their gap to the classifier trained on the real data."""
    X, y = toy(3000, 0)
    Xt, yt = toy(2000, 1)
    lay = Layout.from_names(NAMES, SCHEMA)
    spec = DPDSynSpec(epochs=4, batch_size=100, target_epsilon=10.0, synth_batch=128, reinit_every=20, lr_g=3e-3)
    trained = train_dpdsyn(X, y, lay, spec, n_classes=2, seed=0)
    untrained = [train_dpdsyn(X, y, lay, DPDSynSpec(epochs=1e-9, batch_size=100, target_epsilon=10.0),
                              n_classes=2, seed=s) for s in range(3)]

    def acc(res):
        Xs, ys = sample_table(res, 3000, seed=2)
        clf = fit_classifier(Xs, ys, n_classes=2, epochs=5, lr=0.5, seed=0)
        return float(np.mean(predict_proba(clf, Xt).argmax(1) == yt))

    a_trained, a_random = acc(trained), float(np.mean([acc(u) for u in untrained]))
    clf = fit_classifier(X, y, n_classes=2, epochs=5, lr=0.5, seed=0)
    a_real = float(np.mean(predict_proba(clf, Xt).argmax(1) == yt))
    assert a_trained >= a_random + 0.05, (a_trained, a_random, a_real)
    assert a_trained - a_random >= 0.5 * (a_real - a_random), (a_trained, a_random, a_real)
    assert a_trained <= a_real + 0.02


def test_unknown_synth_key_fails_naming_key_and_file(tmp_path):
    """params.yaml's synth section is strict: a typo stops the run naming the key path and the file."""
    import shutil
    from pathlib import Path

    from fairdp_core.config import ConfigError, load_params

    root = Path(__file__).resolve().parents[1]
    shutil.copy(root / "runs.yaml", tmp_path / "runs.yaml")
    text = (root / "params.yaml").read_text().replace("  n_synth: 10000", "  n_synht: 10000", 1)
    (tmp_path / "params.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"params.yaml: synth.n_synht: unknown key"):
        load_params(tmp_path / "params.yaml")
