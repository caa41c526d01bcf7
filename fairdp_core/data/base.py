"""The typed dataset object every loader returns, its preprocessing helpers, and atomic storage."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..atomic import atomic_dir

__all__ = ["GroupedData", "Split", "encode_tabular", "load", "save", "stratified_split", "stratified_subset"]


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


def encode_tabular(
    train: pd.DataFrame, test: pd.DataFrame, *, numeric: list[str], categorical: list[str]
) -> tuple[np.ndarray, np.ndarray, list[str], dict[str, object]]:
    """Standardise ``numeric`` columns and one-hot ``categorical`` ones, fitted on ``train`` only.

    Returns (X_train float32 [n_tr, d], X_test float32 [n_te, d], feature names, fitted statistics). A category
    seen only in ``test`` encodes as all zeros; a constant numeric column is centred but not scaled.
    """
    mean = train[numeric].astype(np.float64).mean()
    std = train[numeric].astype(np.float64).std(ddof=0).replace(0.0, 1.0)
    cats = {c: sorted(train[c].astype(str).unique()) for c in categorical}

    def enc(df: pd.DataFrame) -> np.ndarray:
        parts = [((df[numeric].astype(np.float64) - mean) / std).to_numpy()]
        for c in categorical:
            col = df[c].astype(str).to_numpy()
            parts.append((col[:, None] == np.asarray(cats[c], dtype=object)[None, :]).astype(np.float64))
        return np.concatenate(parts, axis=1).astype(np.float32)

    names = list(numeric) + [f"{c}={v}" for c in categorical for v in cats[c]]
    stats = {"mean": mean.to_dict(), "std": std.to_dict(), "categories": cats}
    return enc(train), enc(test), names, stats


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
