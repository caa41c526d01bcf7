"""CIFAR-10 (the canonical python archive), grouped by class: the gpu profile's DP-SGD utility check.

Canonical archive: https://www.cs.toronto.edu/~kriz/cifar.html (cifar-10-python.tar.gz).
Citation: Krizhevsky, A. (2009). Learning Multiple Layers of Features from Tiny Images, technical report,
University of Toronto. Not in the study's mirror: fetched only by canonical download (data.download: true)
and checked against the sha256 recorded below (the canonical archive's).
"""

from __future__ import annotations

import pickle
import tarfile
from pathlib import Path

import numpy as np

from ..sources import RawFile
from ..spec import DatasetSpec, GroupSpec, finish_images

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


class _CifarUnpickler(pickle.Unpickler):
    """CIFAR-10's batches are Python pickles (dicts of bytes keys, uint8 arrays, label lists). They are read only
    after their archive's sha256 has been checked, and even then only numpy's array reconstruction is allowed."""

    _ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
                ("numpy._core.multiarray", "scalar"),
                ("_codecs", "encode")}  # how protocol 2 stores bytes when Python 3 writes it (a regenerated archive)

    def find_class(self, module, name):
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"CIFAR-10 batch refers to {module}.{name}, which a CIFAR batch never does")


def read_cifar10(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X_train uint8 [50000, 3, 32, 32], y_train, X_test [10000, ...], y_test) from cifar-10-python.tar.gz (the
    canonical archive: ``cifar-10-batches-py/data_batch_1..5`` and ``test_batch``, each a pickled dict with
    ``b"data"`` [n, 3072] row-major RGB planes and ``b"labels"``)."""

    def batch(tf, name):
        member = tf.extractfile(f"cifar-10-batches-py/{name}")
        if member is None:
            raise ValueError(f"{path}: cifar-10-batches-py/{name} missing from the archive")
        d = _CifarUnpickler(member, encoding="bytes").load()
        X = np.asarray(d[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        return X, np.asarray(d[b"labels"], dtype=np.int64)

    with tarfile.open(path, "r:gz") as tf:
        parts = [batch(tf, f"data_batch_{i}") for i in range(1, 6)]
        Xte, yte = batch(tf, "test_batch")
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), Xte, yte


def build(spec, paths, opts, rng, group_attr, provenance):
    Xtr, ytr, Xte, yte = read_cifar10(paths["cifar-10-python.tar.gz"])
    notes = {"raw_rows": {"train": len(ytr), "test": len(yte)}}
    return finish_images(spec, opts, rng, group_attr, provenance, notes, Xtr, ytr, ytr, Xte, yte, yte, CLASSES)


DATASET = DatasetSpec(
    "cifar10",  # not in the study's mirror: canonical download only
    (RawFile("cifar10", "cifar-10-python.tar.gz", urls=("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
             how_to_get=(
                 "the canonical archive of https://www.cs.toronto.edu/~kriz/cifar.html (set data.download: true, or "
                 "put it in data/raw/cifar10/)"),
             sha256="6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce", nbytes=170498071,
             content_sha256=None),),
    {"class": GroupSpec("class", CLASSES, lambda s: np.asarray(s, np.int64))},
    build, label="CIFAR-10", n_classes=10, origin=__doc__, official_test=True)
