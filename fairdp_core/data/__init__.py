"""Datasets of the study: a registry of loaders, the typed :class:`GroupedData`, verified raw sources."""

import importlib

from .base import GroupedData, Split, load, save, stratified_split, stratified_subset

# The loaders and raw-file sources load on first use: the stages that only read prepared data import base alone.
_LAZY = {"DATASETS": "loaders", "REGISTRY": "loaders", "DatasetSpec": "loaders", "dataset_rng": "loaders",
         "load_dataset": "loaders", "ChecksumError": "sources", "DataSourceError": "sources",
         "MissingDataError": "sources", "RawFile": "sources", "Sources": "sources", "sha256_file": "sources"}

__all__ = [
    "DATASETS",
    "REGISTRY",
    "ChecksumError",
    "DataSourceError",
    "DatasetSpec",
    "GroupedData",
    "MissingDataError",
    "RawFile",
    "Sources",
    "Split",
    "dataset_rng",
    "load",
    "load_dataset",
    "prepare",
    "save",
    "sha256_file",
    "sources_from_params",
    "stratified_split",
    "stratified_subset",
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    if name in ("loaders", "sources"):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def sources_from_params(params):
    """The raw-file sources (a :class:`~fairdp_core.data.sources.Sources`) a ``Params`` describes."""
    from .sources import Sources

    return Sources(raw_dir=params.resolve(params.data.raw_dir), mirror=params.mirror_dir(),
                   download=params.data.download)


def prepare(params, name: str) -> GroupedData:
    """Load dataset ``name`` as params configure it and write it to ``<prepared_dir>/<name>`` atomically."""
    if name not in params.data.datasets:
        raise KeyError(f"dataset {name!r} is not configured under data.datasets in params.yaml "
                       f"(configured: {', '.join(params.data.datasets)})")
    from .loaders import load_dataset

    data = load_dataset(name, params.data.datasets[name], sources_from_params(params), seed=params.seed)
    save(data, params.resolve(params.data.prepared_dir) / name)
    return data
