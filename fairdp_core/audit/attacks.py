"""Membership-inference attacks as pure array functions (docs/study.md, 'The audit'; docs/attacks.md).

Conventions: ``scores`` [M, m] float, one row per model and one column per audit record, higher = more
member-like (e.g. −loss); ``membership`` [M, m] bool, True where the record was in the model's training set.
A record's *advantage* is TPR − FPR of a threshold rule "predict IN when score ≥ t" over its M (score, label)
pairs, which equals 2·accuracy − 1 when IN and OUT are balanced (as the audit design makes them).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from .signals import logit_confidence
from .threads import in_blocks, ordered_map

__all__ = ["ESTIMATORS", "Estimator", "best_cut", "sort_columns", "sort_rows", "sort_rows_with_labels", "pair_folds",
           "cross_fit_advantage", "ga_advantage", "ga_predictions", "gba_advantage", "gba_predictions",
           "in_sample_advantage", "lira_scores", "logit_confidence", "null_corrected_advantage", "record_advantage"]

Estimator = Literal["in_sample", "cross_fit", "null_corrected"]
ESTIMATORS: tuple[str, ...] = ("in_sample", "cross_fit", "null_corrected")


def sort_columns(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each column of scores [M, m] sorted once, descending (stable): (order, sorted scores, where a cut after
    position k separates two distinct scores). Labels change between calls of :func:`best_cut`, the sort does not.
    Blocks of columns are sorted on :func:`~fairdp_core.audit.threads.threads` threads (a stable sort has one
    answer, whatever the block)."""
    s = np.asarray(scores, dtype=np.float64)
    order = np.empty(s.shape, dtype=np.intp)
    s_sorted = np.empty_like(s)
    cut_ok = np.ones(s.shape, dtype=bool)

    def block(sl: tuple) -> None:
        order[sl] = o = np.argsort(-s[sl], axis=0, kind="stable")
        s_sorted[sl] = ss = np.take_along_axis(s[sl], o, axis=0)
        cut_ok[sl][:-1] = ss[:-1] != ss[1:]  # a cut after position k only where the next score differs

    if s.ndim == 2:
        in_blocks(lambda cols: block((slice(None), cols)), s.shape[1], cells=s.size)
    else:  # one column (1-D), or more dimensions: one block, sorted along the first axis
        block((slice(None),))
    return order, s_sorted, cut_ok


