"""Privacy accounting with Opacus's accountants: calibrating σ to (ε, δ, q, T) and reporting ε actually spent.

DP-SGD-S releases, at every step and on the same Poisson batch, a clipped gradient sum (L2 sensitivity
max_k C_k, noise σ_g · max_k C_k) and a 2K count vector (below_k, above_k) of the batch's samples per group whose
gradient norm is at most / above Q_k (L2 sensitivity 1 under add/remove: a record falls in exactly one cell and
adds 1 to it; noise σ_b on every cell). Scaling each part by its noise std, the pair is one
Gaussian mechanism with noise multiplier

    σ_eff = (σ_g⁻² + σ_b⁻²)^(-1/2)

(Andrew et al. 2021, arXiv 1905.03871, Theorem 1; Opacus's AdaClip uses the same form with 2σ_b because it
releases a centred count of sensitivity 1/2). The accountant is charged σ_eff; given a target ε we calibrate σ_eff
and derive σ_g = (σ_eff⁻² − σ_b⁻²)^(-1/2), which requires σ_b > σ_eff.

DP-SGD-S with the paper code's rule (C_k = C0 · min(s, ‖ḡ‖/‖ḡ_k‖), DP-correct) releases, on the same batch, the
clipped gradient sum, K per-group sums of per-sample gradients clipped at C0 (a record changes one of them by a
vector of norm ≤ C0; noise σ_s·C0 per coordinate) and K group counts (sensitivity 1, noise σ_b):

    σ_eff = (σ_g⁻² + σ_s⁻² + σ_b⁻²)^(-1/2),   σ_g = (σ_eff⁻² − σ_s⁻² − σ_b⁻²)^(-1/2).

The rivals, each one Gaussian mechanism per step on the same batch: DPSGD-F releases a 2K count vector (above /
at most C0 per group, sensitivity 1, noise σ_b) and DPSGD-Global-Adapt one count (samples above τ·Z, sensitivity
1, noise σ_b): σ_eff = (σ_g⁻² + σ_b⁻²)^(-1/2). AdaClip releases a centred count Σ_i (b_i − ½) (sensitivity ½,
noise σ_b, so noise multiplier 2σ_b): σ_eff = (σ_g⁻² + (2σ_b)⁻²)^(-1/2), Opacus's AdaClip split.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

from ..rules.base import split_sigma

__all__ = ["Accountant", "Accounting", "bank_accounting", "calibrate", "calibrate_sigma", "combine_sigmas", "epsilon",
           "history_epsilon", "prv_eps_error", "split_sigma"]

Accountant = Literal["rdp", "prv"]


def prv_eps_error(target_epsilon: float | None) -> float:
    """The error margin handed to Opacus's PRV accountant, whose ε is an upper bound ε̂ + margin: its default 0.01
    alone exceeds a target ε of 0.01, and calibrating against it inflated σ 9–23× there (Adult: 943 against 41).
    The margin is a tenth of the target below ε = 0.1 (so ε spent is at least 90% estimate), 0.01 above."""
    if target_epsilon is None or target_epsilon >= 0.1:
        return 0.01
    return max(target_epsilon / 10.0, 1e-5)


def history_epsilon(history: list[tuple[float, float, int]], *, delta: float, accountant: Accountant = "rdp",
                    target_epsilon: float | None = None) -> float:
    """ε of a composition of (noise multiplier, sample rate, steps) Gaussian mechanisms (Poisson-subsampled where
    the rate is < 1) by the Opacus accountant. For PRV the error margin is :func:`prv_eps_error` of
    ``target_epsilon``; without a target, an ε below 0.1 is recomputed once at a tenth of its first value."""
    if any(s <= 0 for s, _, t in history if t > 0):
        return math.inf
    history = [(s, q, t) for s, q, t in history if t > 0]
    if not history:
        return 0.0
    # imported here, not at module level: Opacus's package imports torch.distributed and SciPy (2.4 s of every
    # train stage's start), which a non-private bank never needs
    from opacus.accountants import create_accountant

    acc = create_accountant(accountant)
    acc.history = list(history)
    if accountant != "prv":
        return float(acc.get_epsilon(delta=delta))
    eps = float(acc.get_epsilon(delta=delta, eps_error=prv_eps_error(target_epsilon)))
    if target_epsilon is None and eps < 0.1:
        eps = float(acc.get_epsilon(delta=delta, eps_error=prv_eps_error(eps)))
    return eps


def epsilon(noise_multiplier: float, *, sample_rate: float, steps: int, delta: float,
            accountant: Accountant = "rdp", target_epsilon: float | None = None) -> float:
    """ε spent by ``steps`` Poisson-subsampled Gaussian steps with this noise multiplier (∞ when σ = 0);
    ``target_epsilon`` sets PRV's error margin (:func:`prv_eps_error`)."""
    if noise_multiplier <= 0:
        return math.inf
    return history_epsilon([(noise_multiplier, sample_rate, steps)], delta=delta, accountant=accountant,
                           target_epsilon=target_epsilon)


