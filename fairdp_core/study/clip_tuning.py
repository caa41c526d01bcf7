"""Choosing DP-SGD's clipping bound C privately: a DP quantile of the per-sample gradient norms, then DP-SGD at that C
with the quantile's privacy cost composed into the accountant.

The usual advice (monitor the per-sample gradient norms, set C at their 50th–90th percentile) reads every private
record: done on the training data it is tuning outside ε. Here the percentile is released with the exponential
mechanism over a fixed, public grid of candidate bounds (Smith 2011; the standard DP quantile): candidate c scores
u(c) = −|#{i : ‖g_i‖ ≤ c} − p·n|, whose sensitivity under adding or removing one record is at most 1, and is drawn
with probability ∝ exp(ε_q · u(c) / 2). That release is ε_q-DP (pure), hence (α, min(ε_q, α ε_q² / 2))-RDP for
every order α (Bun & Steinke 2016, Prop. 1.4 and 3.3), and composes with DP-SGD's RDP curve by addition at each
order: :func:`composed_epsilon` reports the total, :func:`calibrate_sigma_with_quantile` finds the σ that keeps
the total at the target ε.

The norms are those of the initial model (seeded, PyTorch's default init) on the training records, through the
engine's exact per-sample backends. :func:`nonprivate_percentile` gives the same percentile without noise, for
comparison only: choosing C from it is tuning outside ε, and every output says so.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["CANDIDATES", "calibrate_sigma_with_quantile", "composed_epsilon", "dp_quantile", "gradient_norms",
           "nonprivate_percentile", "quantile_probabilities", "tune_clip"]

# the public candidate grid: 241 bounds from 1e-3 to 1e3, 40 per decade
CANDIDATES = np.logspace(-3, 3, 241)


def quantile_probabilities(norms: np.ndarray, p: float, epsilon_q: float,
                           candidates: np.ndarray = CANDIDATES) -> np.ndarray:
    """The exponential mechanism's distribution over ``candidates``: ∝ exp(ε_q · u(c) / 2), u(c) = −|#{‖g‖ ≤ c} −
    p·n| (sensitivity 1)."""
    if not 0 < p < 1:
        raise ValueError(f"quantile p must be in (0, 1), got {p}")
    if not epsilon_q > 0:
        raise ValueError(f"epsilon_q must be positive, got {epsilon_q}")
    norms = np.sort(np.asarray(norms, float))
    below = np.searchsorted(norms, candidates, side="right")
    u = -np.abs(below - p * len(norms))
    logits = epsilon_q * u / 2.0
    w = np.exp(logits - logits.max())
    return w / w.sum()


def dp_quantile(norms: np.ndarray, p: float, epsilon_q: float, *, rng: np.random.Generator,
                candidates: np.ndarray = CANDIDATES) -> float:
    """One ε_q-DP release of the p-quantile of ``norms`` (a candidate bound)."""
    return float(rng.choice(candidates, p=quantile_probabilities(norms, p, epsilon_q, candidates)))


def nonprivate_percentile(norms: np.ndarray, p: float) -> float:
    """The exact p-quantile: NOT private (tuning outside ε); for comparison with the DP release only."""
    return float(np.quantile(np.asarray(norms, float), p))


_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [80, 128, 256, 512]


def composed_epsilon(sigma: float, *, sample_rate: float, steps: int, delta: float, epsilon_q: float) -> float:
    """(ε, δ) of DP-SGD (Poisson rate q, T steps, noise multiplier σ; Opacus's RDP analysis) composed with one
    ε_q-DP quantile release: RDP adds at each order α, the release contributing min(ε_q, α ε_q² / 2)."""
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

    rdp = np.asarray(compute_rdp(q=sample_rate, noise_multiplier=sigma, steps=steps, orders=_ORDERS), float)
    orders = np.asarray(_ORDERS, float)
    rdp = rdp + np.minimum(epsilon_q, orders * epsilon_q ** 2 / 2.0)
    eps, _ = get_privacy_spent(orders=_ORDERS, rdp=rdp, delta=delta)
    return float(eps)


def calibrate_sigma_with_quantile(target_epsilon: float, *, sample_rate: float, steps: int, delta: float,
                                  epsilon_q: float, rel_tol: float = 1e-3) -> float:
    """The smallest σ (to ``rel_tol``) whose composed ε (DP-SGD plus the quantile release) is at most the target."""
    if epsilon_q >= target_epsilon:
        raise ValueError(f"the quantile's ε_q = {epsilon_q} leaves nothing of ε = {target_epsilon} for training")

    def eps(s: float) -> float:
        return composed_epsilon(s, sample_rate=sample_rate, steps=steps, delta=delta, epsilon_q=epsilon_q)

    lo, hi = 0.05, 1.0
    while eps(hi) > target_epsilon:
        lo, hi = hi, hi * 2
        if hi > 1e4:
            raise ValueError(f"no σ reaches ε = {target_epsilon} with ε_q = {epsilon_q}")
    while hi / lo > 1 + rel_tol:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if eps(mid) <= target_epsilon else (mid, hi)
    return hi


def gradient_norms(X: np.ndarray, y: np.ndarray, *, model: str = "lr", n_classes: int, seed: int = 0,
                   hidden: int = 256, batch: int = 4096) -> np.ndarray:
    """Per-sample gradient norms [n] of the initial model (the engine's init from ``seed``) on (X, y)."""
    from ..engine.backends import make_backend, stack_params
    from ..engine.trainer import _init_module
    from ..models import build_model

    module = _init_module(build_model(model, tuple(X.shape[1:]), n_classes, hidden=hidden),
                          torch.Generator().manual_seed(seed))
    params = stack_params([module])
    be = make_backend(module)
    out = []
    for s in range(0, len(y), batch):
        xb = torch.as_tensor(np.ascontiguousarray(X[s:s + batch], dtype=np.float32))[None]
        yb = torch.as_tensor(np.asarray(y[s:s + batch], dtype=np.int64))[None]
        norms, _ = be.per_sample(params, xb, yb)
        out.append(norms[0].detach().numpy())
    return np.concatenate(out)


def tune_clip(X: np.ndarray, y: np.ndarray, *, n_classes: int, model: str = "lr", quantile: float = 0.5,
              epsilon_q: float = 0.1, target_epsilon: float | None = None, sample_rate: float | None = None,
              steps: int | None = None, delta: float = 1e-5, seed: int = 0) -> dict[str, object]:
    """The DP clipping bound: the ε_q-DP ``quantile`` of the initial model's per-sample gradient norms. With
    ``target_epsilon`` (and DP-SGD's q and T) it also returns the σ that keeps DP-SGD at that C plus the quantile
    release within the target, and the ε of each part. The non-private percentile is given beside it, marked as
    tuning outside ε."""
    norms = gradient_norms(X, y, model=model, n_classes=n_classes, seed=seed)
    clip = dp_quantile(norms, quantile, epsilon_q, rng=np.random.default_rng([seed, 7]))
    out: dict[str, object] = {
        "clip": clip, "quantile": quantile, "epsilon_quantile": epsilon_q, "mechanism":
        "exponential mechanism over 241 log-spaced public candidates in [1e-3, 1e3], u = −|#{‖g‖ ≤ c} − p·n| "
        "(sensitivity 1), on the initial model's per-sample gradient norms",
        "n": int(len(norms)),
        "nonprivate_percentile": {"value": nonprivate_percentile(norms, quantile),
                                  "note": "tuning outside ε: reads every record without noise; comparison only"},
    }
    if target_epsilon is not None:
        if sample_rate is None or steps is None:
            raise ValueError("target_epsilon needs DP-SGD's sample_rate and steps")
        sigma = calibrate_sigma_with_quantile(target_epsilon, sample_rate=sample_rate, steps=steps, delta=delta,
                                              epsilon_q=epsilon_q)
        out.update(sigma=sigma, sample_rate=sample_rate, steps=steps, delta=delta, accountant="rdp",
                   epsilon_total=composed_epsilon(sigma, sample_rate=sample_rate, steps=steps, delta=delta,
                                                  epsilon_q=epsilon_q),
                   epsilon_training_alone=composed_epsilon(sigma, sample_rate=sample_rate, steps=steps, delta=delta,
                                                           epsilon_q=0.0))
    return out
