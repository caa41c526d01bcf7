"""Slow, independent references for the attacks' fast paths (the code as it was before its sorts were shared): the
tests check the fast code against them bit for bit, and ``benchmarks/attacks.py`` times both in one run."""

from __future__ import annotations

import numpy as np


def best_cut(scores: np.ndarray, membership: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column: the largest TPR − FPR of "IN iff score ≥ t" and its t, sorting the column afresh."""
    s = np.asarray(scores, dtype=np.float64)
    lab = np.asarray(membership, dtype=bool)
    order = np.argsort(-s, axis=0, kind="stable")
    s_sorted = np.take_along_axis(s, order, axis=0)
    l_sorted = np.take_along_axis(lab, order, axis=0)
    n_in = lab.sum(0)
    n_out = lab.shape[0] - n_in
    gap = np.cumsum(l_sorted, axis=0) / np.maximum(n_in, 1) - np.cumsum(~l_sorted, axis=0) / np.maximum(n_out, 1)
    cut_ok = np.ones_like(gap, dtype=bool)
    cut_ok[:-1] = s_sorted[:-1] != s_sorted[1:]
    gap = np.where(cut_ok, gap, -np.inf)
    k = gap.argmax(axis=0)
    best = gap[k, np.arange(gap.shape[1])]
    thr = s_sorted[k, np.arange(gap.shape[1])]
    none = best <= 0
    return np.where(none, 0.0, best), np.where(none, np.inf, thr)


def null_corrected_advantage(scores, membership, *, rng, n_null=50):
    """In-sample advantage minus its mean over ``n_null`` label permutations, every permutation sorted afresh."""
    obs = best_cut(scores, membership)[0]
    null = np.zeros_like(obs)
    for _ in range(n_null):
        null += best_cut(scores, rng.permuted(membership, axis=0))[0]
    return obs - null / n_null


def row_thresholds(scores: np.ndarray, membership: np.ndarray) -> np.ndarray:
    """Per row: the best-accuracy threshold of "IN iff score ≥ t" over that row's records, sorting the row."""
    s = np.asarray(scores, dtype=np.float64)
    lab = np.asarray(membership, dtype=bool)
    order = np.argsort(-s, axis=1, kind="stable")
    s_sorted = np.take_along_axis(s, order, axis=1)
    l_sorted = np.take_along_axis(lab, order, axis=1)
    n_out = (~lab).sum(1, keepdims=True)
    correct = np.cumsum(l_sorted, 1) + (n_out - np.cumsum(~l_sorted, 1))
    ok = np.ones_like(correct, dtype=bool)
    ok[:, :-1] = s_sorted[:, :-1] != s_sorted[:, 1:]
    correct = np.where(ok, correct, -1)
    k = correct.argmax(1)
    best = correct[np.arange(len(k)), k]
    thr = s_sorted[np.arange(len(k)), k]
    return np.where(best > n_out[:, 0], thr, np.inf)


def gba_predictions(scores, membership, group):
    """PA-GBA's predictions, one sort per model and group."""
    pred = np.zeros(scores.shape, dtype=bool)
    for k in np.unique(group):
        cols = group == k
        pred[:, cols] = scores[:, cols] >= row_thresholds(scores[:, cols], membership[:, cols])[:, None]
    return pred


def choose_offline_a(p_ref, lab_ref, *, gamma=1.0, n_ref=None, trim=0.0, grid=None, halves=None):
    """Offline RMIA's a as first written: every target's references averaged afresh, every (target, a) scored by
    its population shares and ranked by scipy's rankdata."""
    from scipy.stats import rankdata

    from fairdp_core.audit.rmia import A_GRID, RMIA_DEFAULT_A, _offline_pr, _pr_out, _same_fold_refs

    grid = A_GRID if grid is None else grid
    K, m = p_ref.shape
    if K < 4:
        return RMIA_DEFAULT_A
    halves = np.arange(m) % 2 if halves is None else halves
    auc = np.zeros(len(grid))
    for r in range(K):
        others = _same_fold_refs(K, r)
        pr_out = _pr_out(p_ref[others], lab_ref[others], n_ref, trim)
        for i, a in enumerate(grid):
            lr = p_ref[r:r + 1] / np.maximum(_offline_pr(pr_out, a), 1e-300)
            s = population_share(lr, lab_ref[r:r + 1], gamma, halves)[0]
            pos, neg = s[lab_ref[r]], s[~lab_ref[r]]
            rk = rankdata(np.r_[pos, neg])
            auc[i] += float((rk[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))
    return float(grid[int(np.argmax(auc))])


def population_share(lr, lab, gamma, halves):
    """RMIA's population shares as first written: model by model, half by half, one sort and one search each."""
    out = np.empty_like(lr)
    for j in range(lr.shape[0]):
        for h in (0, 1):
            cols = halves == h
            pop = np.sort(lr[j, ~lab[j] & ~cols])
            out[j, cols] = np.searchsorted(pop, lr[j, cols] / gamma, side="right") / len(pop)
    return out


def offline_pr_out_rows(p, lab, rows, n_ref=None, trim=0.0):
    """Pr_OUT of each model of one fold (``rows``, pairs consecutive) from the other pairs of the fold, averaged
    afresh for every model."""
    from fairdp_core.audit.rmia import _pr_out, _same_fold_refs

    return np.stack([_pr_out(p[rows[_same_fold_refs(len(rows), t)]], lab[rows[_same_fold_refs(len(rows), t)]],
                             n_ref, trim) for t in range(len(rows))])
