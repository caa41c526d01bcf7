"""Train on synthetic, test on real: the downstream classifier, its utility overall and per group, and the
synthetic table's fidelity to the real training pool (TV of 1-way and 2-way marginals, correlation gap)."""

from __future__ import annotations

import itertools

import numpy as np
import torch
from sklearn.metrics import accuracy_score, f1_score, roc_auc_score
from torch import nn

from ..models import build_model
from .dpdsyn import reinit_
from .layout import Layout, discretise

__all__ = ["audit_losses", "fidelity", "fit_classifier", "predict_proba", "utility"]


def fit_classifier(X: np.ndarray, y: np.ndarray, *, n_classes: int, model: str = "lr", epochs: float = 3.0,
                   lr: float = 0.5, batch_size: int = 256, hidden: int = 256, seed: int) -> nn.Module:
    """The downstream classifier: the project's ``model`` trained by plain (non-private) minibatch SGD on a table
    X [n, d], y [n] (synthetic or real), shuffled batches of ``batch_size``, ``epochs`` passes, step ``lr``."""
    gen = torch.Generator().manual_seed(seed)
    m = reinit_(build_model(model, (X.shape[1],), n_classes, hidden=hidden), gen)
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    Xt, yt = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long)
    steps = max(1, int(round(epochs * len(yt) / batch_size)))
    order = torch.empty(0, dtype=torch.long)
    for _ in range(steps):
        if len(order) < batch_size:
            order = torch.cat([order, torch.randperm(len(yt), generator=gen)])
        b, order = order[:batch_size], order[batch_size:]
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(m(Xt[b]), yt[b]).backward()
        opt.step()
    return m.eval()


@torch.no_grad()
def predict_proba(clf: nn.Module, X: np.ndarray) -> np.ndarray:
    """Class probabilities of ``clf`` on X: float64 [n, C]."""
    return torch.softmax(clf(torch.as_tensor(X, dtype=torch.float32)), 1).numpy().astype(np.float64)


def utility(p: np.ndarray, y: np.ndarray, group: np.ndarray, group_names: tuple[str, ...]) -> list[dict]:
    """Accuracy, ROC AUC (binary: positive class 1) and F1 (binary; macro otherwise) of predicted probabilities
    ``p`` [n, C] on the real test split, overall and per group: rows ``{"group": "all" | name, "n", "accuracy",
    "auc", "f1", "positive_rate"}`` (AUC None where a group has one class)."""
    p = np.asarray(p, dtype=np.float64)
    pred = p.argmax(1)
    binary = p.shape[1] == 2
    rows = []
    for name, mask in [("all", np.ones(len(y), bool))] + [(g, group == k) for k, g in enumerate(group_names)]:
        yy, pp, pr = y[mask], p[mask], pred[mask]
        auc = None
        if len(np.unique(yy)) > 1:
            auc = float(roc_auc_score(yy, pp[:, 1])) if binary else float(
                roc_auc_score(yy, pp, multi_class="ovr", labels=list(range(p.shape[1]))))
        rows.append({"group": name, "n": int(mask.sum()), "accuracy": float(accuracy_score(yy, pr)), "auc": auc,
                     "f1": float(f1_score(yy, pr, average="binary" if binary else "macro", zero_division=0)),
                     "positive_rate": float(np.mean(pr == 1))})
    return rows


@torch.no_grad()
def audit_losses(clf: nn.Module, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Cross-entropy of ``clf`` on each record (the audit signal): float64 [n]."""
    logits = clf(torch.as_tensor(X, dtype=torch.float32))
    return nn.functional.cross_entropy(logits, torch.as_tensor(y, dtype=torch.long),
                                       reduction="none").numpy().astype(np.float64)


def _tv(a: np.ndarray, b: np.ndarray, size: int) -> float:
    pa = np.bincount(a, minlength=size) / max(len(a), 1)
    pb = np.bincount(b, minlength=size) / max(len(b), 1)
    return 0.5 * float(np.abs(pa - pb).sum())


def fidelity(X_real: np.ndarray, y_real: np.ndarray, X_syn: np.ndarray, y_syn: np.ndarray, layout: Layout, *,
             bins: int = 10) -> dict[str, float]:
    """Fidelity of a synthetic table to the real one, over the record's columns and the label: mean (and max)
    total-variation distance of the 1-way and of all 2-way marginals (numerics in ``bins`` public equal-width bins
    of [-1, 1], categoricals by block), and the correlation gap, the mean |corr_real − corr_syn| over the pairs of
    encoded features and the label (a constant column's correlations count as 0)."""
    cr = np.concatenate([discretise(X_real, layout, bins=bins), np.asarray(y_real)[:, None]], 1)
    cs = np.concatenate([discretise(X_syn, layout, bins=bins), np.asarray(y_syn)[:, None]], 1)
    sizes = [bins] * len(layout.numeric) + [e - s for _, s, e in layout.blocks] + [int(max(cr[:, -1].max(),
                                                                                          cs[:, -1].max())) + 1]
    one = [_tv(cr[:, j], cs[:, j], sizes[j]) for j in range(cr.shape[1])]
    two = [_tv(cr[:, i] * sizes[j] + cr[:, j], cs[:, i] * sizes[j] + cs[:, j], sizes[i] * sizes[j])
           for i, j in itertools.combinations(range(cr.shape[1]), 2)]

    def corr(X, y):
        Z = np.concatenate([np.asarray(X, np.float64), np.asarray(y, np.float64)[:, None]], 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            c = np.corrcoef(Z, rowvar=False)
        return np.nan_to_num(c, nan=0.0)

    iu = np.triu_indices(X_real.shape[1] + 1, 1)
    gap = np.abs(corr(X_real, y_real) - corr(X_syn, y_syn))[iu]
    return {"tv_1way": float(np.mean(one)), "tv_1way_max": float(np.max(one)), "tv_2way": float(np.mean(two)),
            "tv_2way_max": float(np.max(two)), "corr_gap": float(np.mean(gap))}
