"""Datasets of the study: a registry of loaders, the typed :class:`GroupedData`, verified raw sources.

Every name loads on first use (PEP 562): a stage that only reads prepared data imports ``base`` alone. A dataset is
one module of :mod:`fairdp_core.data.sets`, found by the registry (:mod:`fairdp_core.data.loaders`).
"""

from __future__ import annotations

from .. import _lazy_exports

_FROM = {
    "base": ("GroupedData", "Split", "load", "save", "stratified_split", "stratified_subset"),
    "loaders": ("DATASETS", "DATASET_CLASSES", "DATASET_GROUPS", "REGISTRY", "DatasetSpec", "dataset_rng",
                "load_dataset"),
    "sources": ("ChecksumError", "DataSourceError", "MissingDataError", "RawFile", "Sources", "sha256_file"),
    "pipeline": ("prepare", "sources_from_params"),
}
__all__, __getattr__, __dir__ = _lazy_exports(__name__, __path__, _FROM)