def best_cut(scores: np.ndarray, membership: np.ndarray, *, presorted: tuple | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """Per column of scores [M, m]: the largest TPR − FPR of "IN iff score ≥ t" and its threshold t.

    Returns (advantage [m] ≥ 0, threshold [m]); t = +inf (predict nothing, advantage 0) when no cut helps.
    Only cuts between distinct scores are considered, so tied scores are never split. ``presorted``:
    :func:`sort_columns` of these scores, shared by calls that change only the labels.
    """
    lab = np.asarray(membership, dtype=bool)
    order, s_sorted, cut_ok = presorted if presorted is not None else sort_columns(scores)
    l_sorted = np.take_along_axis(lab, order, axis=0)
    M = lab.shape[0]
    n_in = lab.sum(0)
    n_out = M - n_in
    # Counts in the narrowest integer type (exact: at most M), the OUT count as position − IN count (no second
    # cumsum), and the floats in place: the same operations on the same values as tpr − fpr, so the same bits.
    cum_in = np.cumsum(l_sorted, axis=0, dtype=np.int16 if M < 2**15 else np.int64)
    gap = np.divide(cum_in, np.maximum(n_in, 1), dtype=np.float64)
    cum_out = np.arange(1, M + 1, dtype=cum_in.dtype)[:, None] - cum_in
    gap -= np.divide(cum_out, np.maximum(n_out, 1), out=np.empty_like(gap))
    gap[~cut_ok] = -np.inf
    k = gap.argmax(axis=0)
    best = gap[k, np.arange(gap.shape[1])]
    thr = s_sorted[k, np.arange(gap.shape[1])]
    none = best <= 0
    return np.where(none, 0.0, best), np.where(none, np.inf, thr)


def in_sample_advantage(scores: np.ndarray, membership: np.ndarray, *, presorted: tuple | None = None) -> np.ndarray:
    """The paper's estimator: max over thresholds of TPR − FPR, chosen and scored on the same pairs, [m].
    ``presorted``: :func:`sort_columns` of scores.

    Biased upward: with no leakage and R IN + R OUT pairs its mean is ≈ 0.115 at R = 50, ≈ 0.059 at R = 200.
    """
    return best_cut(scores, membership, presorted=presorted)[0]


def _rate_at(scores, membership, thr):
    """TPR − FPR per column of the rule score ≥ thr[column]."""
    pred = scores >= thr[None, :]
    lab = np.asarray(membership, dtype=bool)
    n_in, n_out = lab.sum(0), (~lab).sum(0)
    return (pred & lab).sum(0) / np.maximum(n_in, 1) - (pred & ~lab).sum(0) / np.maximum(n_out, 1)


def pair_folds(M: int) -> np.ndarray:
    """[M] in {0, 1}: model pairs (2r, 2r+1) alternate between folds (each fold keeps IN/OUT balanced)."""
    return (np.arange(M) // 2) % 2


def cross_fit_advantage(scores: np.ndarray, membership: np.ndarray, *, folds: np.ndarray | None = None) -> np.ndarray:
    """Choose each record's threshold on one half of the models, score TPR − FPR on the other, swap, average.

    ``folds`` [M] in {0, 1}; default: model pairs (2r, 2r+1) alternate between folds, so each fold keeps IN and
    OUT balanced. Unbiased under no leakage (mean 0); can be negative for a single record.
    """
    M = scores.shape[0]
    if folds is None:
        folds = pair_folds(M)
    folds = np.asarray(folds)
    if M < 4 or (folds == 0).sum() < 2 or (folds == 1).sum() < 2:
        raise ValueError("cross-fitting needs at least two model pairs (2R >= 4)")
    out = np.zeros(scores.shape[1])
    for a in (0, 1):
        sel, ev = folds == a, folds != a
        _, thr = best_cut(scores[sel], membership[sel])
        out += _rate_at(scores[ev], membership[ev], thr)
    return out / 2


def null_corrected_advantage(scores: np.ndarray, membership: np.ndarray, *, rng: np.random.Generator,
                             n_null: int = 50, presorted: tuple | None = None) -> np.ndarray:
    """In-sample advantage minus its mean under ``n_null`` permutations of each record's IN/OUT labels, [m].
    The permutations are drawn in order on this thread; their advantages are computed on :func:`threads` threads
    and summed in the order drawn (the same bits as one thread). ``presorted``: :func:`sort_columns` of scores."""
    pre = sort_columns(scores) if presorted is None else presorted  # one sort serves every permutation
    obs = best_cut(scores, membership, presorted=pre)[0]
    null = np.zeros_like(obs)
    perms = (rng.permuted(membership, axis=0) for _ in range(n_null))
    for adv in ordered_map(lambda perm: best_cut(scores, perm, presorted=pre)[0], perms):
        null += adv
    return obs - null / n_null


def record_advantage(scores: np.ndarray, membership: np.ndarray, *, estimator: Estimator = "cross_fit",
                     rng: np.random.Generator | None = None, n_null: int = 50,
                     presorted: tuple | None = None) -> np.ndarray:
    """PA-ALOOA / PA-LOOA per-record advantage [m] with the chosen estimator. ``presorted``: :func:`sort_columns`
    of scores, shared by the in-sample and null-corrected estimators (the cross-fitted one sorts each fold)."""
    if scores.shape != membership.shape:
        raise ValueError(f"scores {scores.shape} and membership {membership.shape} differ")
    if estimator == "in_sample":
        return in_sample_advantage(scores, membership, presorted=presorted)
    if estimator == "cross_fit":
        return cross_fit_advantage(scores, membership)
    if estimator == "null_corrected":
        if rng is None:
            raise ValueError("the null-corrected estimator needs rng")
        return null_corrected_advantage(scores, membership, rng=rng, n_null=n_null, presorted=presorted)
    raise ValueError(f"unknown estimator {estimator!r}; known: {', '.join(ESTIMATORS)}")


def sort_rows(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row (model) of scores [M, m] sorted once, descending (stable): (order, sorted scores)."""
    s = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-s, axis=1, kind="stable")
    return order, np.take_along_axis(s, order, axis=1)


def _sorted_row_thresholds(s_sorted: np.ndarray, l_sorted: np.ndarray) -> np.ndarray:
    """:func:`_row_thresholds` on rows already sorted by score (descending) with their labels."""
    n = l_sorted.shape[1]
    n_out = n - l_sorted.sum(1, keepdims=True)
    # TP + TN when cutting after position k: TP = cumulative IN, TN = n_out − (k + 1 − TP); exact integers
    correct = 2 * np.cumsum(l_sorted, 1, dtype=np.int32) + (n_out - np.arange(1, n + 1, dtype=np.int32)).astype(np.int32)
    correct[:, :-1][s_sorted[:, :-1] == s_sorted[:, 1:]] = -1  # never split tied scores
    k = correct.argmax(1)
    best = correct[np.arange(len(k)), k]
    thr = s_sorted[np.arange(len(k)), k]
    return np.where(best > n_out[:, 0], thr, np.inf)  # predicting all OUT is the baseline


def sort_rows_with_labels(scores: np.ndarray, membership: np.ndarray, *, presorted: tuple | None = None,
                          labels_sorted: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order, sorted scores, labels in that order) of each row: :func:`sort_rows` and the membership gathered by
    its order, each taken from ``presorted`` / ``labels_sorted`` where given (PA-GA, PA-GBA and PA-GBA's floor share
    one)."""
    order, s_sorted = presorted if presorted is not None else sort_rows(scores)
    l_sorted = (np.take_along_axis(np.asarray(membership, dtype=bool), order, axis=1)
                if labels_sorted is None else labels_sorted)
    return order, s_sorted, l_sorted


def _row_thresholds(scores: np.ndarray, membership: np.ndarray, *, presorted: tuple | None = None,
                    labels_sorted: np.ndarray | None = None) -> np.ndarray:
    """Per row (model): the threshold of best accuracy for "IN iff score ≥ t" over that row's records, [M].
    ``presorted`` / ``labels_sorted``: as in :func:`sort_rows_with_labels`."""
    _, s_sorted, l_sorted = sort_rows_with_labels(scores, membership, presorted=presorted, labels_sorted=labels_sorted)
    return _sorted_row_thresholds(s_sorted, l_sorted)


def _advantage_of_predictions(pred: np.ndarray, membership: np.ndarray) -> np.ndarray:
    lab = np.asarray(membership, dtype=bool)
    return (pred & lab).sum(0) / np.maximum(lab.sum(0), 1) - (pred & ~lab).sum(0) / np.maximum((~lab).sum(0), 1)


def ga_predictions(scores: np.ndarray, membership: np.ndarray, *, presorted: tuple | None = None,
                   labels_sorted: np.ndarray | None = None) -> np.ndarray:
    """PA-GA's "IN" predictions [M, m]: one best-accuracy threshold per model over all audit records.
    ``presorted`` / ``labels_sorted``: as in :func:`sort_rows_with_labels` (the rows' sort shared with PA-GBA)."""
    return scores >= _row_thresholds(scores, membership, presorted=presorted, labels_sorted=labels_sorted)[:, None]


def ga_advantage(scores: np.ndarray, membership: np.ndarray) -> np.ndarray:
    """PA-GA: one best-accuracy threshold per model over all audit records; per record, TPR − FPR over models."""
    return _advantage_of_predictions(ga_predictions(scores, membership), membership)


def gba_predictions(scores: np.ndarray, membership: np.ndarray, group: np.ndarray, *,
                    presorted: tuple | None = None, labels_sorted: np.ndarray | None = None) -> np.ndarray:
    """PA-GBA's predictions [M, m]: one threshold per model and group (fitted on that group's records, so a small
    group's threshold overfits it: compare PA-GBA's Δ with its null floor, never rank attacks by plug-in Δ).
    ``presorted``: :func:`sort_rows` of these scores, and ``labels_sorted`` the membership in that order: each
    group's records are read off the sorted rows in order (a stable sort keeps ties in record order, as sorting the
    group alone would), so refitting on other groups (the null floor's permuted labels) sorts no score."""
    group = np.asarray(group)
    order, s_sorted, l_sorted = sort_rows_with_labels(scores, membership, presorted=presorted,
                                                      labels_sorted=labels_sorted)
    ks, codes = np.unique(group, return_inverse=True)
    codes = codes.astype(np.uint8 if len(ks) <= 256 else np.int64)
    # Each row's positions grouped by group, in score order within a group: a stable (radix) sort of the small group
    # codes. Group k's records are then one block of columns, the same values in the same order as a boolean mask
    # of the sorted rows would pick, without K masked copies of the [M, m] rows.
    by_group = np.argsort(codes[order], axis=1, kind="stable")
    s_grouped, l_grouped = np.take_along_axis(s_sorted, by_group, axis=1), np.take_along_axis(l_sorted, by_group, axis=1)
    pred = np.zeros(scores.shape, dtype=bool)
    start = 0
    for c, n_k in enumerate(np.bincount(codes, minlength=len(ks))):
        thr = _sorted_row_thresholds(s_grouped[:, start:start + n_k], l_grouped[:, start:start + n_k])
        start += n_k
        cols = codes == c
        pred[:, cols] = scores[:, cols] >= thr[:, None]
    return pred


def gba_advantage(scores: np.ndarray, membership: np.ndarray, group: np.ndarray, *,
                  presorted: tuple | None = None, labels_sorted: np.ndarray | None = None) -> np.ndarray:
    """PA-GBA: as PA-GA with one threshold per model and group. ``group`` [m]; ``presorted`` and ``labels_sorted``
    as in :func:`gba_predictions`."""
    return _advantage_of_predictions(gba_predictions(scores, membership, group, presorted=presorted,
                                                     labels_sorted=labels_sorted), membership)


def lira_scores(phi: np.ndarray, membership: np.ndarray, *, mode: Literal["online", "offline"] = "online",
                fix_variance: bool | None = None, min_std: float = 1e-3, folds: np.ndarray | None = None) -> np.ndarray:
    """LiRA (Carlini et al. 2022, arXiv 2112.03570, Alg. 1) on a model bank, [M, m].

    For a model j and record i, the IN and OUT Gaussians of φ are fitted on the models of the OTHER fold (model
    pairs alternate between two folds, :func:`pair_folds`): the shadow models of j never include j, and which
    models they are does not depend on j's own label. (Fitting on "every model but j" does: with j IN the IN
    Gaussian has R − 1 shadows and the OUT one R, and the reverse with j OUT, which under no leakage gives IN
    models systematically lower online scores, a spurious negative advantage.) Online: log N(φ; μ_in, σ_in²) −
    log N(φ; μ_out, σ_out²); offline: (φ − μ_out) / σ_out (the one-sided test). ``fix_variance``: one variance per
    side pooled over records (Carlini et al. recommend it for few shadow models); default: when fewer than 64
    models.
    """
    phi = np.asarray(phi, dtype=np.float64)
    lab = np.asarray(membership, dtype=bool)
    M = phi.shape[0]
    folds = pair_folds(M) if folds is None else np.asarray(folds)
    if fix_variance is None:
        fix_variance = M < 64

    def fit(rows, mask):
        x, k = phi[rows], mask[rows]
        cnt = k.sum(0)
        mu = (x * k).sum(0) / np.maximum(cnt, 1)
        var = ((x - mu) ** 2 * k).sum(0) / np.maximum(cnt, 1)  # np.std's, as Carlini et al.'s code
        if fix_variance:
            var = np.full_like(var, np.mean(var[cnt > 1]) if (cnt > 1).any() else min_std ** 2)
        return mu, np.sqrt(np.maximum(var, min_std ** 2))

    def logpdf(x, mu, sd):
        return -0.5 * ((x - mu) / sd) ** 2 - np.log(sd)

    out = np.empty_like(phi)
    for f in np.unique(folds):
        target, shadow = folds == f, folds != f
        if shadow.sum() < 2:
            raise ValueError("LiRA needs at least two model pairs (two folds)")
        mu_out, sd_out = fit(shadow, ~lab)
        if mode == "offline":
            out[target] = (phi[target] - mu_out) / sd_out
            continue
        mu_in, sd_in = fit(shadow, lab)
        out[target] = logpdf(phi[target], mu_in, sd_in) - logpdf(phi[target], mu_out, sd_out)
    return out


