"""RMIA (Zarifzadeh et al., ICML 2024, arXiv 2312.03262): online and offline scores from the reference models, and
offline RMIA's interpolation ``a`` chosen from the references alone (:func:`choose_offline_a`)."""

from __future__ import annotations

from typing import Literal

import numpy as np

from .attacks import pair_folds
from .threads import in_blocks, ordered_map

__all__ = ["OFFLINE_RMIA_MIN_MODELS", "choose_offline_a", "rmia_scores"]


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
