"""Membership-inference attacks as pure array functions (docs/study.md, 'The audit'; docs/attacks.md).

Conventions: ``scores`` [M, m] float, one row per model and one column per audit record, higher = more
member-like (e.g. −loss); ``membership`` [M, m] bool, True where the record was in the model's training set.
A record's *advantage* is TPR − FPR of a threshold rule "predict IN when score ≥ t" over its M (score, label)
pairs, which equals 2·accuracy − 1 when IN and OUT are balanced (as the audit design makes them).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import numpy as np

from .signals import logit_confidence

__all__ = [
    "ESTIMATORS",
    "Estimator",
    "best_cut",
    "sort_columns",
    "sort_rows",
    "sort_rows_with_labels",
    "pair_folds",
    "cross_fit_advantage",
    "ga_advantage",
    "ga_predictions",
    "gba_advantage",
    "gba_predictions",
    "in_sample_advantage",
    "lira_scores",
    "logit_confidence",
    "null_corrected_advantage",
    "record_advantage",
    "OFFLINE_RMIA_MIN_MODELS",
    "choose_offline_a",
    "rmia_scores",
]

Estimator = Literal["in_sample", "cross_fit", "null_corrected"]
ESTIMATORS: tuple[str, ...] = ("in_sample", "cross_fit", "null_corrected")


def sort_columns(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each column of scores [M, m] sorted once, descending (stable): (order, sorted scores, where a cut after
    position k separates two distinct scores). Labels change between calls of :func:`best_cut`, the sort does not.
    Blocks of columns are sorted on :func:`threads` threads (a stable sort has one answer, whatever the block)."""
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


def threads() -> int:
    """Threads for the attacks' independent pieces (permutations, reference models): ``FAIRDP_ATTACK_THREADS`` if
    set, else the CPUs this process may use, capped by ``OMP_NUM_THREADS`` when set (a campaign that runs one thread
    a process sets it to 1) and at 4: each thread holds about 25 bytes per (model, record) of the bank (about
    150 MB at the paper's Law design, M = 400 by m = 16,432), so memory grows with it. numpy releases the GIL in the
    sorts, gathers and sums."""
    if os.environ.get("FAIRDP_ATTACK_THREADS"):
        return max(1, int(os.environ["FAIRDP_ATTACK_THREADS"]))
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) > 0:
        n = min(n, int(omp))
    return max(1, min(4, n))


def ordered_map(fn: Callable, items, *, ahead: int | None = None) -> list:
    """``[fn(x) for x in items]``, computed on :func:`threads` threads, returned in order. ``items`` is consumed in
    order on the calling thread (a generator drawing from an rng draws exactly what the loop would), at most
    ``ahead`` (default 2 per thread) items ahead of the results, so memory stays bounded."""
    n = threads()
    if n == 1:
        return [fn(x) for x in items]
    ahead = ahead or 2 * n
    out, pending = [], deque()
    with ThreadPoolExecutor(n, thread_name_prefix="fairdp-attack") as pool:
        for x in items:
            pending.append(pool.submit(fn, x))
            if len(pending) >= ahead:
                out.append(pending.popleft().result())
        out += [f.result() for f in pending]
    return out


BLOCK_MIN_CELLS = 1 << 18  # below this many elements, :func:`in_blocks` runs one block (threads cost more)


def in_blocks(fn: Callable[[slice], None], n: int, *, cells: int) -> None:
    """``fn(block)`` for contiguous blocks of ``range(n)`` that cover it once, on :func:`threads` threads: one block
    a thread, or one in all when the work's array (``cells`` elements) is under :data:`BLOCK_MIN_CELLS`. For work
    done column by column (or model by model) that writes its own part of preallocated outputs: each column sees
    the same operations on the same values whatever its block, so the same bits on any number of threads."""
    k = min(threads(), n) if cells >= BLOCK_MIN_CELLS else 1
    edges = np.linspace(0, n, k + 1).astype(int)
    ordered_map(fn, [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])])


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


OFFLINE_RMIA_MIN_MODELS = 8  # offline references are the other pairs of a model's fold: two pairs per fold
RMIA_DEFAULT_A = 0.3  # offline RMIA's a when it cannot be chosen from the references (ML Privacy Meter's default)
A_GRID = np.round(np.linspace(0.0, 1.0, 21), 2)


