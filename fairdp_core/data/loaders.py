"""The dataset registry: every module of :mod:`fairdp_core.data.sets` that defines ``DATASET``, found at import,
checked, and loaded by name (docs/study.md, 'Datasets and groups').

Each builder reads verified raw files and returns a :class:`GroupedData`. A tabular dataset is encoded with its
public schema (:class:`TabularSchema`, kept in its module): every categorical vocabulary and every numeric
transform and bound comes from the dataset's documentation, never from its records, so no record changes the
feature space or another record's encoding (a differential-privacy requirement: the training pool is private).
The train/test split (for datasets without an official test file) is stratified by (group, label) and driven by a
generator derived from the params seed and the dataset name. Importing the registry does not import pandas:
params.yaml is validated against :data:`DATASET_GROUPS` without it.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from dataclasses import replace

import numpy as np

from . import sets
from .base import GroupedData
from .sources import Sources, sha256_file
from .spec import DatasetSpec, dataset_rng

__all__ = ["DATASETS", "DATASET_CLASSES", "DATASET_GROUPS", "REGISTRY", "DatasetSpec", "checksums", "dataset_rng",
           "discover", "group_column", "load_dataset"]


def _check(spec: DatasetSpec, module: str) -> None:
    problems = []
    if not spec.groups:
        problems.append("no group attribute")
    if spec.n_classes < 2:
        problems.append(f"n_classes {spec.n_classes} (a task has at least 2 classes)")
    if not spec.files:
        problems.append("no raw file")
    problems += [f"{f.folder}/{f.name} records no sha256" for f in spec.files if len(f.sha256) != 64]
    if not (spec.origin or "").strip() and sys.flags.optimize < 2:  # python -OO strips the docstrings it is read from
        problems.append("no origin (the module's docstring says where its raw files came from)")
    if problems:
        raise ValueError(f"dataset module {module}: " + "; ".join(problems))


def discover(package=sets) -> dict[str, DatasetSpec]:
    """Every ``DATASET`` of ``package``'s modules (modules named ``_*`` are skipped), by name, in module order."""
    found: dict[str, DatasetSpec] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        spec = getattr(module, "DATASET", None)
        if not isinstance(spec, DatasetSpec):
            raise TypeError(f"dataset module {module.__name__} defines no DATASET (a DatasetSpec)")
        if spec.name != info.name:
            raise ValueError(f"dataset module {module.__name__} declares the dataset {spec.name!r}: a module is "
                             "named after its dataset")
        _check(spec, module.__name__)
        found[spec.name] = spec
    return found


REGISTRY: dict[str, DatasetSpec] = discover()
DATASETS: tuple[str, ...] = tuple(REGISTRY)
# what params.yaml is validated against: each dataset's group attributes (the first is the default) and the number
# of label classes (what "chance" means for the degenerate-model check where a summary does not say)
DATASET_GROUPS: dict[str, tuple[str, ...]] = {k: tuple(v.groups) for k, v in REGISTRY.items()}
DATASET_CLASSES: dict[str, int] = {k: v.n_classes for k, v in REGISTRY.items()}


def checksums() -> dict[str, dict[str, dict[str, object]]]:
    """Every raw file's recorded size and hashes, ``{folder: {file: {bytes, sha256, content_sha256}}}``."""
    out: dict[str, dict[str, dict[str, object]]] = {}
    for spec in REGISTRY.values():
        for raw in spec.files:
            out.setdefault(raw.folder, {})[raw.name] = raw.record()
    return out


def load_dataset(name: str, options, sources: Sources, *, seed: int) -> GroupedData:
    """Fetch, verify and preprocess dataset ``name`` with its ``options`` (a ``DatasetOptions`` from params)."""
    base = getattr(options, "source", None) or name  # a variant (``source``) is prepared from its study dataset
    if base not in REGISTRY:
        raise KeyError(f"unknown dataset {base!r}; known: {', '.join(DATASETS)}")
    spec = REGISTRY[base]
    group_attr = options.group or spec.default_group
    if group_attr not in spec.groups:
        raise ValueError(f"dataset {name!r}: unknown group attribute {group_attr!r}; known: {', '.join(spec.groups)}")
    paths = {raw.name: sources.fetch(raw) for raw in spec.files}
    provenance = {f"{raw.folder}/{raw.name}": sha256_file(paths[raw.name]) for raw in spec.files}
    data = spec.build(spec, paths, options, dataset_rng(seed, base), group_attr, provenance)
    return data if base == name else replace(data, name=name, notes={**data.notes, "source": base})


def group_column(data: GroupedData) -> tuple[str, tuple[str, ...], np.ndarray]:
    """The raw column behind ``data``'s group attribute: its name, its public vocabulary (the encoded one-hot
    block ``<column>=<value>``, when the column is a model input) and the group of each vocabulary value."""
    import pandas as pd

    base = data.notes.get("source", data.name)
    gspec = REGISTRY[str(base)].groups[data.group_attribute]
    vocab = tuple(data.notes.get("public_schema", {}).get("categorical", {}).get(gspec.column, ()))
    return gspec.column, vocab, gspec.assign(pd.Series(vocab, dtype=object)) if vocab else np.zeros(0, np.int64)
