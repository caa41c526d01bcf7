"""What a custom audit is asked to do and checks before any work: its settings (:class:`AuditSettings`), a recipe
that cannot run (:func:`check_recipe`, one error naming the setting), and the memory it would take against what this
machine has (:func:`memory_estimate`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# A label with more values than this is refused unless asked for (--max-classes): a numeric column such as age read
# as a label trains a model with a class per value.
MAX_CLASSES = 20


# Peak memory of audit-custom, measured here (maximum RSS, MLP, 2 features): 0.6 GB at R = 8, then about 4.5 kB per
# model and audited record (R = 400: 1.4 GB with 160 audited records, 4.1 GB with 1,000), the attacks' per-model
# arrays over the audited records dominating. A rough guide (it ignores the feature count and model size): a
# refusal can be overridden (memory_check=False, --no-memory-check).
BASE_BYTES, BYTES_PER_MODEL_RECORD = 0.6e9, 4.5e3


def check_recipe(*, algorithm: str = "dpsgd", epsilon: float | None = 10.0, R: int = 8, m: int | None = None,
                 epochs: float = 30, batch_size: int = 64, lr: float = 0.5, clip: float = 1.0,
                 min_per_group: int = 20, max_classes: int = MAX_CLASSES, **_) -> None:
    """One error naming the flag for a recipe that cannot run, before any data is read."""
    import math

    def bad(x) -> bool:
        return x is None or not math.isfinite(x) or x <= 0

    checks = [(algorithm != "sgd" and bad(epsilon), f"--epsilon {epsilon}: the privacy target must be a positive "
                                                      "number (--algorithm sgd trains without privacy)"),
              (R < 2, f"--R {R}: at least 2 (2R models in complementary pairs)"),
              (m is not None and m < 2, f"--m {m}: at least 2 audited records"),
              (bad(epochs), f"--epochs {epochs}: must be positive"),
              (batch_size < 1, f"--batch-size {batch_size}: at least 1"),
              (bad(lr), f"--lr {lr}: must be positive"),
              (algorithm != "sgd" and bad(clip), f"--clip {clip}: the clip bound must be positive"),
              (min_per_group < 1, f"--min-per-group {min_per_group}: at least 1"),
              (max_classes < 2, f"--max-classes {max_classes}: at least 2")]
    for failed, msg in checks:
        if failed:
            raise ValueError(msg)


@dataclass(frozen=True, kw_only=True)
class AuditSettings:
    """How :func:`~fairdp_core.audit.custom.audit_model` (and :func:`~fairdp_core.audit.custom_csv.audit_csv`) train
    the audited bank and read it; every field has the CLI's default (``fairdp audit-custom --help``). Checked at
    construction: an impossible value is one ValueError naming it, before any data is read.

    The recipe: ``model`` ("lr", "mlp", a factory ``() -> nn.Module``, an ``nn.Module`` template, or for the CSV
    route "module:function"); ``algorithm`` (a rule of :data:`fairdp_core.rules.RULES` with a guarantee, at its
    default settings); ``epsilon`` and ``delta`` (None: min(1e-5, n^-1.1)); ``m`` audited records (None: min(n/2,
    1000)) in 2``R`` models; ``epochs``, ``batch_size``, ``lr``, ``clip``; ``seed`` (the design, the split and the
    training streams). The reading: ``intersections`` (pairs of slice names), ``min_per_group`` (fewer records in a
    group is refused), ``alpha`` (1 − the intervals' level), ``title``. The run: ``progress`` (tqdm bars),
    ``memory_check`` (refuse a bank that would not fit in free memory), ``log`` (where the one line of what will run
    goes). ``dataclasses.replace(settings, R=16)`` gives a changed copy."""

    model: Any = "mlp"
    algorithm: str = "dpsgd"
    epsilon: float | None = 10.0
    delta: float | None = None
    m: int | None = None
    R: int = 8
    epochs: float = 30
    batch_size: int = 64
    lr: float = 0.5
    clip: float = 1.0
    seed: int = 0
    intersections: tuple[tuple[str, str], ...] = ()
    min_per_group: int = 20
    alpha: float = 0.05
    title: str = "custom model"
    progress: bool = True
    memory_check: bool = True
    log: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "intersections", tuple(tuple(p) for p in self.intersections or ()))
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha {self.alpha}: must be between 0 and 1 (1 − the intervals' level)")
        check_recipe(**self.recipe())

    def recipe(self) -> dict[str, Any]:
        """The fields :func:`check_recipe` checks."""
        return {f: getattr(self, f) for f in ("algorithm", "epsilon", "R", "m", "epochs", "batch_size", "lr", "clip",
                                              "min_per_group")}


def available_memory() -> int | None:
    """Bytes this machine can still give (MemAvailable), or None where it cannot say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def memory_estimate(models: int, audited: int) -> float:
    """Bytes: audit-custom's measured peak for ``models`` models and ``audited`` records (:data:`BYTES_PER_MODEL_RECORD`)."""
    return BASE_BYTES + models * audited * BYTES_PER_MODEL_RECORD


def _gb(b: float) -> str:
    return f"{b / 1e9:.1f} GB"