def _trimmed_mean(x: np.ndarray, sel: np.ndarray, trim: float) -> np.ndarray:
    """Per column of x [K, m]: the mean of the selected rows (sel [K, m]), less ⌊trim·k⌋ of the k values at each
    end (trim = 0: the plain mean)."""
    k = sel.sum(0)
    if (k == 0).any():
        raise ValueError("RMIA: a record has no reference model to estimate Pr(x) from")
    if trim == 0:
        return (x * sel).sum(0) / k
    srt = np.sort(np.where(sel, x, np.inf), axis=0)  # the selected values first, in order
    cut = np.floor(trim * k).astype(int)
    rows = np.arange(x.shape[0])[:, None]
    keep = (rows >= cut) & (rows < k - cut)
    return np.where(keep, srt, 0.0).sum(0) / keep.sum(0)


_TOO_FEW_OUT = "RMIA needs at least two OUT records per model in each half of the audited records"


def _population_share(lr: np.ndarray, lab: np.ndarray, gamma: float, halves: np.ndarray) -> np.ndarray:
    """RMIA's score of each (model, record): the share of population records z with LR(x) / LR(z) ≥ γ. Model j's
    population for a record of one half of the audited records is j's OUT records of the OTHER half: the same set
    for every record of that half, whatever the record's own membership in j, so members and non-members are
    compared with one population of one size (scoring an OUT record against the OUT records less itself and an IN
    record against all of them, as before, put their scores on different grids: k/(n−1) against k/n, which
    favoured non-members at γ > 1, AUC 0.43–0.49 on banks with no leak)."""
    out = np.empty_like(lr)
    halves_cols = [(halves == h, halves != h) for h in (0, 1)]  # (this half, the other): the same for every model
    for _, other in halves_cols:
        if (~lab & other).sum(1).min(initial=2) < 2:
            raise ValueError(_TOO_FEW_OUT)

    def rows(sl: slice) -> None:  # models are independent: blocks of them on threads
        for j in range(sl.start, sl.stop):
            for cols, other in halves_cols:
                pop = np.sort(lr[j, ~lab[j] & other])
                out[j, cols] = np.searchsorted(pop, lr[j, cols] / gamma, side="right") / len(pop)

    in_blocks(rows, lr.shape[0], cells=lr.size)
    return out


def _ref_select(lab_ref: np.ndarray, n_ref: int | None) -> np.ndarray:
    """Offline references of each record [K, m]: the reference models it is OUT of, the first ``n_ref`` of them."""
    out = ~lab_ref
    if n_ref is not None:
        out &= np.cumsum(out, axis=0) <= n_ref
    return out


def _pr_out(p_ref: np.ndarray, lab_ref: np.ndarray, n_ref: int | None, trim: float) -> np.ndarray:
    """Pr_OUT(x): the (trimmed) mean of p(x) over the reference models x is OUT of (the first ``n_ref``)."""
    return _trimmed_mean(p_ref, _ref_select(lab_ref, n_ref), trim)


def _offline_pr(pr_out: np.ndarray, a: float) -> np.ndarray:
    """Offline Pr(x) = ½((1 + a)·Pr_OUT(x) + (1 − a)) (Zarifzadeh et al. 2024, §3)."""
    return 0.5 * ((1 + a) * pr_out + (1 - a))


def _same_fold_refs(K: int, t: int) -> np.ndarray:
    """Rows of a fold's K models (pairs consecutive: rows 2i and 2i+1) that may serve row t as references: every
    model but t's own pair, so that t's IN and OUT records meet the same number of OUT references."""
    return np.arange(K) // 2 != t // 2


