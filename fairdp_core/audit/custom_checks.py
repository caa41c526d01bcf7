"""What a custom audit checks before any work: a recipe that cannot run (:func:`check_recipe`, one error naming the
flag), and the memory it would take against what this machine has (:func:`memory_estimate`)."""

from __future__ import annotations

import os
from pathlib import Path

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
