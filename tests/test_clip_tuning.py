"""The private clipping bound: the exponential mechanism's distribution by hand, its DP guarantee on neighbouring
datasets, its accuracy, and the composition of its ε with DP-SGD's."""

from __future__ import annotations

import math

import numpy as np
import pytest
from opacus.accountants import RDPAccountant
from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

from fairdp_core.study import clip_tuning as ct


def test_quantile_probabilities_by_hand():
    """norms 1..4, p = 0.5 (p·n = 2), candidates 1.5 / 2.5 / 3.5: counts below 1, 2, 3, utilities −1, 0, −1; with
    ε_q = 2 the weights are exp(ε_q u / 2) = e^−1, 1, e^−1."""
    pr = ct.quantile_probabilities(np.array([1.0, 2, 3, 4]), 0.5, 2.0, candidates=np.array([1.5, 2.5, 3.5]))
    w = np.array([math.exp(-1), 1.0, math.exp(-1)])
    np.testing.assert_allclose(pr, w / w.sum(), rtol=1e-12)


@pytest.mark.parametrize("eps_q", [0.1, 1.0])
def test_exponential_mechanism_is_eps_q_dp_on_neighbours(eps_q):
    """Adding or removing one record changes no candidate's log-probability by more than ε_q (seed 0, 50 pairs of
    neighbouring datasets of lognormal norms). Drawing ∝ exp(ε_q u) instead of exp(ε_q u / 2) breaks this."""
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(50):
        d = rng.lognormal(0, 1, 200)
        for nb in (d[1:], np.r_[d, rng.lognormal(0, 3)]):
            for p in (0.5, 0.9):
                a, b = (np.log(ct.quantile_probabilities(x, p, eps_q)) for x in (d, nb))
                worst = max(worst, float(np.abs(a - b).max()))
    assert worst <= eps_q + 1e-9, worst
    assert worst > 0.5 * eps_q  # the bound is nearly attained: the test can see a wrong scale


def test_dp_quantile_lands_near_the_quantile():
    """10,000 lognormal norms, ε_q = 0.1, seed 1: 200 releases of the median all lie between the 45th and 55th
    percentile (at this n the mechanism's error is a few ranks out of 10,000, plus the grid's 6% spacing)."""
    rng = np.random.default_rng(1)
    norms = rng.lognormal(0.5, 0.8, 10_000)
    lo, hi = np.quantile(norms, [0.45, 0.55])
    draws = [ct.dp_quantile(norms, 0.5, 0.1, rng=rng) for _ in range(200)]
    assert all(lo <= d <= hi for d in draws), (lo, hi, min(draws), max(draws))


def test_composed_epsilon_adds_the_quantile_rdp():
    """With ε_q = 0 the composed ε is DP-SGD's own (Opacus's RDP accountant); otherwise it is what adding
    min(ε_q, α ε_q² / 2) to each order's RDP gives, computed here independently."""
    q, T, sigma, delta = 0.01, 500, 0.9, 1e-5
    acc = RDPAccountant()
    acc.history = [(sigma, q, T)]
    assert ct.composed_epsilon(sigma, sample_rate=q, steps=T, delta=delta, epsilon_q=0.0) <= acc.get_epsilon(delta)
    assert ct.composed_epsilon(sigma, sample_rate=q, steps=T, delta=delta, epsilon_q=0.0) == pytest.approx(
        acc.get_epsilon(delta), rel=0.02)
    orders = ct._ORDERS
    rdp = np.asarray(compute_rdp(q=q, noise_multiplier=sigma, steps=T, orders=orders)) + np.array(
        [min(0.5, a * 0.5 ** 2 / 2) for a in orders])
    want, _ = get_privacy_spent(orders=orders, rdp=rdp, delta=delta)
    got = ct.composed_epsilon(sigma, sample_rate=q, steps=T, delta=delta, epsilon_q=0.5)
    assert got == pytest.approx(want, rel=1e-12)
    assert got > ct.composed_epsilon(sigma, sample_rate=q, steps=T, delta=delta, epsilon_q=0.0)


def test_calibrated_sigma_keeps_the_total_at_the_target():
    kw = {"sample_rate": 0.0085, "steps": 589, "delta": 1e-5, "epsilon_q": 0.1}
    s = ct.calibrate_sigma_with_quantile(1.0, **kw)
    assert ct.composed_epsilon(s, **kw) <= 1.0
    assert ct.composed_epsilon(s * 0.995, **kw) > 1.0
    with pytest.raises(ValueError, match="leaves nothing"):
        ct.calibrate_sigma_with_quantile(0.1, **kw)


def test_tune_clip_reports_both_and_marks_the_nonprivate_one():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(2000, 6)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    r = ct.tune_clip(X, y, n_classes=2, quantile=0.75, epsilon_q=0.5, target_epsilon=3.0, sample_rate=0.05,
                     steps=100)
    assert r["clip"] in ct.CANDIDATES and r["n"] == 2000
    assert abs(math.log(r["clip"] / r["nonprivate_percentile"]["value"])) < 0.2
    assert "outside ε" in r["nonprivate_percentile"]["note"]
    assert r["epsilon_total"] <= 3.0 and r["epsilon_training_alone"] < r["epsilon_total"]
