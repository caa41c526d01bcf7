"""What one trained configuration is: :class:`TrainSpec` (every hyperparameter, validated at construction), the
fields that key its release, and the key itself (:func:`release_key`)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Literal

from pydantic_core import PydanticUndefined

from ..rules import ALGORITHMS
from ..rules import get as get_rule
from .accounting import Accountant

__all__ = ["KEY_DEFAULTS", "Algorithm", "TrainSpec", "release_key", "stored_fields"]


Algorithm = Literal[ALGORITHMS]  # the registered rules (fairdp_core.rules)


@dataclass(frozen=True)
class TrainSpec:
    """Hyperparameters of one trained configuration (all keyword-only).

    ``target_epsilon``: calibrate σ to it (with ``delta``, the sampler's q and T) unless ``noise_multiplier`` is
    given (for DP-SGD-S that is σ_eff). ``optimizer``: "sgd" (θ -= lr·g) or "adam" (torch.optim.Adam's update with
    its defaults β = (0.9, 0.999), ε = 1e-8, on the same g: the step's clipped, noised sum over the expected batch
    size B, as Opacus hands its optimizer; post-processing, so the accounting is unchanged). UTKFace's released
    config trains with Adam.

    The rule's settings: the fields from ``tau`` to ``sigma_s`` below are the stored places of the rules' own
    settings (each rule's ``fields``, by its own names in its module and params.yaml's ``train.<rule>``; a few are
    stored under another name, ``Rule.stored_as``: AdaClip's ``c_max`` in ``q_max``). A field the rule does not
    declare stays None (a value there is refused, unless it is the value every release key of such a rule was
    derived with: a saved spec carries those); one it declares and leaves None takes the RULE'S default (its
    ``Settings``), never another rule's: a hand-built AdaClip spec trains at AdaClip's γ = 0.5. ``settings``: the
    settings of a rule added after these fields, by its own names (sorted (name, value) pairs; empty for every rule
    above). Which setting means what: each rule's module and docs/rules.md.
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
    tau: float | None = None
    gamma: float | None = None
    eta_q: float | None = None
    sigma_b: float | None = None
    c_min: float | None = None
    q_init: float | tuple[float, ...] | None = None
    q_max: float | None = None
    count_floor: float | None = None
    ema_momentum: float | None = None
    percentile: float | None = None
    hidden: int = 256
    ratio_cap: float | None = None
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
        self._own_settings()
        pairs = self.settings.items() if isinstance(self.settings, dict) else self.settings
        object.__setattr__(self, "settings", tuple(sorted((str(k), v) for k, v in pairs)))

    def _own_settings(self) -> None:
        """The rule's fields at the rule's own defaults where left None; every other rule field None (see the class
        docstring). A setting whose ``Settings`` field has no default must be given."""
        rule = get_rule(self.algorithm)
        stored = stored_fields(self.algorithm)
        for key, legacy in KEY_DEFAULTS.items():
            value = getattr(self, key)
            if key not in stored:
                if value is not None and value != legacy:
                    shown = ", ".join(f"{k} ({v})" if k != v else k for k, v in stored.items()) or "none"
                    raise ValueError(f"{self.algorithm} has no setting {key!r} (its settings, as a TrainSpec stores "
                                     f"them, with the rule's own name where it differs: {shown})")
                object.__setattr__(self, key, None)
            elif value is None:
                field = rule.settings.model_fields.get(stored[key]) if rule.settings is not None else None
                # a field its Settings do not hold: as stored
                default = legacy if field is None else field.get_default(call_default_factory=True)
                if default is PydanticUndefined:
                    raise ValueError(f"{self.algorithm}: its setting {stored[key]!r} has no default; give "
                                     f"{key}=... (the TrainSpec field that stores it)")
                if default is not None:
                    object.__setattr__(self, key, tuple(default) if isinstance(default, list) else default)


def stored_fields(algorithm: str) -> dict[str, str]:
    """The TrainSpec fields that hold ``algorithm``'s own settings (one of :data:`KEY_DEFAULTS` each), and the
    rule's own name of each (``Rule.stored_as``: AdaClip's ``q_max`` is its ``c_max``)."""
    rule = get_rule(algorithm)
    return {rule.stored_as.get(f, f): f for f in rule.fields if rule.stored_as.get(f, f) in KEY_DEFAULTS}


# The rule fields in the layout every release key and saved bank was first written with: a field a rule does not
# declare appears there at these values (the TrainSpec defaults of that layout, DP-SGD-S's), so the keys stand.
KEY_DEFAULTS = {"tau": 1.0, "gamma": 0.75, "eta_q": 0.2, "sigma_b": None, "c_min": 0.01, "q_init": 1.0, "q_max": 100.0,
                "count_floor": None, "ema_momentum": 0.9, "percentile": 75.0, "ratio_cap": 2.0, "sigma_s": None}

_KEY_IF_SET = {"optimizer": "sgd", "settings": ()}


def spec_fields(spec: TrainSpec) -> dict:
    """``asdict(spec)`` in the first release's layout: the rule fields left None (not the rule's) at
    :data:`KEY_DEFAULTS`, less the fields added after the first release at their defaults. What a release key
    hashes and a saved bank stores, so the keys and the bank files written before stand, byte for byte."""
    fields = asdict(spec)
    for key, legacy in KEY_DEFAULTS.items():
        if fields[key] is None:
            fields[key] = legacy
    for key, default in _KEY_IF_SET.items():
        if fields[key] == default:
            del fields[key]
    return fields


def release_key(spec: TrainSpec) -> int:
    """A 63-bit key of everything that defines a release (every TrainSpec field): the noise and count streams
    are derived from it, so banks that differ in algorithm, ε, τ, γ or any other setting never share noise."""
    blob = json.dumps(spec_fields(spec), sort_keys=True, default=str).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big") % (2**63 - 1)
