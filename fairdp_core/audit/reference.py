"""The attacks as their authors' code defines them, beside the project's: a parity table for the reports.

Written from the papers and from how the released code behaves, not copied from it:

- **LiRA** (Carlini et al. 2022; TensorFlow Privacy's ``research/mi_lira_2021``): per record, the IN and OUT
  Gaussians of φ fitted on the shadow models with the MEDIAN as the centre and ``np.std`` as the spread; online
  score log N(φ; μ_in, σ_in²) − log N(φ; μ_out, σ_out²); offline score −log N(φ; μ_out, σ_out²), a TWO-sided test
  (a φ far below the OUT mean also scores as member-like). The project uses the mean (the Gaussian's maximum
  likelihood centre) and, offline, the one-sided (φ − μ_out) / σ_out of the paper's Algorithm 1.
- **RMIA** (Zarifzadeh et al. 2024): LR(x) = p(x | θ) / Pr(x), Pr(x) the mean of p(x) over the reference models
  (online), or ½((1 + a)·Pr_OUT(x) + (1 − a)) (offline); the score is the share of the population z with
  LR(x) / LR(z) ≥ γ. The reference here is the paper's formula with the population rule this project used before
  (every OUT record of the target model but x; offline references: the other fold's models x is OUT of). It is
  not ML Privacy Meter's code, whose population is separate data OUT of every model, which counts LR(x)/LR(z) > 1
  strictly at γ = 1, keeps the top-n OUT signals offline and tunes a on the target's paired model. The project
  scores against the OUT records of the other half of the audited records, so that members and non-members meet
  one population, and takes offline references from the model's own fold
  (:func:`fairdp_core.audit.rmia.rmia_scores`).

:func:`parity_table` scores one bank both ways and reports, per attack: the Spearman correlation of the two scores
over (model, record) pairs, each one's AUC, and TPR at 1% FPR per group.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .attacks import lira_scores, pair_folds
from .rmia import _auc, rmia_scores

__all__ = ["lira_reference", "parity_table", "rmia_reference"]


def _fit(phi: np.ndarray, rows: np.ndarray, side: np.ndarray, centre) -> tuple[np.ndarray, np.ndarray]:
    """Per record: ``centre`` and np.std of φ over the models ``rows`` where ``side`` [M, m] holds."""
    x = np.where(side[rows], phi[rows], np.nan)
    return centre(x, axis=0), np.nanstd(x, axis=0)


def lira_reference(phi: np.ndarray, membership: np.ndarray, *, mode: str = "online", centre=np.nanmedian
                   ) -> np.ndarray:
    """LiRA as the reference code scores it: median centres (``centre``), per-record ``np.std`` spreads, shadow
    models = the other fold's (as the project, so that only the definitions differ); offline two-sided."""
    from scipy.stats import norm

    phi, lab = np.asarray(phi, float), np.asarray(membership, bool)
    folds = pair_folds(phi.shape[0])
    out = np.empty_like(phi)
    for f in np.unique(folds):
        target, shadow = folds == f, np.flatnonzero(folds != f)
        mu_out, sd_out = _fit(phi, shadow, ~lab, centre)
        sd_out = np.maximum(sd_out, 1e-30)
        if mode == "offline":
            out[target] = -norm.logpdf(phi[target], mu_out, sd_out)
            continue
        mu_in, sd_in = _fit(phi, shadow, lab, centre)
        out[target] = norm.logpdf(phi[target], mu_in, np.maximum(sd_in, 1e-30)) - norm.logpdf(phi[target], mu_out,
                                                                                             sd_out)
    return out


def rmia_reference(phi: np.ndarray, membership: np.ndarray, *, gamma: float = 1.0, mode: str = "online",
                   a: float = 0.3) -> np.ndarray:
    """RMIA by the paper's formula with the earlier population rule: the population of model j is every record OUT
    of j (x itself left out), Pr(x) over the other fold's models (offline: those x is OUT of, with the linear
    correction at ``a``)."""
    phi, lab = np.asarray(phi, float), np.asarray(membership, bool)
    M, m = phi.shape
    folds = pair_folds(M)
    p = 1.0 / (1.0 + np.exp(-np.clip(phi, -700, 700)))
    lr = np.empty_like(p)
    for f in np.unique(folds):
        target, ref = folds == f, folds != f
        if mode == "offline":
            out = ~lab[ref]
            pr = 0.5 * ((1 + a) * (p[ref] * out).sum(0) / out.sum(0) + (1 - a))
        else:
            pr = p[ref].mean(0)
        lr[target] = p[target] / pr
    score = np.empty_like(p)
    for j in range(M):
        pop = np.sort(lr[j, ~lab[j]])
        below = np.searchsorted(pop, lr[j] / gamma, side="right").astype(float)
        self_counted = ~lab[j] & (lr[j] <= lr[j] / gamma)
        score[j] = (below - self_counted) / (len(pop) - (~lab[j]))
    return score


def _tpr_at(s: np.ndarray, lab: np.ndarray, fpr: float = 0.01) -> float:
    thr = np.quantile(s[~lab], 1 - fpr)
    return float((s[lab] > thr).mean())


def parity_table(phi: np.ndarray, membership: np.ndarray, groups: np.ndarray, names: list[str], *,
                 bank: str) -> pd.DataFrame:
    """One row per attack: the project's score against its reference definition on one bank (``phi`` [M, m],
    ``membership`` [M, m], ``groups`` [m] coded 0..K−1 and named ``names``)."""
    from scipy.stats import spearmanr

    lab = np.asarray(membership, bool)
    pairs = {
        "LiRA online": (lira_scores(phi, lab, mode="online", fix_variance=False),
                        lira_reference(phi, lab, mode="online"), "the mean, not the median, as centre"),
        "LiRA offline": (lira_scores(phi, lab, mode="offline", fix_variance=False),
                         lira_reference(phi, lab, mode="offline"),
                         "one-sided (the paper), not two-sided (the code)"),
        "RMIA (γ = 1)": (rmia_scores(phi, lab), rmia_reference(phi, lab),
                         "population: the other half's OUT records"),
        "RMIA (γ = 2)": (rmia_scores(phi, lab, gamma=2.0), rmia_reference(phi, lab, gamma=2.0),
                         "as γ = 1"),
        "RMIA offline (a = 0.3)": (rmia_scores(phi, lab, mode="offline", a=0.3),
                                   rmia_reference(phi, lab, mode="offline", a=0.3),
                                   "as online; references from the model's own fold"),
    }
    rows = []
    for name, (ours, ref, differs) in pairs.items():
        row = {"bank": bank, "attack": name, "spearman": float(spearmanr(ours.ravel(), ref.ravel())[0]),
               "auc_project": _auc(ours[lab], ours[~lab]), "auc_reference": _auc(ref[lab], ref[~lab])}
        for k, g in enumerate(names):
            cols = np.asarray(groups) == k
            row[f"tpr1_project_{g}"] = _tpr_at(ours[:, cols], lab[:, cols])
            row[f"tpr1_reference_{g}"] = _tpr_at(ref[:, cols], lab[:, cols])
        row["differs"] = differs
        rows.append(row)
    return pd.DataFrame(rows)
