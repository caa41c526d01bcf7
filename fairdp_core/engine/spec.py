"""What one trained configuration is: :class:`TrainSpec` (every hyperparameter, validated at construction), the
fields that key its release, and the key itself (:func:`release_key`)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Literal

from ..rules import ALGORITHMS
from ..rules import get as get_rule
from .accounting import Accountant

__all__ = ["Algorithm", "TrainSpec", "release_key"]


Algorithm = Literal[ALGORITHMS]  # the registered rules (fairdp_core.rules)


@dataclass(frozen=True)
class TrainSpec:
    """Hyperparameters of one trained configuration (all keyword-only).

    ``target_epsilon``: calibrate σ to it (with ``delta``, the sampler's q and T) unless ``noise_multiplier`` is
    given (for DP-SGD-S that is σ_eff). DP-SGD-S: ``tau`` (C_k = τ·Q_k), ``gamma`` (target quantile), ``eta_q``,
    ``sigma_b`` (count noise; None: B/20 as in Andrew et al.), ``c_min``, ``q_init`` (one value, or one per group),
    ``q_max`` (public cap on Q_k), ``count_floor`` (public floor of the noised count denominator; None: σ_b).
    The non-private variant uses ``ema_momentum`` and ``percentile``. The paper code's rule: base bound ``clip``
    (C0), ``ratio_cap`` (s), ``sigma_s`` (noise multiplier of the group sums; None: √10·σ_eff, a tenth of the
    step's σ⁻² budget), ``sigma_b`` (group counts; None: B/20), ``c_min``, ``count_floor``.

    ``optimizer``: "sgd" (θ -= lr·g) or "adam" (torch.optim.Adam's update with its defaults β = (0.9, 0.999),
    ε = 1e-8, on the same g: the step's clipped, noised sum over the expected batch size B, as Opacus hands its
    optimizer; post-processing, so the accounting is unchanged). UTKFace's released config trains with Adam.

    The rivals reuse these fields. DPSGD-F: ``clip`` (C0), ``sigma_b`` (its 2K counts). DPSGD-Global-Adapt:
    ``clip`` (C), ``q_init`` (Z's initial value, one number), ``tau`` (the threshold τ: counts ‖g‖ > τ·Z),
    ``gamma`` and ``eta_q`` (Z's quantile update), ``sigma_b`` (its count). AdaClip: ``clip`` (initial C),
    ``gamma``, ``eta_q``, ``sigma_b`` (std of its centred count: noise multiplier 2σ_b), ``c_min`` and ``q_max``
    (C's public floor and cap). ``sigma_b`` None: B/20 for each.

    ``settings``: a rule's own settings that none of the fields above holds (a rule added after them declares
    its fields in its module, and they are stored here as sorted (name, value) pairs; empty for every rule above).
    """

    algorithm: Algorithm
    model: str = "lr"
    epochs: float = 1.0
    batch_size: int = 256
    lr: float = 0.1
    clip: float = 1.0
    target_epsilon: float | None = None
    noise_multiplier: float | None = None
    delta: float = 1e-5
    accountant: Accountant = "rdp"
    tau: float = 1.0
    gamma: float = 0.75
    eta_q: float = 0.2
    sigma_b: float | None = None
    c_min: float = 0.01
    q_init: float | tuple[float, ...] = 1.0
    q_max: float = 100.0
    count_floor: float | None = None
    ema_momentum: float = 0.9
    percentile: float = 75.0
    hidden: int = 256
    ratio_cap: float = 2.0
    sigma_s: float | None = None
    optimizer: Literal["sgd", "adam"] = "sgd"
    settings: tuple[tuple[str, float | None], ...] = ()

    def __post_init__(self) -> None:
        get_rule(self.algorithm)  # a clear error naming the known rules
        if self.algorithm != "sgd" and self.target_epsilon is None and self.noise_multiplier is None:
            raise ValueError(f"{self.algorithm} needs target_epsilon or noise_multiplier")
        if self.batch_size <= 0 or self.epochs <= 0 or self.lr <= 0:
            raise ValueError("batch_size, epochs and lr must be positive")
        if self.optimizer not in ("sgd", "adam"):
            raise ValueError(f"optimizer must be 'sgd' or 'adam', got {self.optimizer!r}")
        if isinstance(self.q_init, list):
            object.__setattr__(self, "q_init", tuple(self.q_init))
        pairs = self.settings.items() if isinstance(self.settings, dict) else self.settings
        object.__setattr__(self, "settings", tuple(sorted((str(k), v) for k, v in pairs)))


_KEY_IF_SET = {"optimizer": "sgd", "settings": ()}


def spec_fields(spec: TrainSpec) -> dict:
    """``asdict(spec)`` less the fields added after the first release at their defaults: what a release key hashes
    and a saved bank stores, so the keys and the bank files written before a field was added stand, byte for byte."""
    fields = asdict(spec)
    for key, default in _KEY_IF_SET.items():
        if fields[key] == default:
            del fields[key]
    return fields


def release_key(spec: TrainSpec) -> int:
    """A 63-bit key of everything that defines a release (every TrainSpec field): the noise and count streams
    are derived from it, so banks that differ in algorithm, ε, τ, γ or any other setting never share noise."""
    blob = json.dumps(spec_fields(spec), sort_keys=True, default=str).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big") % (2**63 - 1)
