"""Attribute inference, per group, on members and non-members (docs/study.md, 'Beyond membership').

The adversary knows a record (x without its sensitive attribute a, and its label y) and queries a trained model.

- **Lowest loss** (the attribute is a model input; Yeom et al. 2018, Fredrikson et al. 2014): set a's one-hot block
  to each value of its public vocabulary in turn, and guess the value whose loss on y is lowest (ties broken at
  random). A value maps to a group (COMPAS: six race values, two groups).
- **Meta-classifier** (the attribute is not an input): per attacked model, a balanced logistic regression on the
  model's log-probabilities placed in the block of the record's label (and the label itself), fitted on public
  records with known attribute (the test split, which no model trained on) queried through the same model.
- **Baselines without the model**, for both: the label alone (the balanced-accuracy-optimal rule per label) and the
  record's other features with its label (imputation, fitted on the same public records): what the distribution
  says. An attack that does no better than imputation learns nothing from the model about the attribute.

Success is scored on the audit records, where every record is a member of R models and a non-member of the other R
(rows 2r, 2r + 1 of the design are complementary). The member − non-member gap in a group is the model's leak of
its *training records* beyond the distribution, for that group; balanced accuracy against its chance level 1/K
(what any guess independent of the attribute achieves, whatever the group sizes) is the overall advantage.
Intervals: the crossed records × model-pairs t intervals of :func:`fairdp_core.audit.inference.group_inference`
(coverage checked by simulation for per-(model, record) contributions of this form: ``fairdp coverage``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from ..audit.inference import _group_parts, _pairs, group_inference, variance_parts

__all__ = ["AttributeResult", "attribute_inference_summary", "imputation_guesses", "label_only_guesses",
           "lowest_loss_guesses", "meta_classifier_guesses", "pair_inference"]


def lowest_loss_guesses(loss_fn: Callable[[np.ndarray, np.ndarray], np.ndarray], X: np.ndarray, y: np.ndarray,
                        columns: list[int] | np.ndarray, value_groups: np.ndarray, *,
                        rng: np.random.Generator, rtol: float = 1e-6) -> np.ndarray:
    """[M, N] guessed group of each record under each model.

    ``loss_fn(X, y)`` returns the per-model losses [M, N] (e.g. ``bank.evaluate(X, y)[0]``); ``columns`` are the
    attribute's one-hot columns in X (value v at ``columns[v]``), ``value_groups[v]`` the group of value v. Ties
    (within ``rtol``, e.g. a model that ignores the attribute) are broken uniformly at random with ``rng``.
    """
    columns = np.asarray(columns)
    if len(columns) != len(value_groups) or len(columns) < 2:
        raise ValueError(f"need one column per attribute value (at least 2): {len(columns)} columns, "
                         f"{len(value_groups)} values")
    losses = []
    for v in range(len(columns)):
        Xv = np.array(X, dtype=np.float32, copy=True)
        Xv[:, columns] = 0.0
        Xv[:, columns[v]] = 1.0
        losses.append(np.asarray(loss_fn(Xv, y), dtype=np.float64))
    L = np.stack(losses)  # [V, M, N]
    best = L.min(0)
    tie = L <= best + rtol * np.maximum(np.abs(best), 1e-12)
    priority = np.where(tie, rng.random(L.shape), -1.0)
    return np.asarray(value_groups)[priority.argmax(0)]


def _meta_features(logits: np.ndarray, y: np.ndarray, n_classes: int) -> np.ndarray:
    """[N, C·C + C]: the log-probabilities in the block of the record's label, and the label one-hot."""
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    onehot = np.eye(n_classes)[y]
    return np.concatenate([(onehot[:, :, None] * logp[:, None, :]).reshape(len(y), -1), onehot], axis=1)


