"""Signals the attacks read, computed in the train stage from a bank's outputs (no attack code here)."""

from __future__ import annotations

import numpy as np

__all__ = ["logit_confidence"]


def logit_confidence(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Logit-scaled confidence φ = log(p_y / (1 − p_y)) = z_y − logsumexp(z_{≠y}) (Carlini et al. 2022, §IV-B).

    logits [M, N, C], y [N] -> [M, N], computed stably in float64.
    """
    z = np.asarray(logits, dtype=np.float64)
    zy = np.take_along_axis(z, np.asarray(y)[None, :, None].repeat(z.shape[0], 0), axis=2)[..., 0]
    others = z.copy()
    np.put_along_axis(others, np.asarray(y)[None, :, None].repeat(z.shape[0], 0), -np.inf, axis=2)
    mx = others.max(axis=2)
    lse = mx + np.log(np.exp(others - mx[..., None]).sum(axis=2))
    return zy - lse
