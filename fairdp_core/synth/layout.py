"""The prepared feature space as a synthesizer sees it: numeric columns in [-1, 1] and one-hot blocks.

Everything here is public: it comes from a dataset's feature names and its public schema
(``GroupedData.notes["public_schema"]``), never from its records.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Layout", "decode", "discretise"]


@dataclass(frozen=True)
class Layout:
    """``feature_names`` [d]; ``numeric`` the indices of the numeric columns (values in [-1, 1]); ``blocks`` one
    ``(name, start, stop)`` per categorical column, its one-hot block ``X[:, start:stop]`` (columns named
    ``name=value``, contiguous, in the schema's order)."""

    feature_names: tuple[str, ...]
    numeric: tuple[int, ...]
    blocks: tuple[tuple[str, int, int], ...]

    @property
    def d(self) -> int:
        return len(self.feature_names)

    @property
    def columns(self) -> tuple[str, ...]:
        """The record's columns: the numeric ones, then one per categorical block."""
        return (*(self.feature_names[i] for i in self.numeric), *(b[0] for b in self.blocks))

    @classmethod
    def from_names(cls, feature_names, schema: dict | None = None) -> Layout:
        """From the feature names (``col=value`` marks a one-hot column). With ``schema`` (a public-schema note),
        checks that every numeric column of the names is a numeric column of the schema and every block a
        categorical one."""
        names = tuple(feature_names)
        numeric, blocks, open_block = [], [], None
        for i, n in enumerate(names):
            col, eq, _ = n.partition("=")
            if not eq:
                numeric.append(i)
                open_block = None
                continue
            if open_block is not None and open_block[0] == col:
                open_block[2] = i + 1
            else:
                if any(b[0] == col for b in blocks):
                    raise ValueError(f"one-hot block {col!r} is not contiguous in the feature names")
                open_block = [col, i, i + 1]
                blocks.append(open_block)
        if schema is not None:
            num_s, cat_s = set(schema.get("numeric", {})), set(schema.get("categorical", {}))
            bad = [names[i] for i in numeric if names[i] not in num_s] + [b[0] for b in blocks if b[0] not in cat_s]
            if bad:
                raise ValueError(f"columns not in the public schema: {bad}")
        return cls(names, tuple(numeric), tuple((b[0], b[1], b[2]) for b in blocks))

    @classmethod
    def from_data(cls, data) -> Layout:
        """From a :class:`~fairdp_core.data.base.GroupedData` (its feature names and public schema)."""
        return cls.from_names(data.feature_names, data.notes.get("public_schema"))


def discretise(X: np.ndarray, layout: Layout, *, bins: int = 10) -> np.ndarray:
    """Records as codes, one column per :attr:`Layout.columns`: numerics in ``bins`` equal-width public bins of
    [-1, 1], categoricals as the index of the block's largest entry. X [n, d] -> int64 [n, n_columns]."""
    X = np.asarray(X, dtype=np.float64)
    num = np.clip(((X[:, list(layout.numeric)] + 1.0) / 2.0 * bins).astype(np.int64), 0, bins - 1)
    cat = [np.argmax(X[:, s:e], axis=1)[:, None] for _, s, e in layout.blocks]
    return np.concatenate([num, *cat], axis=1) if cat else num


def decode(X: np.ndarray, layout: Layout) -> dict[str, np.ndarray]:
    """Per column of the record: numerics as they are ([-1, 1]), categoricals as the block's argmax."""
    out = {layout.feature_names[i]: np.asarray(X[:, i], dtype=np.float64) for i in layout.numeric}
    for name, s, e in layout.blocks:
        out[name] = np.argmax(X[:, s:e], axis=1)
    return out
