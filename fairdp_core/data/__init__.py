"""Datasets of the study: a registry of loaders, the typed :class:`GroupedData`, verified raw sources.

Every name loads on first use (PEP 562): a stage that only reads prepared data imports ``base`` alone, and
loading params.yaml imports only ``names``.
"""

from __future__ import annotations

import importlib

_FROM = {
    "base": ("GroupedData", "Split", "load", "save", "stratified_split", "stratified_subset"),
    "loaders": ("DATASETS", "REGISTRY", "DatasetSpec", "dataset_rng", "load_dataset"),
    "sources": ("ChecksumError", "DataSourceError", "MissingDataError", "RawFile", "Sources", "sha256_file"),
    "pipeline": ("prepare", "sources_from_params"),
    "names": ("DATASET_GROUPS",),
}
_NAMES = {name: mod for mod, names in _FROM.items() for name in names}

__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:
        return getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
    if name in _FROM:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_NAMES, *_FROM})
