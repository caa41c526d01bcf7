"""The typed dataset object every loader returns, its preprocessing helpers, and atomic storage."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..atomic import atomic_dir

if TYPE_CHECKING:  # pandas only where CSVs are encoded: the train stage, which loads arrays, never imports it
    import pandas as pd

__all__ = ["GroupedData", "NumericColumn", "Split", "TabularSchema", "encode_rows", "encode_with_schema", "load", "save",
           "stratified_split", "stratified_subset"]


@dataclass(frozen=True)
class Split:
    """One split. ``X`` float32 [n, ...features]; ``y`` int64 [n]; ``group`` int64 [n] in ``0..K-1``."""

    X: np.ndarray
    y: np.ndarray
    group: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.y)
        if self.X.dtype != np.float32 or self.y.dtype != np.int64 or self.group.dtype != np.int64:
            raise TypeError("Split dtypes must be float32/int64/int64, got "
                            f"{self.X.dtype}/{self.y.dtype}/{self.group.dtype}")
        if len(self.X) != n or len(self.group) != n:
            raise ValueError(f"Split lengths differ: X {len(self.X)}, y {n}, group {len(self.group)}")

    def __len__(self) -> int:
        return len(self.y)

    def group_sizes(self, n_groups: int) -> np.ndarray:
        return np.bincount(self.group, minlength=n_groups)


@dataclass(frozen=True)
class GroupedData:
    """A prepared dataset: train/test splits with group labels, and what they mean.

    ``feature_names`` has one name per column of the flattened ``X`` for tabular data, and is empty for images
    (whose ``input_shape`` is e.g. ``(1, 28, 28)``). ``provenance`` records each raw file and its sha256.
    """

    name: str
    train: Split
    test: Split
    group_names: tuple[str, ...]
    class_names: tuple[str, ...]
    feature_names: tuple[str, ...]
    input_shape: tuple[int, ...]
    group_attribute: str
    provenance: dict[str, str] = field(default_factory=dict)
    notes: dict[str, object] = field(default_factory=dict)

    @property
    def n_groups(self) -> int:
        return len(self.group_names)

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    def summary(self) -> dict[str, object]:
        """Shapes and group sizes, JSON-serialisable."""
        return {
            "name": self.name,
            "group_attribute": self.group_attribute,
            "input_shape": list(self.input_shape),
            "n_classes": self.n_classes,
            "train": {"n": len(self.train), "X_shape": list(self.train.X.shape),
                      "group_sizes": dict(zip(self.group_names, self.train.group_sizes(self.n_groups).tolist())),
                      "positive_rate": float(np.mean(self.train.y == 1)) if self.n_classes == 2 else None},
            "test": {"n": len(self.test), "X_shape": list(self.test.X.shape),
                     "group_sizes": dict(zip(self.group_names, self.test.group_sizes(self.n_groups).tolist()))},
        }


# ------------------------------------------------------------------------------ public-schema encoding

# Monotone transforms for numeric columns; "signed_log1p" is sign(x)·log(1 + |x|), for money that can be negative.
_TRANSFORMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "identity": lambda x: x,
    "log1p": np.log1p,
    "signed_log1p": lambda x: np.sign(x) * np.log1p(np.abs(x)),
}


@dataclass(frozen=True)
class NumericColumn:
    """A numeric column's public preprocessing: clip to ``[lo, hi]`` (raw units), ``transform``, map to [-1, 1].

    The bounds and the transform are constants from the dataset's documentation, never statistics of its records,
    so a record's encoding does not depend on any other record.
    """

    lo: float
    hi: float
    transform: str = "identity"  # one of _TRANSFORMS

    def __post_init__(self) -> None:
        if self.transform not in _TRANSFORMS:
            raise ValueError(f"unknown transform {self.transform!r}; known: {', '.join(_TRANSFORMS)}")
        if not self.lo < self.hi:
            raise ValueError(f"numeric bounds need lo < hi, got [{self.lo}, {self.hi}]")
        if self.transform == "log1p" and self.lo < 0:
            raise ValueError(f"log1p needs lo >= 0, got {self.lo} (use signed_log1p)")

    def apply(self, x: np.ndarray) -> tuple[np.ndarray, int]:
        """float64 [n] -> (float64 [n] in [-1, 1], how many of the n values were clipped)."""
        f = _TRANSFORMS[self.transform]
        clipped = int(np.count_nonzero((x < self.lo) | (x > self.hi)))
        t_lo, t_hi = f(np.float64(self.lo)), f(np.float64(self.hi))
        return 2.0 * (f(np.clip(x, self.lo, self.hi)) - t_lo) / (t_hi - t_lo) - 1.0, clipped


@dataclass(frozen=True)
class TabularSchema:
    """The public feature space of a tabular dataset, fixed before any record is read.

    ``numeric`` maps a column to its :class:`NumericColumn`; ``categorical`` maps a column to its full documented
    vocabulary, as strings (integer codes written plainly: ``"1"``, not ``"1.0"``). Features are the numeric
    columns in order, then one one-hot block per categorical column in vocabulary order.
    """

    dataset: str
    numeric: Mapping[str, NumericColumn]
    categorical: Mapping[str, tuple[str, ...]]

    def __post_init__(self) -> None:
        both = set(self.numeric) & set(self.categorical)
        if both:
            raise ValueError(f"{self.dataset}: columns both numeric and categorical: {sorted(both)}")
        for c, vocab in self.categorical.items():
            if len(set(vocab)) != len(vocab) or not all(isinstance(v, str) for v in vocab):
                raise ValueError(f"{self.dataset}: vocabulary of {c!r} must be distinct strings, got {vocab}")

    @property
    def columns(self) -> tuple[str, ...]:
        return (*self.numeric, *self.categorical)

    @property
    def feature_names(self) -> tuple[str, ...]:
        """``d`` names: the numeric column names, then ``column=value`` for every vocabulary entry."""
        return (*self.numeric, *(f"{c}={v}" for c, vocab in self.categorical.items() for v in vocab))

    def without(self, column: str) -> TabularSchema:
        """The same schema minus ``column`` (e.g. the group attribute when it is not a feature)."""
        return replace(self, numeric={c: s for c, s in self.numeric.items() if c != column},
                       categorical={c: v for c, v in self.categorical.items() if c != column})

    def describe(self) -> dict[str, object]:
        """JSON-serialisable: per column its transform and bounds, or its vocabulary."""
        return {
            "dataset": self.dataset,
            "rule": "numeric: clip to [lo, hi], transform, map linearly to [-1, 1]; categorical: one-hot over the "
                    "documented vocabulary; nothing is fitted on the records",
            "numeric": {c: {"transform": s.transform, "lo": s.lo, "hi": s.hi} for c, s in self.numeric.items()},
            "categorical": {c: list(v) for c, v in self.categorical.items()},
        }


def _category_labels(s: pd.Series) -> np.ndarray:
    """Each cell as a vocabulary string, cell by cell: integral numbers as ``"3"``, anything else as ``str``."""
    import pandas as pd

    out = s.astype(str).to_numpy(object)
    if pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
        v = s.to_numpy(np.float64)
        integral = np.isfinite(v) & (v == np.round(v))
        out[integral] = v[integral].astype(np.int64).astype(str)
    return out


def encode_rows(df: pd.DataFrame, schema: TabularSchema) -> tuple[np.ndarray, dict[str, int]]:
    """Encode ``df`` row by row with ``schema``: (X float32 [n, d], clipped-value count per numeric column).

    Reads nothing from ``df`` but each row's own cells, so removing a row leaves every other row's encoding
    unchanged. A category outside the schema's vocabulary, or a missing numeric value, is a ``ValueError``.
    """
    import pandas as pd

    parts, clipped = [], {}
    for c, spec in schema.numeric.items():
        x = pd.to_numeric(df[c], errors="coerce").to_numpy(np.float64)
        bad = ~np.isfinite(x)
        if bad.any():
            raise ValueError(f"{schema.dataset}: numeric column {c!r} has a missing or non-numeric value "
                             f"{df[c].iloc[int(np.argmax(bad))]!r}")
        z, clipped[c] = spec.apply(x)
        parts.append(z[:, None])
    for c, vocab in schema.categorical.items():
        if df[c].isna().any():
            raise ValueError(f"{schema.dataset}: column {c!r} has a missing value, which is outside its public "
                             f"vocabulary ({', '.join(vocab)})")
        labels = _category_labels(df[c])
        unknown = ~np.isin(labels, np.asarray(vocab, dtype=object))
        if unknown.any():
            raise ValueError(f"{schema.dataset}: column {c!r} has value {labels[int(np.argmax(unknown))]!r} "
                             f"outside its public vocabulary ({', '.join(vocab)})")
        parts.append((labels[:, None] == np.asarray(vocab, dtype=object)[None, :]).astype(np.float64))
    X = np.concatenate(parts, axis=1) if parts else np.zeros((len(df), 0))
    return X.astype(np.float32), clipped


def encode_with_schema(
    train: pd.DataFrame, test: pd.DataFrame, *, schema: TabularSchema
) -> tuple[np.ndarray, np.ndarray, list[str], dict[str, object]]:
    """Encode both splits with the public ``schema`` (:func:`encode_rows`); nothing is fitted on either split.

    Returns (X_train float32 [n_tr, d], X_test float32 [n_te, d], the d feature names, the schema's description
    with the clipped-value counts per numeric column and split, for ``GroupedData.notes``).
    """
    Xtr, clip_tr = encode_rows(train, schema)
    Xte, clip_te = encode_rows(test, schema)
    note = schema.describe()
    for c, col in note["numeric"].items():
        col["clipped"] = {"train": clip_tr[c], "test": clip_te[c]}
    note["rows"] = {"train": len(train), "test": len(test)}
    return Xtr, Xte, list(schema.feature_names), note


def _strata(y: np.ndarray, group: np.ndarray) -> np.ndarray:
    return group.astype(np.int64) * (int(y.max()) + 1) + y.astype(np.int64)


def stratified_split(y: np.ndarray, group: np.ndarray, *, test_fraction: float,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, test), stratified by (group, label), each sorted. Deterministic given ``rng``'s state."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    strata = _strata(y, group)
    test_idx = []
    for s in np.unique(strata):
        idx = np.flatnonzero(strata == s)
        idx = rng.permutation(idx)
        test_idx.append(idx[: int(round(test_fraction * len(idx)))])
    test = np.sort(np.concatenate(test_idx))
    mask = np.ones(len(y), bool)
    mask[test] = False
    return np.flatnonzero(mask), test


def stratified_subset(y: np.ndarray, group: np.ndarray, size: int, *, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of a subset of ``size`` rows with (group, label) proportions kept (largest remainder)."""
    n = len(y)
    if size >= n:
        return np.arange(n)
    strata = _strata(y, group)
    values, counts = np.unique(strata, return_counts=True)
    exact = counts * size / n
    take = np.floor(exact).astype(int)
    rest = size - take.sum()
    take[np.argsort(-(exact - take), kind="stable")[:rest]] += 1
    chosen = [rng.choice(np.flatnonzero(strata == v), size=k, replace=False) for v, k in zip(values, take)]
    return np.sort(np.concatenate(chosen))


