"""Outcome fairness (docs/study.md, 'Outcome fairness'), thin over fairlearn.

Point estimates and the by-group frame come from fairlearn's :class:`MetricFrame` (``accuracy``,
``selection_rate``, ``true_positive_rate``, ``false_positive_rate``; differences ``between_groups``), and the
equalized-odds difference from :func:`fairlearn.metrics.equalized_odds_difference`. The bootstrap intervals use
the same definitions computed from per-group confusion counts with numpy: MetricFrame's own bootstrap
(``n_boot``) costs 0.1–0.5 s per resample here (measured on 15,000 test rows), which for hundreds of resamples per
configuration would dominate the study. ``tests/test_fairness.py`` checks the count-based metrics against
fairlearn resample by resample.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from fairlearn.metrics import (
    MetricFrame,
    equal_opportunity_difference,
    equalized_odds_difference,
    false_positive_rate,
    selection_rate,
    true_positive_rate,
)
from sklearn.metrics import accuracy_score

__all__ = ["bank_by_group", "bank_fairness", "group_count_metrics", "outcome_fairness", "paired_difference"]


def _counts(code: np.ndarray, idx: np.ndarray, n_codes: int) -> np.ndarray:
    """[B, n_codes]: how often each code occurs in each resample (one bincount over offset codes)."""
    B = idx.shape[0]
    flat = (np.arange(B)[:, None] * n_codes + code[idx]).ravel()
    return np.bincount(flat, minlength=B * n_codes).reshape(B, n_codes).astype(float)


def group_count_metrics(y: np.ndarray, pred: np.ndarray, g: np.ndarray, n_groups: int, *, binary: bool,
                        idx: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Differences between groups (max − min) of accuracy, and for binary tasks selection rate and
    max(TPR difference, FPR difference) (= fairlearn's equalized-odds difference) and the TPR difference (its
    equal-opportunity difference), for each row of
    resample indices ``idx`` [B, n] (or the data itself when None). Returns arrays [B]."""
    if idx is None:
        idx = np.arange(len(y))[None]
    B = idx.shape[0]
    if binary:
        code = g * 4 + y * 2 + pred  # per group: tn, fp, fn, tp
        c = _counts(code, idx, n_groups * 4).reshape(B, n_groups, 4)
        tn, fp, fn, tp = c[..., 0], c[..., 1], c[..., 2], c[..., 3]
        n = c.sum(-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            acc, sr = (tp + tn) / n, (tp + fp) / n
            tpr, fpr = tp / (tp + fn), fp / (fp + tn)

        def spread(a):
            return np.nanmax(a, 1) - np.nanmin(a, 1)

        return {"accuracy": spread(acc), "selection_rate": spread(sr),
                "equalized_odds": np.maximum(spread(tpr), spread(fpr)), "equal_opportunity": spread(tpr)}
    code = g * 2 + (y == pred)
    c = _counts(code, idx, n_groups * 2).reshape(B, n_groups, 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = c[..., 1] / c.sum(-1)
    return {"accuracy": np.nanmax(acc, 1) - np.nanmin(acc, 1)}


def outcome_fairness(y_true: np.ndarray, y_pred: np.ndarray, groups: np.ndarray, *, n_boot: int = 200,
                     alpha: float = 0.05, random_state: int = 0) -> dict[str, object]:
    """Accuracy parity, demographic-parity, equalized-odds and equal-opportunity differences with bootstrap CIs.

    ``groups``: the sensitive feature per test record (names). A multi-class task gets accuracy parity only
    (selection rates and odds need a positive class). CIs: percentile bootstrap over test records.
    """
    y_true, y_pred, groups = np.asarray(y_true), np.asarray(y_pred), np.asarray(groups)
    binary = set(np.unique(y_true)) <= {0, 1} and set(np.unique(y_pred)) <= {0, 1}
    metrics = {"accuracy": accuracy_score}
    if binary:
        metrics |= {"selection_rate": selection_rate, "tpr": true_positive_rate, "fpr": false_positive_rate}
    mf = MetricFrame(metrics=metrics, y_true=y_true, y_pred=y_pred, sensitive_features=groups)
    diff = mf.difference()
    names, g = np.unique(groups, return_inverse=True)
    rng = np.random.default_rng(random_state)
    boots = group_count_metrics(y_true, y_pred, g, len(names), binary=binary,
                                idx=rng.integers(0, len(y_true), size=(n_boot, len(y_true))))
    q = [alpha / 2, 1 - alpha / 2]

    def ci(key):
        return [float(np.nanquantile(boots[key], q[0])), float(np.nanquantile(boots[key], q[1]))]

    out: dict[str, object] = {
        "by_group": mf.by_group.reset_index().rename(columns={"sensitive_feature_0": "group"}),
        "overall": mf.overall.to_dict(),
        "accuracy_parity": float(diff["accuracy"]), "accuracy_parity_ci": ci("accuracy"),
    }
    if binary:
        out["demographic_parity_difference"] = float(diff["selection_rate"])
        out["demographic_parity_ci"] = ci("selection_rate")
        out["equalized_odds_difference"] = float(equalized_odds_difference(y_true, y_pred, sensitive_features=groups))
        out["equalized_odds_ci"] = ci("equalized_odds")
        out["equal_opportunity_difference"] = float(equal_opportunity_difference(y_true, y_pred,
                                                                                 sensitive_features=groups))
        out["equal_opportunity_ci"] = ci("equal_opportunity")
    return out


def paired_difference(y_true: np.ndarray, pred_a: np.ndarray, pred_b: np.ndarray, groups: np.ndarray, *,
                      n_boot: int = 200, alpha: float = 0.05, random_state: int = 0) -> dict[str, list[float]]:
    """Model b minus model a on the same test records, for each between-group difference of
    :func:`group_count_metrics`: [point, lo, hi], a percentile interval from one bootstrap over test records shared
    by both models (paired; conditional on the two trained models, not on their training randomness)."""
    y_true, pred_a, pred_b = np.asarray(y_true), np.asarray(pred_a), np.asarray(pred_b)
    names, g = np.unique(np.asarray(groups), return_inverse=True)
    binary = set(np.unique(y_true)) <= {0, 1} and set(np.unique(np.r_[pred_a, pred_b])) <= {0, 1}
    idx = np.random.default_rng(random_state).integers(0, len(y_true), size=(n_boot, len(y_true)))
    pa = group_count_metrics(y_true, pred_a, g, len(names), binary=binary)
    pb = group_count_metrics(y_true, pred_b, g, len(names), binary=binary)
    ba = group_count_metrics(y_true, pred_a, g, len(names), binary=binary, idx=idx)
    bb = group_count_metrics(y_true, pred_b, g, len(names), binary=binary, idx=idx)
    return {k: [float(pb[k][0] - pa[k][0]), float(np.nanquantile(bb[k] - ba[k], alpha / 2)),
                float(np.nanquantile(bb[k] - ba[k], 1 - alpha / 2))] for k in pa}


def bank_fairness(y_true: np.ndarray, preds_a: np.ndarray, groups: np.ndarray, preds_b: np.ndarray | None = None, *,
                  n_boot: int = 200, alpha: float = 0.05, random_state: int = 0) -> dict[str, dict[str, float]]:
    """Every model of a bank, not one: for each between-group difference of :func:`group_count_metrics`, its mean
    over the M models (``preds_a`` [M, n], the bank's test predictions), the between-model SD and a percentile
    interval of that mean from one bootstrap over the test records (the same resample for every model; conditional
    on the trained models). With ``preds_b`` (a second bank [M, n], model j paired with model j: same training
    records), the same for bank b − bank a, per pair: the mean over pairs of the paired differences, their SD, and
    the bootstrap interval of the mean difference. Returns {metric: {"mean", "sd", "lo", "hi", "n_models"}}."""
    y_true, groups = np.asarray(y_true), np.asarray(groups)
    preds_a = np.atleast_2d(np.asarray(preds_a))
    if preds_b is not None:
        preds_b = np.atleast_2d(np.asarray(preds_b))
        if preds_b.shape != preds_a.shape:
            raise ValueError(f"paired banks differ in shape: {preds_a.shape} and {preds_b.shape}")
    names, g = np.unique(groups, return_inverse=True)
    both = preds_a if preds_b is None else np.r_[preds_a, preds_b]
    binary = set(np.unique(y_true)) <= {0, 1} and set(np.unique(both)) <= {0, 1}
    idx = np.random.default_rng(random_state).integers(0, len(y_true), size=(n_boot, len(y_true)))

    def per_model(preds: np.ndarray, resample: np.ndarray | None) -> dict[str, np.ndarray]:
        """{metric: [M] (point) or [M, B] (bootstrap)}"""
        out: dict[str, list] = {}
        for p in preds:
            for k, v in group_count_metrics(y_true, p, g, len(names), binary=binary, idx=resample).items():
                out.setdefault(k, []).append(v if resample is not None else v[0])
        return {k: np.asarray(v) for k, v in out.items()}

    point, boot = per_model(preds_a, None), per_model(preds_a, idx)
    if preds_b is not None:
        pb, bb = per_model(preds_b, None), per_model(preds_b, idx)
        point = {k: pb[k] - point[k] for k in point}
        boot = {k: bb[k] - boot[k] for k in boot}
    q = [alpha / 2, 1 - alpha / 2]
    res = {}
    for k in point:
        means = np.nanmean(boot[k], axis=0)  # [B]: the bank mean in each resample
        res[k] = {"mean": float(np.nanmean(point[k])),
                  "sd": float(np.nanstd(point[k], ddof=1)) if len(point[k]) > 1 else float("nan"),
                  "lo": float(np.nanquantile(means, q[0])), "hi": float(np.nanquantile(means, q[1])),
                  "n_models": int(len(point[k]))}
    return res


def bank_by_group(y_true: np.ndarray, preds: np.ndarray, groups: np.ndarray) -> pd.DataFrame:
    """Per group, fairlearn's rates (accuracy; for a binary task selection rate, TPR and FPR) averaged over every
    model of a bank (``preds`` [M, n]); one row per group, with ``n_models``."""
    y_true, groups = np.asarray(y_true), np.asarray(groups)
    preds = np.atleast_2d(np.asarray(preds))
    binary = set(np.unique(y_true)) <= {0, 1} and set(np.unique(preds)) <= {0, 1}
    metrics = {"accuracy": accuracy_score}
    if binary:
        metrics |= {"selection_rate": selection_rate, "tpr": true_positive_rate, "fpr": false_positive_rate}
    frames = [MetricFrame(metrics=metrics, y_true=y_true, y_pred=p, sensitive_features=groups).by_group for p in preds]
    out = pd.concat(frames).groupby(level=0, sort=True).mean()
    out.index.name = "group"
    return out.reset_index().assign(n_models=len(preds))
