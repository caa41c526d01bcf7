"""Preparing a dataset as params.yaml configures it (the prepare stage's work)."""

from __future__ import annotations

from .base import GroupedData, save
from .loaders import load_dataset
from .sources import Sources

__all__ = ["prepare", "sources_from_params"]


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
