"""UTKFace faces (48 x 48 grey, derived from the aligned and cropped JPEGs), grouped by race; gender is the label.

Canonical source: UTKFace, https://susanqq.github.io/UTKFace/ ("Aligned & Cropped Faces", UTKFace.tar.gz,
23,708 images at 200x200 RGB).
Citation: Zhang, Z., Song, Y., and Qi, H. (2017), "Age Progression/Regression by Conditional Adversarial
Autoencoder", CVPR.
Licence: non-commercial research purposes only; the image copyright stays with the original owners.
- utkface_48x48_gray.npz: derived here from the 23,707 original aligned & cropped JPEGs (one fewer than
  UTKFace lists) in GitHub mattans/AgeProgression, data/UTKFace/unlabeled/, commit
  2d937c615a3d10408db0ea795842e569bc9eedb0. Each image: Pillow convert('L'), resize to (48, 48) with LANCZOS,
  stored as uint8; rows sorted by file name; the 3 files whose names have no race field are dropped.
  Arrays: images, age, gender (0=male, 1=female), race (0=White, 1=Black, 2=Asian, 3=Indian, 4=Others),
  filename (the original file name).
Verified: images (23704, 48, 48) uint8; race {'0': 10078, '1': 4525, '2': 3434, '3': 3975, '4': 1692}.
"""

from __future__ import annotations

import numpy as np

from ..base import stratified_split
from ..sources import RawFile
from ..spec import DatasetSpec, GroupSpec, finish_images


def build(spec, paths, opts, rng, group_attr, provenance):
    with np.load(paths["utkface_48x48_gray.npz"]) as z:
        X, gender, race = z["images"], z["gender"].astype(np.int64), z["race"].astype(np.int64)
    notes = {"raw_rows": {"all": len(X)}}
    tr, te = stratified_split(gender, race, test_fraction=opts.test_fraction, rng=rng)
    return finish_images(spec, opts, rng, group_attr, provenance, notes, X[tr], gender[tr], race[tr], X[te],
                         gender[te], race[te], ("male", "female"))


DATASET = DatasetSpec(
    "utkface",
    (RawFile("utkface", "utkface_48x48_gray.npz", urls=(), how_to_get=(
                 "derived 48x48 grayscale file with no canonical download; rebuild it from the UTKFace aligned & "
                 "cropped JPEGs as this module's docstring describes, or use the mirror"),
             sha256="ce9cf192d42f56a593789c297b51b0b378497bc5071be349133aa746e399ad24", nbytes=51037899,
             content_sha256="ce9cf192d42f56a593789c297b51b0b378497bc5071be349133aa746e399ad24"),),
    {"race": GroupSpec("race", ("White", "Black", "Asian", "Indian", "Others"), lambda s: np.asarray(s, np.int64))},
    build, label="UTKFace", n_classes=2, origin=__doc__)
