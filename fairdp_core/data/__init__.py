"""Datasets of the study: a registry of loaders, the typed :class:`GroupedData`, verified raw sources."""

from .base import GroupedData, Split, load, save, stratified_split, stratified_subset
from .loaders import DATASETS, REGISTRY, DatasetSpec, dataset_rng, load_dataset
from .sources import ChecksumError, DataSourceError, MissingDataError, RawFile, Sources, sha256_file

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


def sources_from_params(params) -> Sources:
    """The raw-file sources a :class:`fairdp_core.config.Params` describes."""
    return Sources(raw_dir=params.resolve(params.data.raw_dir), mirror=params.mirror_dir(),
                   download=params.data.download)


def prepare(params, name: str) -> GroupedData:
    """Load dataset ``name`` as params configure it and write it to ``<prepared_dir>/<name>`` atomically."""
    if name not in params.data.datasets:
        raise KeyError(f"dataset {name!r} is not configured under data.datasets in params.yaml "
                       f"(configured: {', '.join(params.data.datasets)})")
    data = load_dataset(name, params.data.datasets[name], sources_from_params(params), seed=params.seed)
    save(data, params.resolve(params.data.prepared_dir) / name)
    return data
