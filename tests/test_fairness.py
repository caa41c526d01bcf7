"""Outcome fairness: the count-based bootstrap metrics equal fairlearn's on the same resamples."""

from __future__ import annotations

import numpy as np
import pytest
from fairlearn.metrics import (
    MetricFrame,
    demographic_parity_difference,
    equal_opportunity_difference,
    equalized_odds_difference,
)
from sklearn.metrics import accuracy_score

from fairdp_core.fairness import bank_fairness, group_count_metrics, outcome_fairness, paired_difference


def _data(seed, n=3000, K=3):
    rng = np.random.default_rng(seed)
    g = rng.integers(0, K, n)
    y = rng.integers(0, 2, n)
    pred = np.where(rng.random(n) < 0.7 + 0.05 * g, y, 1 - y)
    return y, pred, g


def test_count_metrics_equal_fairlearn_resample_by_resample():
    y, pred, g = _data(0)
    rng = np.random.default_rng(1)
    idx = rng.integers(0, len(y), size=(5, len(y)))
    ours = group_count_metrics(y, pred, g, 3, binary=True, idx=idx)
    for b in range(5):
        i = idx[b]
        acc = MetricFrame(metrics=accuracy_score, y_true=y[i], y_pred=pred[i], sensitive_features=g[i]).difference()
        assert ours["accuracy"][b] == pytest.approx(acc)
        assert ours["selection_rate"][b] == pytest.approx(
            demographic_parity_difference(y[i], pred[i], sensitive_features=g[i]))
        assert ours["equalized_odds"][b] == pytest.approx(
            equalized_odds_difference(y[i], pred[i], sensitive_features=g[i]))
        assert ours["equal_opportunity"][b] == pytest.approx(
            equal_opportunity_difference(y[i], pred[i], sensitive_features=g[i]))


def test_outcome_fairness_points_cis_and_multiclass():
    y, pred, g = _data(2)
    names = np.array(["a", "b", "c"])[g]
    f = outcome_fairness(y, pred, names, n_boot=300)
    assert f["demographic_parity_difference"] == pytest.approx(demographic_parity_difference(y, pred, sensitive_features=names))
    assert f["equal_opportunity_difference"] == pytest.approx(
        equal_opportunity_difference(y, pred, sensitive_features=names))
    for k in ("accuracy_parity", "demographic_parity", "equalized_odds", "equal_opportunity"):
        lo, hi = f[f"{k}_ci"]
        point = f[k if k == "accuracy_parity" else f"{k}_difference"]
        assert lo <= point + 0.02 and hi >= point - 0.02 and lo < hi
    # group accuracies 0.70 / 0.75 / 0.80 by construction: accuracy parity ≈ 0.10
    assert f["accuracy_parity"] == pytest.approx(0.10, abs=0.05)
    ym = np.random.default_rng(3).integers(0, 10, 1000)
    fm = outcome_fairness(ym, ym, ym.astype(str), n_boot=50)
    assert fm["accuracy_parity"] == 0.0 and "demographic_parity_difference" not in fm


def test_paired_difference_points_and_sign():
    """b − a equals the difference of the two models' own metrics; a model that is fairer by construction shows a
    negative difference whose interval excludes 0, and a model against itself gives exactly 0."""
    y, pred, g = _data(4, n=6000)
    fair = np.where(np.random.default_rng(5).random(len(y)) < 0.75, y, 1 - y)  # every group 75% correct
    d = paired_difference(y, pred, fair, g, n_boot=300)
    a, b = outcome_fairness(y, pred, g, n_boot=10), outcome_fairness(y, fair, g, n_boot=10)
    assert d["accuracy"][0] == pytest.approx(b["accuracy_parity"] - a["accuracy_parity"])
    assert d["equal_opportunity"][0] == pytest.approx(
        b["equal_opportunity_difference"] - a["equal_opportunity_difference"])
    assert d["accuracy"][2] < 0  # pred's group accuracies span 0.70–0.80; fair's do not
    same = paired_difference(y, pred, pred, g, n_boot=50)
    assert all(v == [0.0, 0.0, 0.0] for v in same.values())


def test_bank_fairness_averages_every_model_not_the_first():
    """A bank whose models differ: the mean is over every model (fairlearn model by model, averaged by hand), the SD
    is the between-model one, and the paired bank difference is the mean of the per-pair differences; a bank's first
    model alone would give another answer. The bootstrap interval holds the mean."""
    y, _, g = _data(6, n=4000)
    rng = np.random.default_rng(7)
    # model j: group 2's records correct with probability 0.6 + 0.05 j, others 0.8: the gap grows with j
    bank = np.stack([np.where(rng.random(len(y)) < np.where(g == 2, 0.6 + 0.05 * j, 0.8), y, 1 - y) for j in range(6)])
    res = bank_fairness(y, bank, g, n_boot=200)
    by_hand = [MetricFrame(metrics=accuracy_score, y_true=y, y_pred=p, sensitive_features=g).difference() for p in bank]
    assert res["accuracy"]["mean"] == pytest.approx(np.mean(by_hand))
    assert res["accuracy"]["sd"] == pytest.approx(np.std(by_hand, ddof=1))
    assert res["accuracy"]["n_models"] == 6
    assert abs(res["accuracy"]["mean"] - by_hand[0]) > 0.05  # the first model is not the bank
    assert res["accuracy"]["lo"] <= res["accuracy"]["mean"] <= res["accuracy"]["hi"]
    fair = np.stack([np.where(rng.random(len(y)) < 0.8, y, 1 - y) for _ in range(6)])
    d = bank_fairness(y, bank, g, fair, n_boot=200)
    pairs = [MetricFrame(metrics=accuracy_score, y_true=y, y_pred=b, sensitive_features=g).difference() - a
             for a, b in zip(by_hand, fair)]
    assert d["accuracy"]["mean"] == pytest.approx(np.mean(pairs))
    assert d["accuracy"]["sd"] == pytest.approx(np.std(pairs, ddof=1))
    assert d["accuracy"]["hi"] < 0  # the fair bank is fairer, and the interval says so
    with pytest.raises(ValueError, match="differ in shape"):
        bank_fairness(y, bank, g, fair[:3])