def calibrate(target_epsilon: float, eps: Callable[[float], float], *, rel_tol: float = 1e-3,
              cap: float = 1e6, what: str = "") -> float:
    """The smallest noise multiplier σ (to ``rel_tol``) with ``eps(σ)`` at most ``target_epsilon``; never overshoots.

    Bisection on log σ with the accountant as the oracle (the same search as Opacus's ``get_noise_multiplier``,
    stopped on σ's relative width rather than on ε, which takes fewer accountant calls for large ε)."""
    hi = 1.0
    while eps(hi) > target_epsilon:
        hi *= 2.0
        if hi > cap:
            raise ValueError(f"no σ ≤ {cap:g} reaches ε = {target_epsilon}{what}")
    lo = hi / 2.0
    while lo > 1e-3 and eps(lo) <= target_epsilon:
        hi, lo = lo, lo / 2.0
    while (hi - lo) / hi > rel_tol:  # invariant: eps(hi) <= target < eps(lo)
        mid = math.sqrt(lo * hi)
        if eps(mid) <= target_epsilon:
            hi = mid
        else:
            lo = mid
    return float(hi)


def calibrate_sigma(target_epsilon: float, *, sample_rate: float, steps: int, delta: float,
                    accountant: Accountant = "rdp", rel_tol: float = 1e-3) -> float:
    """The smallest noise multiplier (to ``rel_tol``) whose ε is at most ``target_epsilon``; never overshoots
    (:func:`calibrate` with :func:`epsilon` as the oracle, PRV at the target's error margin)."""
    if not (target_epsilon > 0 and 0 < delta < 1 and 0 < sample_rate <= 1 and steps >= 1):
        raise ValueError(f"cannot calibrate: ε={target_epsilon}, δ={delta}, q={sample_rate}, T={steps}")
    return calibrate(target_epsilon,
                     lambda s: epsilon(s, sample_rate=sample_rate, steps=steps, delta=delta, accountant=accountant,
                                       target_epsilon=target_epsilon),
                     rel_tol=rel_tol, what=f" (q={sample_rate}, T={steps}, δ={delta})")


def combine_sigmas(sigma_g: float, *sigma_stats: float) -> float:
    """σ_eff = (σ_g⁻² + Σ_j σ_j⁻²)^(-1/2): the one Gaussian mechanism equivalent to the clipped gradient sum and
    the statistics released with it on the same batch, each noised at σ_j times its own sensitivity (Andrew et al.
    2021, Theorem 1, for one statistic; the same argument for several: scaled by their noise, the releases form
    one vector whose squared sensitivity is the sum of theirs)."""
    if sigma_g <= 0 or any(s <= 0 for s in sigma_stats):
        return 0.0
    return (sigma_g ** -2 + sum(s ** -2 for s in sigma_stats)) ** -0.5


@dataclass(frozen=True)
class Accounting:
    """What one trained model spent, everything a report must state alongside its ε.

    ``epsilon`` is the accountant's ε for (``sigma_eff``, ``sample_rate``, ``steps``, ``delta``);
    ``guaranteed`` is False for the DP-SGD-S variants whose statistics are not privatised (the non-private
    description, the paper's code as it is).
    """

    algorithm: str
    sigma_g: float
    sigma_b: float | None
    sigma_eff: float
    sample_rate: float
    steps: int
    delta: float
    accountant: str
    epsilon: float
    target_epsilon: float | None
    sampling: str = "poisson"
    guaranteed: bool = True
    public_assumptions: tuple[str, ...] = ()
    sigma_s: float | None = None  # the paper rule's group-sum noise multiplier (None for the other algorithms)

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["public_assumptions"] = list(self.public_assumptions)
        return d


def bank_accounting(accounting: list[Accounting]) -> dict[str, object]:
    """What a report states for a bank: the settings every model shares, ε as the MAXIMUM over the bank's models
    (``epsilon``; ``epsilon_range`` [min, max]) and q as its range (``sample_rate_range``; ``sample_rate`` is the
    largest q, the one σ was calibrated at). Never model 0's alone: models train on pools of different sizes."""
    if not accounting:
        raise ValueError("a bank has at least one model")
    worst = max(accounting, key=lambda a: (a.epsilon, a.sample_rate))
    eps = [a.epsilon for a in accounting]
    qs = [a.sample_rate for a in accounting]
    return {**worst.as_dict(), "epsilon": max(eps), "epsilon_range": [min(eps), max(eps)],
            "sample_rate": max(qs), "sample_rate_range": [min(qs), max(qs)], "n_models": len(accounting)}