def _pr_out_by_pair(p: np.ndarray, lab: np.ndarray, n_ref: int | None, trim: float) -> np.ndarray:
    """Pr_OUT of every model of one fold [K, m] (pairs in consecutive rows), each from the other pairs of the fold
    (:func:`_same_fold_refs`), equal bit for bit to :func:`_pr_out` of each model's references. The two models of a
    pair share their references, so each pair's mean is computed once; with ``n_ref=None`` and ``trim=0`` the sums
    also share their prefix: numpy sums a column's rows one after another, in row order, and so does this, O(K·m)
    adds per pair instead of K·m products, copies and adds per model."""
    K = p.shape[0]
    q = p * ~lab  # p · [x OUT], the product _trimmed_mean takes (NaN stays NaN)
    out = np.empty(p.shape, dtype=np.result_type(q.dtype, np.int64))  # the mean's dtype: a sum divided by a count
    if n_ref is not None or trim != 0:
        for i in range(0, K, 2):
            others = _same_fold_refs(K, i)
            out[i] = _pr_out(p[others], lab[others], n_ref, trim)
            out[i + 1:i + 2] = out[i]
        return out
    out_rows = (~lab).astype(np.int64)
    empty = []

    def columns(sl: slice) -> None:  # records are independent: blocks of them on threads
        qs, os_ = q[:, sl], out_rows[:, sl]
        prefix, prefix_n = np.zeros(qs.shape[1], dtype=q.dtype), np.zeros(qs.shape[1], np.int64)
        for i in range(0, K, 2):
            acc, n = prefix.copy(), prefix_n.copy()
            for row in range(i + 2, K):
                acc += qs[row]
                n += os_[row]
            if (n == 0).any():
                empty.append(i)
                return
            out[i, sl] = acc / n
            out[i + 1:i + 2, sl] = out[i, sl]
            for row in range(i, min(i + 2, K)):  # the prefix grows by this pair, row by row
                prefix += qs[row]
                prefix_n += os_[row]

    in_blocks(columns, p.shape[1], cells=p.size)
    if empty:
        raise ValueError("RMIA: a record has no reference model to estimate Pr(x) from")
    return out


def _share_auc(lr: np.ndarray, lab: np.ndarray, gamma: float, halves: np.ndarray) -> float:
    """The AUC (ties ½) of one model's RMIA scores (:func:`_population_share`), members against non-members, equal
    bit for bit to :func:`_auc` of those scores but without ranking them. A record of half h scores k/n_h, k the
    count of its population (n_h values) at or below LR/γ; distinct fractions with denominators this small stay
    distinct and in order as floats, so counting pairs of integers k, half by half, gives rankdata's tie-averaged
    rank sum exactly, and one correctly rounded division the same float."""
    return float(_share_auc_grid(lr[None], lab, gamma, halves)[0])


def _share_auc_grid(lr: np.ndarray, lab: np.ndarray, gamma: float, halves: np.ndarray) -> np.ndarray:
    """:func:`_share_auc` of every row of ``lr`` [G, m] (one model's LRs at G values of a; the one-row case is
    :func:`_share_auc` itself): the rows are sorted together, and each half's members and non-members are counted
    from their own sorted LRs (a search with sorted keys walks the population once; the counts k do not depend on
    the order they are found in)."""
    G = lr.shape[0]
    n_pos = int(lab.sum())
    n_neg = len(lab) - n_pos
    ns, members, non = [], [], []

    def counts(x: np.ndarray, pop: np.ndarray) -> np.ndarray:  # [G, n + 1]: per row, how many x have k = 0..n
        n = pop.shape[1]
        k = np.stack([np.searchsorted(pop[i], x[i], side="right") for i in range(G)]) if x.shape[1] else \
            np.zeros((G, 0), np.int64)
        return np.bincount((k + (n + 1) * np.arange(G)[:, None]).ravel(), minlength=G * (n + 1)).reshape(G, n + 1)

    # Half h's population is the other half's non-members, so each half's non-members are sorted once: as the
    # other half's population, and (divided by γ, which keeps them in order: x ≤ y gives x/γ ≤ y/γ in floats
    # too) as this half's non-member keys. The halves are 0 and 1.
    non_sorted = [np.sort(lr[:, (halves == h) & ~lab], axis=1) for h in (0, 1)]

    def keys(x: np.ndarray) -> np.ndarray:
        return x if gamma == 1 else x / gamma  # x / 1.0 is x: no copy

    for h in (0, 1):
        pop = non_sorted[1 - h]
        if pop.shape[1] < 2:
            raise ValueError(_TOO_FEW_OUT)
        ns.append(pop.shape[1])
        members.append(counts(keys(np.sort(lr[:, (halves == h) & lab], axis=1)), pop))
        non.append(counts(keys(non_sorted[h]), pop))
    if n_pos == 0 or n_neg == 0:
        return np.full(G, np.nan)
    below = [np.concatenate((np.zeros((G, 1), np.int64), np.cumsum(c, axis=1)), axis=1) for c in non]
    u2 = np.zeros(G, np.int64)  # exact: at most 2·n_pos·n_neg, far below 2**53, so the division below rounds once
    for h in (0, 1):
        k1 = np.arange(ns[h] + 1)
        for h2 in (0, 1):
            t, rem = np.divmod(k1 * ns[h2], ns[h])
            lt = below[h2][:, t + (rem > 0)]
            eq = np.where(rem == 0, non[h2][:, t], 0)
            u2 += (members[h] * (2 * lt + eq)).sum(1)
    return u2 / (2 * n_pos * n_neg)