def meta_classifier_guesses(public_logits: np.ndarray, public_y: np.ndarray, public_attr: np.ndarray,
                            target_logits: np.ndarray, target_y: np.ndarray, *, n_classes: int,
                            seed: int = 0) -> np.ndarray:
    """[M, N] guessed group from each model's outputs: per model m a balanced logistic regression (each group
    weighted by the inverse of its share: balanced accuracy is the metric) fitted on
    (``public_logits[m]`` [P, C], ``public_y``) → ``public_attr`` and applied to (``target_logits[m]`` [N, C],
    ``target_y``)."""
    from sklearn.linear_model import LogisticRegression

    M = public_logits.shape[0]
    out = np.empty((M, len(target_y)), dtype=np.int64)
    for m in range(M):
        clf = LogisticRegression(max_iter=2000, class_weight="balanced", random_state=seed % 2**32)
        clf.fit(_meta_features(public_logits[m], public_y, n_classes), public_attr)
        out[m] = clf.predict(_meta_features(target_logits[m], target_y, n_classes))
    return out


def label_only_guesses(public_y: np.ndarray, public_attr: np.ndarray, target_y: np.ndarray, *, n_classes: int,
                       n_models: int, n_groups: int | None = None) -> np.ndarray:
    """[n_models, N]: what the label alone says, the balanced-accuracy-optimal rule fitted on public records: per
    label y, the attribute value k maximising P(a = k | y) / P(a = k) (the majority per label would maximise raw
    accuracy and always guess the majority group). The same for every model."""
    K = int(n_groups or public_attr.max() + 1)
    prior = np.bincount(public_attr, minlength=K) / len(public_attr)
    best = np.zeros(n_classes, dtype=np.int64)
    for c in range(n_classes):
        a = public_attr[public_y == c]
        cond = np.bincount(a, minlength=K) / len(a) if len(a) else prior
        best[c] = int(np.argmax(np.where(prior > 0, cond / np.maximum(prior, 1e-12), -1.0)))
    return np.broadcast_to(best[target_y], (n_models, len(target_y))).copy()


def imputation_guesses(public_X: np.ndarray, public_y: np.ndarray, public_attr: np.ndarray, target_X: np.ndarray,
                       target_y: np.ndarray, *, n_classes: int, n_models: int, seed: int = 0) -> np.ndarray:
    """[n_models, N]: the attribute imputed from the record's other features and its label, without the model (a
    balanced logistic regression fitted on public records): what the data alone say. ``*_X`` must exclude the
    attribute's own columns. The same for every model."""
    from sklearn.linear_model import LogisticRegression

    def feats(X, y):
        return np.concatenate([np.asarray(X, np.float64).reshape(len(y), -1), np.eye(n_classes)[y]], axis=1)

    clf = LogisticRegression(max_iter=2000, class_weight="balanced", random_state=seed % 2**32)
    clf.fit(feats(public_X, public_y), public_attr)
    return np.broadcast_to(clf.predict(feats(target_X, target_y)), (n_models, len(target_y))).copy()


def pair_inference(c: np.ndarray, group: np.ndarray, n_groups: int, weights: dict[int, float], *,
                   alpha: float = 0.05) -> dict[str, float]:
    """Σ_k weights[k]·mean_k with its crossed records × model-pairs t interval, for contributions ``c`` [M, N] whose
    sum over models is the per-record quantity (:func:`~fairdp_core.audit.inference.group_inference`'s form)."""
    P = _pairs(np.asarray(c, float))  # [R, N]: model pairs are the independent units
    R = P.shape[0]
    every = _group_parts(P, np.asarray(group), n_groups)  # the audit's own per-group variance parts
    parts = {}
    for k in weights:
        if every[k] is None or every[k].get("single"):
            raise ValueError(f"group {k} has fewer than 2 records: no record variance to estimate")
        parts[k] = every[k]
    est = float(sum(w * parts[k]["mean"] for k, w in weights.items()))
    vp = variance_parts(parts, weights, R)
    df = min(vp["df"], R - 1)  # as group_inference: the pairs' main effect has R − 1 df
    h = float(stats.t.ppf(1 - alpha / 2, df)) * math.sqrt(vp["v"])
    return {"estimate": est, "lo": est - h, "hi": est + h, "se": math.sqrt(vp["v"]), "df": df}