# ---------------------------------------------------------------------------------------------- storage

_ARRAYS = ("X", "y", "group")


def save(data: GroupedData, directory: str | os.PathLike) -> Path:
    """Write ``data`` to ``directory`` (arrays.npz + meta.json) atomically: build a temp dir, then rename."""
    directory = Path(directory)
    with atomic_dir(directory) as tmp:
        arrays = {f"{part}_{a}": getattr(getattr(data, part), a) for part in ("train", "test") for a in _ARRAYS}
        np.savez(tmp / "arrays.npz", **arrays)
        meta = {
            "name": data.name, "group_names": list(data.group_names), "class_names": list(data.class_names),
            "feature_names": list(data.feature_names), "input_shape": list(data.input_shape),
            "group_attribute": data.group_attribute, "provenance": data.provenance, "notes": data.notes,
            "summary": data.summary(),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
    return directory


def load(directory: str | os.PathLike) -> GroupedData:
    """Read what :func:`save` wrote."""
    directory = Path(directory)
    meta = json.loads((directory / "meta.json").read_text())
    with np.load(directory / "arrays.npz") as z:
        splits = {part: Split(*(z[f"{part}_{a}"] for a in _ARRAYS)) for part in ("train", "test")}
    return GroupedData(
        name=meta["name"], train=splits["train"], test=splits["test"],
        group_names=tuple(meta["group_names"]), class_names=tuple(meta["class_names"]),
        feature_names=tuple(meta["feature_names"]), input_shape=tuple(meta["input_shape"]),
        group_attribute=meta["group_attribute"], provenance=meta["provenance"], notes=meta["notes"],
    )