def choose_offline_a(p_ref: np.ndarray, lab_ref: np.ndarray, *, gamma: float = 1.0, n_ref: int | None = None,
                     trim: float = 0.0, grid: np.ndarray = A_GRID, halves: np.ndarray | None = None,
                     pr_out: np.ndarray | None = None) -> float:
    """Offline RMIA's a, chosen from reference models alone (the RMIA paper's procedure): ``p_ref``/``lab_ref``
    [K, m] are K reference models in complementary pairs (rows 2i, 2i+1); each plays the target in turn, the other
    pairs' models it is OUT of are its references, and the a of ``grid`` with the highest mean AUC of its scores
    against its own membership is returned. Fewer than two pairs leave nothing to simulate: :data:`RMIA_DEFAULT_A`
    (0.3, ML Privacy Meter's default). The references' means are shared within pairs and the AUCs counted without
    ranking (:func:`_pr_out_by_pair`, :func:`_share_auc`); the choice is the slow reference's bit for bit
    (``tests/attack_references.py``). ``pr_out``: :func:`_pr_out_by_pair` of these references, where the caller has
    it."""
    K, m = p_ref.shape
    if K < 4:
        return RMIA_DEFAULT_A
    halves = np.arange(m) % 2 if halves is None else np.asarray(halves)
    if not np.isin(halves, (0, 1)).all():
        raise ValueError("offline RMIA's halves must be 0 or 1 for every audited record")
    grid = np.asarray(grid)  # in its own dtype: a of the grid enters 1 + a as the scalar loop's a did
    if pr_out is None:
        pr_out = _pr_out_by_pair(p_ref, lab_ref, n_ref, trim)  # the same for every a

    def aucs(r: int) -> np.ndarray:
        lr = p_ref[r] / np.maximum(_offline_pr(pr_out[r], grid[:, None]), 1e-300)  # [len(grid), m]
        return _share_auc_grid(lr, lab_ref[r], gamma, halves)

    auc = np.zeros(len(grid))
    for row in ordered_map(aucs, range(K)):  # summed in row order, as one thread would
        for i, v in enumerate(row):
            auc[i] += v
    return float(grid[int(np.argmax(auc))])