@dataclass
class AttributeResult:
    """Per group (``table``: success on members and non-members, their gap, each with its interval) and overall
    (``overall``: success rate, the majority base rate, balanced accuracy against chance 1/K and the normalised
    advantage (balanced − 1/K)·K/(K − 1), with intervals)."""

    table: pd.DataFrame
    overall: dict[str, float] = field(default_factory=dict)


def attribute_inference_summary(guess: np.ndarray, membership: np.ndarray, group: np.ndarray, n_groups: int, *,
                                group_names: list[str] | tuple[str, ...] | None = None,
                                alpha: float = 0.05) -> AttributeResult:
    """Score guesses [M, N] of the audit records' group ``group`` [N] under the design ``membership`` [M, N]
    (rows 2r, 2r + 1 complementary: each record IN for R models, OUT for R)."""
    guess, membership, group = np.asarray(guess), np.asarray(membership, bool), np.asarray(group)
    M, N = guess.shape
    if membership.shape != (M, N) or M % 2 or M < 4:
        raise ValueError(f"guesses {guess.shape} and membership {membership.shape} must be [2R, N] with R >= 2")
    if not (membership[0::2] ^ membership[1::2]).all():
        raise ValueError("rows 2r and 2r + 1 of the membership must be complementary (the audit design)")
    R = M // 2
    S = (guess == group[None, :]).astype(np.float64)
    names = list(group_names) if group_names is not None else [str(k) for k in range(n_groups)]
    parts = {"all": S / M, "members": S * membership / R, "non_members": S * ~membership / R,
             "gap": S * (membership.astype(float) - (~membership).astype(float)) / R}
    inf = {key: group_inference(c, group, n_groups, alpha=alpha) for key, c in parts.items()}
    guessed_share = np.array([(guess == k).mean() for k in range(n_groups)])
    rows = []
    for k in range(n_groups):
        n_k = int((group == k).sum())
        if not n_k:
            continue
        row = {"group": names[k], "n_records": n_k, "share": n_k / N, "guessed_share": float(guessed_share[k])}
        for key, r in inf.items():
            row[key] = float(r["gpr"][k])
            row[f"{key}_lo"], row[f"{key}_hi"] = float(r["gpr_lo"][k]), float(r["gpr_hi"][k])
        se, df = inf["gap"]["gpr_se"][k], inf["gap"]["gpr_df"][k]
        row["gap_p"] = float(2 * stats.t.sf(abs(row["gap"]) / se, df)) if np.isfinite(se) and se > 0 else float("nan")
        rows.append(row)
    present = [k for k in range(n_groups) if (group == k).sum() >= 2]
    K = len(present)
    bal = pair_inference(parts["all"], group, n_groups, {k: 1.0 / K for k in present}, alpha=alpha)
    scale = K / (K - 1)
    counts = np.bincount(group, minlength=n_groups)
    overall = {
        "success": float(S.mean()), "base_rate": float(counts.max() / N),
        "balanced": bal["estimate"], "balanced_lo": bal["lo"], "balanced_hi": bal["hi"], "chance": 1.0 / K,
        "advantage": (bal["estimate"] - 1 / K) * scale, "advantage_lo": (bal["lo"] - 1 / K) * scale,
        "advantage_hi": (bal["hi"] - 1 / K) * scale, "advantage_df": bal["df"],
        "n_models": M, "n_records": N,
    }
    gap_all = pair_inference(parts["gap"], group, n_groups, {k: counts[k] / counts[present].sum() for k in present},
                             alpha=alpha)
    overall.update({"gap": gap_all["estimate"], "gap_lo": gap_all["lo"], "gap_hi": gap_all["hi"]})
    return AttributeResult(pd.DataFrame(rows), overall)
