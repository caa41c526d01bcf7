"""What a dataset module declares (:class:`DatasetSpec`: raw files, groups, builder, schema, classes, provenance)
and the helpers its builder shares: the seeded generator, binary groups, and the tabular finish.

A dataset is one module in :mod:`fairdp_core.data.sets` that defines ``DATASET``; the registry
(:mod:`fairdp_core.data.loaders`) finds it. Nothing here imports pandas: a builder imports it when it runs.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .base import GroupedData, Split, TabularSchema, encode_with_schema, stratified_split, stratified_subset
from .sources import RawFile

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DatasetSpec", "GroupSpec", "binary_groups", "dataset_rng", "finish_images", "finish_tabular", "mirror_hint"]


@dataclass(frozen=True)
class GroupSpec:
    """How a raw column becomes group labels: ``names[k]`` is group k; ``assign`` maps the column to k."""

    column: str
    names: tuple[str, ...]
    assign: Callable[[pd.Series], np.ndarray]


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset: its verified raw files, its group attributes (the first is the default), its builder
    ``build(spec, paths, options, rng, group_attr, provenance) -> GroupedData``, its display label, the number of
    label classes, the public schema (tabular datasets) and its origin: where each raw file came from, in words (the
    dataset module's docstring)."""

    name: str
    files: tuple[RawFile, ...]
    groups: dict[str, GroupSpec]  # first key is the default group attribute
    build: Callable[..., GroupedData]
    label: str  # what the reports print
    n_classes: int
    origin: str
    official_test: bool = False
    schema: TabularSchema | None = None  # tabular datasets: the public feature space

    @property
    def default_group(self) -> str:
        return next(iter(self.groups))


def dataset_rng(seed: int, name: str) -> np.random.Generator:
    """The generator for a dataset's split/subset: the params seed, specialised by the dataset name."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(zlib.crc32(name.encode()),)))


def mirror_hint(name: str) -> str:
    """What to tell a user who lacks one of ``name``'s raw files."""
    return f"see fairdp_core/data/sets/{name}.py for its origin, or point data.mirror / $FAIRDP_DATA_MIRROR at a copy"


def binary_groups(column: str, first: str, second: str, is_first: Callable[[pd.Series], pd.Series]) -> GroupSpec:
    """Two groups from a raw column: ``first`` where ``is_first(column)`` holds, ``second`` elsewhere."""
    return GroupSpec(column, (first, second), lambda s: np.where(is_first(s), 0, 1).astype(np.int64))


def finish_tabular(spec: DatasetSpec, opts, rng, tr: pd.DataFrame, te: pd.DataFrame | None, *, target: Callable,
                   group_attr: str, notes: dict, provenance: dict) -> GroupedData:
    """A tabular dataset's cleaned frames, split (when it has no official test file), subset and encoded with its
    public schema."""
    gspec = spec.groups[group_attr]
    if te is None:  # no official test file: a seeded split stratified by (group, label)
        y_all = target(tr)
        g_all = gspec.assign(tr[gspec.column])
        tr_idx, te_idx = stratified_split(y_all, g_all, test_fraction=opts.test_fraction, rng=rng)
        tr, te = tr.iloc[tr_idx].reset_index(drop=True), tr.iloc[te_idx].reset_index(drop=True)
    if opts.train_size is not None:
        keep = stratified_subset(target(tr), gspec.assign(tr[gspec.column]), opts.train_size, rng=rng)
        tr = tr.iloc[keep].reset_index(drop=True)
    if opts.test_size is not None:
        keep = stratified_subset(target(te), gspec.assign(te[gspec.column]), opts.test_size, rng=rng)
        te = te.iloc[keep].reset_index(drop=True)
    schema = spec.schema
    if not opts.group_as_feature:
        schema = schema.without(gspec.column)
    elif gspec.column not in schema.columns:
        raise ValueError(f"dataset {spec.name!r}: the public schema lacks the group column {gspec.column!r}")
    Xtr, Xte, names, public = encode_with_schema(tr, te, schema=schema)
    notes = {**notes, "public_schema": public}
    return GroupedData(
        name=spec.name,
        train=Split(Xtr, target(tr), gspec.assign(tr[gspec.column])),
        test=Split(Xte, target(te), gspec.assign(te[gspec.column])),
        group_names=gspec.names, class_names=("0", "1"), feature_names=tuple(names),
        input_shape=(len(names),), group_attribute=group_attr, provenance=provenance, notes=notes,
    )


def finish_images(spec, opts, rng, group_attr, provenance, notes, Xtr, ytr, gtr, Xte, yte, gte, class_names):
    """An image dataset's arrays, subset (when options ask) and scaled to float32 in [0, 1], channel first."""
    if opts.train_size is not None:
        keep = stratified_subset(ytr, gtr, opts.train_size, rng=rng)
        Xtr, ytr, gtr = Xtr[keep], ytr[keep], gtr[keep]
    if opts.test_size is not None:
        keep = stratified_subset(yte, gte, opts.test_size, rng=rng)
        Xte, yte, gte = Xte[keep], yte[keep], gte[keep]

    def split(X, y, g):  # uint8 [n, H, W] (grey) or [n, C, H, W] -> float32 [n, C, H, W] in [0, 1]
        X = X[:, None] if X.ndim == 3 else X
        return Split((X.astype(np.float32) / 255.0), y.astype(np.int64), g.astype(np.int64))

    train = split(Xtr, ytr, gtr)
    return GroupedData(
        name=spec.name, train=train, test=split(Xte, yte, gte),
        group_names=spec.groups[group_attr].names, class_names=class_names, feature_names=(),
        input_shape=tuple(train.X.shape[1:]), group_attribute=group_attr, provenance=provenance, notes=notes)
