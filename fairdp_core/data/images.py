"""The image datasets' builders: MNIST (IDX files), CIFAR-10 (the pickled batches, read without unpickling code) and
UTKFace (faces by race); each returns the study's GroupedData with its flattened or channel-first images."""

from __future__ import annotations

import gzip
import pickle
import tarfile
from pathlib import Path

import numpy as np

from .base import (
    GroupedData,
    Split,
    stratified_split,
    stratified_subset,
)

__all__ = ["CIFAR10_CLASSES", "read_cifar10"]

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def _read_idx(path: Path) -> np.ndarray:
    b = gzip.open(path).read()
    nd = b[3]
    dims = [int.from_bytes(b[4 + 4 * i: 8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(b, np.uint8, offset=4 + 4 * nd).reshape(dims)


def _image_data(spec, opts, rng, group_attr, provenance, notes, Xtr, ytr, gtr, Xte, yte, gte, class_names):
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


def _build_mnist(spec, paths, opts, rng, group_attr, provenance):
    Xtr, ytr = _read_idx(paths["train-images-idx3-ubyte.gz"]), _read_idx(paths["train-labels-idx1-ubyte.gz"])
    Xte, yte = _read_idx(paths["t10k-images-idx3-ubyte.gz"]), _read_idx(paths["t10k-labels-idx1-ubyte.gz"])
    notes = {"raw_rows": {"train": len(ytr), "test": len(yte)}}
    return _image_data(spec, opts, rng, group_attr, provenance, notes, Xtr, ytr, ytr, Xte, yte, yte,
                       tuple(str(d) for d in range(10)))


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


def _build_cifar10(spec, paths, opts, rng, group_attr, provenance):
    Xtr, ytr, Xte, yte = read_cifar10(paths["cifar-10-python.tar.gz"])
    notes = {"raw_rows": {"train": len(ytr), "test": len(yte)}}
    return _image_data(spec, opts, rng, group_attr, provenance, notes, Xtr, ytr, ytr, Xte, yte, yte, CIFAR10_CLASSES)


def _build_utkface(spec, paths, opts, rng, group_attr, provenance):
    with np.load(paths["utkface_48x48_gray.npz"]) as z:
        X, gender, race = z["images"], z["gender"].astype(np.int64), z["race"].astype(np.int64)
    notes = {"raw_rows": {"all": len(X)}}
    tr, te = stratified_split(gender, race, test_fraction=opts.test_fraction, rng=rng)
    return _image_data(spec, opts, rng, group_attr, provenance, notes, X[tr], gender[tr], race[tr], X[te],
                       gender[te], race[te], ("male", "female"))
