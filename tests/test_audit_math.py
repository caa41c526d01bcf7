"""Attack and statistics math: hand cases, the null bias of the paper's estimator, golden values, coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fairdp_core.audit.attacks import (
    best_cut,
    cross_fit_advantage,
    ga_advantage,
    gba_advantage,
    in_sample_advantage,
    lira_scores,
    logit_confidence,
    null_corrected_advantage,
    record_advantage,
)
from fairdp_core.audit.design import audit_design, looa_design
from fairdp_core.audit.stats import (
    clopper_pearson,
    delta_pp,
    epsilon_lb_from_counts,
    epsilon_lower_bound,
    gpr,
    pair_folds,
    paired_group_difference,
    paired_seed_comparison,
    permutation_pvalue,
    tpr_at_fpr,
)

T, F = True, False


# ------------------------------------------------------------------------------------------ hand cases

def test_best_cut_hand_cases():
    s = np.array([[3.0, 0.0, 1.0], [2.0, 1.0, 1.0], [1.0, 2.0, 0.0], [0.0, 3.0, 0.0]])
    mem = np.array([[T, T, T], [T, T, F], [F, F, T], [F, F, F]])
    adv, thr = best_cut(s, mem)
    assert adv[0] == 1.0 and thr[0] == 2.0  # perfect separation above 2
    assert adv[1] == 0.0 and thr[1] == np.inf  # members score lowest: no "≥ t" rule helps
    # column 2: scores 1 (IN), 1 (OUT), 0 (IN), 0 (OUT): ties are never split, so every cut gives 0
    assert adv[2] == 0.0


def test_cross_fit_hand_case():
    # 4 models = 2 pairs; fold 0 = models 0, 1; fold 1 = models 2, 3. One record.
    s = np.array([[5.0], [1.0], [0.5], [2.0]])
    mem = np.array([[T], [F], [T], [F]])
    # fold 0 picks t = 5 (IN iff ≥ 5); on fold 1: 0.5 < 5 and 2 < 5: TPR 0, FPR 0 -> 0
    # fold 1's best: IN scores 0.5 < OUT 2: no cut helps -> t = inf -> 0 on fold 0
    assert cross_fit_advantage(s, mem)[0] == 0.0
    s2 = np.array([[5.0], [1.0], [6.0], [2.0]])
    # fold 0: t = 5 -> on fold 1: 6 ≥ 5 (TP), 2 < 5 -> 1; fold 1: t = 6 -> on fold 0: 5 < 6 -> 0; mean 0.5
    assert cross_fit_advantage(s2, mem)[0] == 0.5
    with pytest.raises(ValueError, match="two model pairs"):
        cross_fit_advantage(s2[:2], mem[:2])


def test_ga_and_gba_hand_case():
    # 2 models, 4 records; groups: records 0, 1 in group 0 (scores near 10), records 2, 3 in group 1 (near 0).
    s = np.array([[10.0, 9.0, 1.0, 0.0], [9.0, 10.0, 0.0, 1.0]])
    mem = np.array([[T, F, T, F], [F, T, F, T]])
    g = np.array([0, 0, 1, 1])
    # one threshold per model over all records: model 0 -> best accuracy 3/4 at t = 10 (or t = 1 ...)
    ga = ga_advantage(s, mem)
    gba = gba_advantage(s, mem, g)
    assert np.allclose(gba, [1.0, 1.0, 1.0, 1.0])  # per-group thresholds separate perfectly
    assert ga.mean() < gba.mean()


def test_logit_confidence_two_class_is_logit_difference():
    z = np.array([[[2.0, -1.0], [0.5, 0.5]]])
    y = np.array([0, 1])
    np.testing.assert_allclose(logit_confidence(z, y), [[3.0, 0.0]])
    z3 = np.array([[[1.0, 2.0, 3.0]]])
    p = np.exp(z3) / np.exp(z3).sum()
    np.testing.assert_allclose(logit_confidence(z3, np.array([2])), [[math.log(p[0, 0, 2] / (1 - p[0, 0, 2]))]])


def test_lira_online_matches_slow_reference():
    rng = np.random.default_rng(0)
    M, m = 12, 5
    phi = rng.normal(size=(M, m))
    mem = np.zeros((M, m), bool)
    mem[::2] = True
    mem[1::2] = False
    got = lira_scores(phi, mem, mode="online", fix_variance=False)
    off = lira_scores(phi, mem, mode="offline", fix_variance=False)
    folds = pair_folds(M)
    for j in range(M):
        for i in range(m):
            others = folds != folds[j]  # the other fold's models: never j, and not chosen by j's label
            xin, xout = phi[others & mem[:, i], i], phi[others & ~mem[:, i], i]
            mi, si = xin.mean(), max(xin.std(), 1e-3)
            mo, so = xout.mean(), max(xout.std(), 1e-3)
            ref = (-0.5 * ((phi[j, i] - mi) / si) ** 2 - math.log(si)) - (-0.5 * ((phi[j, i] - mo) / so) ** 2 - math.log(so))
            assert got[j, i] == pytest.approx(ref, rel=1e-9)
            assert off[j, i] == pytest.approx((phi[j, i] - mo) / so, rel=1e-9)


# ----------------------------------------------------------------------------- null bias and leakage

@pytest.mark.parametrize(("R", "m", "expected"), [(200, 1000, 0.059), (50, 2000, 0.115)])
def test_no_leakage_in_sample_is_biased_others_are_not(R, m, expected):
    """Seed 1: IN and OUT scores from one N(0, 1). In-sample mean ≈ 0.059 (R = 200) / 0.115 (R = 50) ± 0.01;
    cross-fitted and null-corrected means 0 ± 0.01."""
    rng = np.random.default_rng(1)
    s = rng.normal(size=(2 * R, m))
    mem = np.zeros((2 * R, m), bool)
    mem[0::2] = True
    assert abs(in_sample_advantage(s, mem).mean() - expected) < 0.01
    assert abs(cross_fit_advantage(s, mem).mean()) < 0.01
    assert abs(null_corrected_advantage(s, mem, rng=rng, n_null=20).mean()) < 0.01


def test_leaking_toy_is_detected_by_every_estimator():
    """Seed 2: IN scores shifted by +1 SD (true advantage of the best rule 2Φ(0.5) − 1 ≈ 0.383)."""
    rng = np.random.default_rng(2)
    R, m = 50, 400
    mem = np.zeros((2 * R, m), bool)
    mem[0::2] = True
    s = rng.normal(size=(2 * R, m)) + mem * 1.0
    truth = 2 * 0.6914624612740131 - 1
    for est in ("in_sample", "cross_fit", "null_corrected"):
        a = record_advantage(s, mem, estimator=est, rng=rng).mean()
        assert a > 0.25, est
    assert abs(record_advantage(s, mem, estimator="cross_fit").mean() - truth) < 0.05
    assert ga_advantage(s, mem).mean() > 0.25
    assert cross_fit_advantage(lira_scores(s, mem), mem).mean() > 0.25


# ---------------------------------------------------------------------------------------- statistics

def test_clopper_pearson_golden_epsilon_lower_bound():
    assert epsilon_lb_from_counts(500, 500, 0, 500, alpha=0.01) == pytest.approx(4.54, abs=0.01)
    lo, hi = clopper_pearson(0, 10, 0.05)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** 0.1)
    assert epsilon_lb_from_counts(250, 500, 250, 500) == 0.0  # no separation: vacuous


def test_tpr_at_fpr_hand_case():
    s_out = np.arange(1000, dtype=float)  # 0..999
    s_in = np.array([998.5, 999.5, 5.0, 990.0])
    r = tpr_at_fpr(s_in, s_out, 0.001)  # at most one OUT above: cut at 998 (strictly above)
    assert r["fpr"] <= 0.001 and r["tpr"] == 0.5
    assert r["tpr_lo"] < 0.5 < r["tpr_hi"]


def test_epsilon_lower_bound_uses_a_separate_split():
    rng = np.random.default_rng(3)
    M, m = 40, 500
    mem = np.zeros((M, m), bool)
    mem[0::2] = True
    s = rng.normal(size=(M, m)) + 3.0 * mem
    r = epsilon_lower_bound(s, mem, pair_folds(M), delta=1e-5)
    assert r["eps_lb"] > 1.0
    null = epsilon_lower_bound(rng.normal(size=(M, m)), mem, pair_folds(M), delta=1e-5)
    assert null["eps_lb"] < 0.3


def test_gpr_delta_and_empty_group():
    adv = np.array([0.1, 0.3, 0.5, 0.0])
    g = np.array([0, 0, 1, 1])
    np.testing.assert_allclose(gpr(adv, g, 3)[:2], [0.2, 0.25])
    assert np.isnan(gpr(adv, g, 3)[2])
    assert delta_pp(gpr(adv, g, 3)) == pytest.approx(5.0)


def test_permutation_pvalue_rejects_real_gap_and_not_a_null_one():
    rng = np.random.default_rng(4)
    g = np.repeat([0, 1], 300)
    real = rng.normal(0.05, 0.1, 600) + 0.05 * g
    same = rng.normal(0.05, 0.1, 600)
    assert permutation_pvalue(real, g, 2, rng=rng, n_perm=500) < 0.01
    assert permutation_pvalue(same, g, 2, rng=rng, n_perm=500) > 0.05


def test_paired_seed_comparison_exact_sign_flip():
    r = paired_seed_comparison(np.array([3.0, 3.5, 2.9, 3.2, 3.1]), np.array([2.0, 2.1, 2.2, 2.0, 2.4]))
    assert r["p_sign_flip"] == pytest.approx(2 / 32)  # all five differences positive: 2 of 32 flips as extreme
    assert r["p_min"] == pytest.approx(2 / 32)  # five seeds cannot give less
    assert r["lo"] > 0 and r["mean_diff"] == pytest.approx(1.0)
    # hand-computed t interval: d = [1, 1.4, 0.7, 1.2, 0.7], sd 0.3082, t(0.975, 4) = 2.7764
    assert r["hi"] - r["lo"] == pytest.approx(2 * 2.7764 * 0.30822 / 5 ** 0.5, rel=1e-3)


# ---------------------------------------------------------------------------------------------- design

def test_audit_design_is_balanced_and_stratified():
    rng = np.random.default_rng(6)
    group = np.repeat([0, 1, 2], [5000, 300, 31])
    d = audit_design(group, m=400, R=6, min_per_group=50, rng=rng)
    assert len(d.audit_idx) == 400 and len(np.unique(d.audit_idx)) == 400
    sizes = np.bincount(group[d.audit_idx], minlength=3)
    assert sizes[2] == 31 and sizes[1] >= 50  # small group: all of it; others: at least 50
    assert (d.membership.sum(0) == 6).all()  # every audit record IN for exactly R models
    assert (d.membership[0::2] ^ d.membership[1::2]).all()  # complementary pairs
    full = d.training_membership()
    non_audit = np.setdiff1d(np.arange(len(group)), d.audit_idx)
    assert full[:, non_audit].all()
    # each half is stratified: group counts per half differ by at most one
    for r in range(6):
        for k in range(3):
            gk = d.audit_group == k
            assert abs(d.membership[2 * r, gk].sum() - d.membership[2 * r + 1, gk].sum()) <= 1


def test_looa_design_pairs():
    group = np.repeat([0, 1], [100, 40])
    d = looa_design(group, L=4, R=3, min_per_group=2, rng=np.random.default_rng(0))
    assert d.membership.shape == (24, 140)
    for row in range(24):
        z = d.targets[d.target_of_row[row]]
        assert d.membership[row, z] == d.is_in[row]
        assert d.membership[row].sum() == 140 - (not d.is_in[row])
    assert (d.stream_ids[0::2] == d.stream_ids[1::2]).all()
    assert np.bincount(group[d.targets]).min() >= 2


def test_paired_group_difference_hand_case_and_pairing():
    rng = np.random.default_rng(7)
    g = np.repeat([0, 1], 200)
    a = rng.normal(0.1, 0.2, 400)
    b = a + np.where(g == 1, -0.05, 0.0) + rng.normal(0, 0.01, 400)  # group 1 got safer by 5 pp
    df = paired_group_difference(a, b, g, 2, rng=rng, n_boot=500)
    assert df.loc[1, "change"] == pytest.approx(-0.05, abs=0.005) and df.loc[1, "hi"] < 0
    assert abs(df.loc[0, "change"]) < 0.005  # group 0 unchanged up to the added N(0, 0.01) noise
    # pairing matters: the paired CI is far narrower than the spread of either algorithm's advantages
    assert df.loc[1, "hi"] - df.loc[1, "lo"] < 0.01


def test_looa_design_targets_come_from_candidates():
    group = np.repeat([0, 1], [100, 40])
    cand = np.array([3, 7, 11, 101, 105, 120, 130])
    d = looa_design(group, L=4, R=2, min_per_group=2, rng=np.random.default_rng(0), candidates=cand)
    assert np.isin(d.targets, cand).all() and np.bincount(group[d.targets]).min() >= 2
    assert (~d.membership[~d.is_in, d.targets[d.target_of_row[~d.is_in]]]).all()
