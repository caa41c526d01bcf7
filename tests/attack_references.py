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
