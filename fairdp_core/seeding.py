"""Seeds enter once, from params.yaml; every stream is derived from that seed and a label path."""

from __future__ import annotations

import zlib

import numpy as np

__all__ = ["derive_rng", "derive_seed"]


def _key(labels: tuple[object, ...]) -> tuple[int, ...]:
    return tuple(int(x) if isinstance(x, (int, np.integer)) else zlib.crc32(str(x).encode()) for x in labels)


def derive_seed(root: int, *labels: object) -> int:
    """A 63-bit seed for the stream named by ``labels`` (strings or ints) under the params seed ``root``."""
    ss = np.random.SeedSequence(root, spawn_key=_key(labels))
    return int(ss.generate_state(1, np.uint64)[0] % (2**63 - 1))


def derive_rng(root: int, *labels: object) -> np.random.Generator:
    """A numpy Generator for the stream named by ``labels`` under ``root``."""
    return np.random.default_rng(np.random.SeedSequence(root, spawn_key=_key(labels)))