def _auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(pos > neg) + ½ P(pos = neg), by ranks."""
    from scipy.stats import rankdata

    r = rankdata(np.r_[pos, neg])
    return float((r[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def rmia_scores(phi: np.ndarray, membership: np.ndarray, *, gamma: float = 1.0,
                mode: Literal["online", "offline"] = "online", a: float | None = None, n_ref: int | None = None,
                trim: float = 0.0, folds: np.ndarray | None = None) -> np.ndarray:
    """RMIA (Zarifzadeh et al. 2024, arXiv 2312.03262) on a model bank, [M, m] scores in [0, 1].

    For model j and record x: Pr(x | θ_j) = p_j(x), the model's probability of x's label (from φ, the logit-scaled
    confidence), and LR(x) = p_j(x) / Pr(x). Online, the reference models of j are the models of the OTHER fold
    (as for LiRA, :func:`lira_scores`: model pairs are complementary halves, so each fold holds every record IN in
    exactly half its models, whatever j's own label).

    - ``mode="online"`` (default): Pr(x) = the mean of p(x) over all the reference models (IN and OUT in equal
      numbers, the paper's ½(Pr_IN + Pr_OUT)).
    - ``mode="offline"``: Pr(x) = ½((1 + a)·Pr_OUT(x) + (1 − a)), Pr_OUT the mean of p(x) over reference models
      x is OUT of (the first ``n_ref`` of them; one is enough): the paper's linear correction for having no IN
      references. Here the references of model j are the models of j's OWN fold but j's pair: a threshold
      cross-fitted on one fold's scores then depends on that fold's models only (references from the other fold,
      chosen by their labels, coupled the threshold to the OUT models it is applied to: a −0.7 pp advantage with
      no leak). Needs two model pairs per fold (M ≥ 8). ``a=None`` chooses a from the other fold's models
      (:func:`choose_offline_a`).

    ``trim``: the share of reference values dropped at each end before averaging (the paper's trimmed mean;
    default 0, the plain mean). The score of x is the share of population records z with LR(x) / LR(z) ≥ ``gamma``
    (default 1, the paper's online setting; its configurations also use 2): the population of model j for x is
    j's OUT records of the other half of the audited records (:func:`_population_share`), so that members and
    non-members are scored on the same footing at every γ. No threshold is fitted on membership labels here; the
    advantage estimators threshold the score.
    """
    phi = np.asarray(phi, dtype=np.float64)
    lab = np.asarray(membership, dtype=bool)
    M, m = phi.shape
    if mode not in ("online", "offline"):
        raise ValueError(f"RMIA mode must be 'online' or 'offline', got {mode!r}")
    if not gamma >= 1:
        raise ValueError(f"RMIA's gamma must be at least 1, got {gamma}")
    if not 0 <= trim < 0.5:
        raise ValueError(f"RMIA's trim must lie in [0, 0.5), got {trim}")
    if n_ref is not None and n_ref < 1:
        raise ValueError(f"RMIA's n_ref must be at least 1, got {n_ref}")
    folds = pair_folds(M) if folds is None else np.asarray(folds)
    halves = np.arange(m) % 2
    p = 1.0 / (1.0 + np.exp(-np.clip(phi, -700, 700)))
    lr = np.empty_like(p)
    pr_out: dict = {}  # offline: each fold's reference means, read when it is scored and for the other fold's a

    def fold_pr_out(f) -> np.ndarray:
        if f not in pr_out:
            rows = folds == f
            pr_out[f] = _pr_out_by_pair(p[rows], lab[rows], n_ref, trim)
        return pr_out[f]

    for f in np.unique(folds):
        if not (folds != f).any():
            raise ValueError("RMIA needs at least two model pairs (two folds)")
        rows = np.flatnonzero(folds == f)
        if mode == "offline":  # every fold checked before any is averaged: its means also serve the other fold
            if not (lab[rows[0::2]] ^ lab[rows[1::2]]).all():
                raise ValueError("offline RMIA: each fold's models must come in complementary pairs (consecutive "
                                 "rows)")
            if len(rows) < OFFLINE_RMIA_MIN_MODELS // 2:
                raise ValueError(f"offline RMIA needs at least {OFFLINE_RMIA_MIN_MODELS} models (two pairs per "
                                 "fold): a model's references are the other pairs of its fold")
    for f in np.unique(folds):
        target, ref = folds == f, folds != f
        if mode == "online":
            lr[target] = p[target] / np.maximum(_trimmed_mean(p[ref], np.ones_like(lab[ref]), trim), 1e-300)
            continue
        rows = np.flatnonzero(target)
        if a is not None:
            a_f = float(a)
        else:  # the other fold's models are the references; with two folds their means are that fold's own
            others = np.unique(folds[ref])
            a_f = choose_offline_a(p[ref], lab[ref], gamma=gamma, n_ref=n_ref, trim=trim, halves=halves,
                                   pr_out=fold_pr_out(others[0]) if len(others) == 1 else None)
        lr[rows] = p[rows] / np.maximum(_offline_pr(fold_pr_out(f), a_f), 1e-300)
    return _population_share(lr, lab, gamma, halves)
