"""Loaders for the seven datasets of the study (``shared/STUDY.md`` §2) and their registry.

Each builder reads verified raw files and returns a :class:`GroupedData`. Preprocessing statistics come from the
training rows only; the train/test split (for datasets without an official test file) is stratified by
(group, label) and driven by a generator derived from the params seed and the dataset name.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .base import GroupedData, Split, encode_tabular, stratified_split, stratified_subset
from .sources import RawFile, Sources, sha256_file

__all__ = ["DATASETS", "REGISTRY", "DatasetSpec", "dataset_rng", "load_dataset"]

_GH = "https://raw.githubusercontent.com"
_UCI = "https://archive.ics.uci.edu"


@dataclass(frozen=True)
class GroupSpec:
    """How a raw column becomes group labels: ``names[k]`` is group k; ``assign`` maps the column to k."""

    column: str
    names: tuple[str, ...]
    assign: Callable[[pd.Series], np.ndarray]


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    files: tuple[RawFile, ...]
    groups: dict[str, GroupSpec]  # first key is the default group attribute
    build: Callable[..., GroupedData]
    official_test: bool = False

    @property
    def default_group(self) -> str:
        return next(iter(self.groups))


def dataset_rng(seed: int, name: str) -> np.random.Generator:
    """The generator for a dataset's split/subset: the params seed, specialised by the dataset name."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(zlib.crc32(name.encode()),)))


def _binary(column: str, first: str, second: str, is_first: Callable[[pd.Series], pd.Series]) -> GroupSpec:
    return GroupSpec(column, (first, second), lambda s: np.where(is_first(s), 0, 1).astype(np.int64))


def _finish_tabular(spec: DatasetSpec, opts, rng, tr: pd.DataFrame, te: pd.DataFrame | None, *, target: Callable,
                    numeric: list[str], categorical: list[str], group_attr: str, notes: dict,
                    provenance: dict) -> GroupedData:
    gspec = spec.groups[group_attr]
    if te is None:  # no official test file: a seeded split stratified by (group, label)
        y_all = target(tr)
        g_all = gspec.assign(tr[gspec.column])
        tr_idx, te_idx = stratified_split(y_all, g_all, test_fraction=opts.test_fraction, rng=rng)
        tr, te = tr.iloc[tr_idx].reset_index(drop=True), tr.iloc[te_idx].reset_index(drop=True)
    if opts.train_size is not None:
        keep = stratified_subset(target(tr), gspec.assign(tr[gspec.column]), opts.train_size, rng=rng)
        tr = tr.iloc[keep].reset_index(drop=True)
    if opts.test_size is not None:
        keep = stratified_subset(target(te), gspec.assign(te[gspec.column]), opts.test_size, rng=rng)
        te = te.iloc[keep].reset_index(drop=True)
    if not opts.group_as_feature:
        numeric = [c for c in numeric if c != gspec.column]
        categorical = [c for c in categorical if c != gspec.column]
    elif gspec.column not in numeric + categorical:
        categorical = categorical + [gspec.column]
    Xtr, Xte, names, stats = encode_tabular(tr, te, numeric=numeric, categorical=categorical)
    notes = {**notes, "standardisation": stats}
    return GroupedData(
        name=spec.name,
        train=Split(Xtr, target(tr), gspec.assign(tr[gspec.column])),
        test=Split(Xte, target(te), gspec.assign(te[gspec.column])),
        group_names=gspec.names, class_names=("0", "1"), feature_names=tuple(names),
        input_shape=(len(names),), group_attribute=group_attr, provenance=provenance, notes=notes,
    )


# ------------------------------------------------------------------------------------------------- adult

_ADULT_COLS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
               "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
               "income"]


def _build_adult(spec, paths, opts, rng, group_attr, provenance):
    tr = pd.read_csv(paths["adult.data.gz"], header=None, names=_ADULT_COLS, skipinitialspace=True)
    te = pd.read_csv(paths["adult.test.gz"], header=None, names=_ADULT_COLS, skipinitialspace=True, skiprows=1)
    notes = {"raw_rows": {"train": len(tr), "test": len(te)}}
    # Cleaning: drop rows with a missing ('?') cell, as is standard for Adult.
    tr = tr[~(tr == "?").any(axis=1)].reset_index(drop=True)
    te = te[~(te == "?").any(axis=1)].reset_index(drop=True)
    notes["clean_rows"] = {"train": len(tr), "test": len(te)}
    numeric = ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]
    categorical = ["workclass", "education", "marital-status", "occupation", "relationship", "race", "sex",
                   "native-country"]
    return _finish_tabular(
        spec, opts, rng, tr, te, target=lambda d: d["income"].str.rstrip(".").eq(">50K").to_numpy(np.int64),
        numeric=numeric, categorical=categorical, group_attr=group_attr, notes=notes, provenance=provenance)


# -------------------------------------------------------------------------------------------------- bank

def _build_bank(spec, paths, opts, rng, group_attr, provenance):
    df = pd.read_csv(paths["bank-full.csv.gz"], sep=";")
    notes = {"raw_rows": {"all": len(df)}}
    numeric = ["age", "balance", "day", "duration", "campaign", "pdays", "previous"]
    categorical = ["job", "marital", "education", "default", "housing", "loan", "contact", "month", "poutcome"]
    return _finish_tabular(
        spec, opts, rng, df, None, target=lambda d: d["y"].eq("yes").to_numpy(np.int64),
        numeric=numeric, categorical=categorical, group_attr=group_attr, notes=notes, provenance=provenance)


# ------------------------------------------------------------------------------------------------ credit

def _build_credit(spec, paths, opts, rng, group_attr, provenance):
    df = pd.read_csv(paths["default_of_credit_card_clients.csv.gz"], header=1)
    df = df.sort_values("ID").reset_index(drop=True)  # the export's rows are permuted (SOURCE.md)
    notes = {"raw_rows": {"all": len(df)}}
    numeric = ["LIMIT_BAL", "AGE"] + [f"PAY_{i}" for i in (0, 2, 3, 4, 5, 6)] + \
        [f"BILL_AMT{i}" for i in range(1, 7)] + [f"PAY_AMT{i}" for i in range(1, 7)]
    categorical = ["SEX", "EDUCATION", "MARRIAGE"]
    return _finish_tabular(
        spec, opts, rng, df, None, target=lambda d: d["default payment next month"].to_numpy(np.int64),
        numeric=numeric, categorical=categorical, group_attr=group_attr, notes=notes, provenance=provenance)


# --------------------------------------------------------------------------------------------------- law

_LAW_NUMERIC = ["lsat", "ugpa", "zfygpa", "zgpa", "decile1b", "decile3", "fam_inc", "tier"]
_LAW_CATEGORICAL = ["fulltime", "male", "race1"]


def _build_law(spec, paths, opts, rng, group_attr, provenance):
    df = pd.read_csv(paths["bar_pass_prediction.csv.gz"], low_memory=False)
    notes = {"raw_rows": {"all": len(df)}}
    # Only the admission-time and law-school features; bar1/bar2/bar/dnn_bar_pass_prediction leak the target.
    used = _LAW_NUMERIC + _LAW_CATEGORICAL + ["pass_bar"]
    df = df.dropna(subset=used).reset_index(drop=True)
    notes["clean_rows"] = {"all": len(df)}
    return _finish_tabular(
        spec, opts, rng, df, None, target=lambda d: d["pass_bar"].astype(int).to_numpy(np.int64),
        numeric=_LAW_NUMERIC, categorical=_LAW_CATEGORICAL, group_attr=group_attr, notes=notes,
        provenance=provenance)


# ------------------------------------------------------------------------------------------------ compas

def _build_compas(spec, paths, opts, rng, group_attr, provenance):
    df = pd.read_csv(paths["compas-scores-two-years.csv.gz"])
    notes = {"raw_rows": {"all": len(df)}}
    # ProPublica's filter (compas-analysis, Compas Analysis.ipynb).
    df = df[(df.days_b_screening_arrest <= 30) & (df.days_b_screening_arrest >= -30) & (df.is_recid != -1)
            & (df.c_charge_degree != "O") & (df.score_text != "N/A")].reset_index(drop=True)
    notes["clean_rows"] = {"all": len(df)}
    numeric = ["age", "priors_count", "juv_fel_count", "juv_misd_count", "juv_other_count"]
    categorical = ["c_charge_degree", "sex", "age_cat", "race"]
    return _finish_tabular(
        spec, opts, rng, df, None, target=lambda d: d["two_year_recid"].to_numpy(np.int64),
        numeric=numeric, categorical=categorical, group_attr=group_attr, notes=notes, provenance=provenance)


# ------------------------------------------------------------------------------------------------ images

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

    def split(X, y, g):  # uint8 [n, H, W] -> float32 [n, 1, H, W] in [0, 1]
        return Split((X[:, None].astype(np.float32) / 255.0), y.astype(np.int64), g.astype(np.int64))

    return GroupedData(
        name=spec.name, train=split(Xtr, ytr, gtr), test=split(Xte, yte, gte),
        group_names=spec.groups[group_attr].names, class_names=class_names, feature_names=(),
        input_shape=(1, *Xtr.shape[1:]), group_attribute=group_attr, provenance=provenance, notes=notes)


def _build_mnist(spec, paths, opts, rng, group_attr, provenance):
    Xtr, ytr = _read_idx(paths["train-images-idx3-ubyte.gz"]), _read_idx(paths["train-labels-idx1-ubyte.gz"])
    Xte, yte = _read_idx(paths["t10k-images-idx3-ubyte.gz"]), _read_idx(paths["t10k-labels-idx1-ubyte.gz"])
    notes = {"raw_rows": {"train": len(ytr), "test": len(yte)}}
    return _image_data(spec, opts, rng, group_attr, provenance, notes, Xtr, ytr, ytr, Xte, yte, yte,
                       tuple(str(d) for d in range(10)))


def _build_utkface(spec, paths, opts, rng, group_attr, provenance):
    with np.load(paths["utkface_48x48_gray.npz"]) as z:
        X, gender, race = z["images"], z["gender"].astype(np.int64), z["race"].astype(np.int64)
    notes = {"raw_rows": {"all": len(X)}}
    tr, te = stratified_split(gender, race, test_fraction=opts.test_fraction, rng=rng)
    return _image_data(spec, opts, rng, group_attr, provenance, notes, X[tr], gender[tr], race[tr], X[te],
                       gender[te], race[te], ("male", "female"))


# ---------------------------------------------------------------------------------------------- registry

def _gh(repo_commit_path: str) -> str:
    return f"{_GH}/{repo_commit_path}"


_SEE = "see ../shared/datasets/{}/SOURCE.md for its origin, or point data.mirror / $FAIRDP_DATA_MIRROR at a copy"

REGISTRY: dict[str, DatasetSpec] = {
    "adult": DatasetSpec(
        "adult",
        (RawFile("adult", "adult.data.gz", (f"{_UCI}/ml/machine-learning-databases/adult/adult.data",),
                 _SEE.format("adult")),
         RawFile("adult", "adult.test.gz", (f"{_UCI}/ml/machine-learning-databases/adult/adult.test",),
                 _SEE.format("adult"))),
        {"sex": _binary("sex", "Male", "Female", lambda s: s.eq("Male")),
         "race": _binary("race", "White", "non-White", lambda s: s.eq("White"))},
        _build_adult, official_test=True),
    "bank": DatasetSpec(
        "bank",
        (RawFile("bank_marketing", "bank-full.csv.gz",
                 (f"{_UCI}/static/public/222/bank+marketing.zip!bank.zip!bank-full.csv",),
                 _SEE.format("bank_marketing")),),
        {"marital": _binary("marital", "married", "not married", lambda s: s.eq("married"))},
        _build_bank),
    "credit": DatasetSpec(
        "credit",
        (RawFile("credit_default", "default_of_credit_card_clients.csv.gz",
                 (_gh("phdtai/Default-of-Credit-Card-Clients/3c54b079c129384b8148fc12943ab239428da550/"
                      "default%20of%20credit%20card%20clients.csv"),),
                 _SEE.format("credit_default")),),
        {"SEX": _binary("SEX", "male", "female", lambda s: s.eq(1))},
        _build_credit),
    "law": DatasetSpec(
        "law",
        (RawFile("law_school", "bar_pass_prediction.csv.gz",
                 (_gh("TheRohanVerma/CMPUT622_FairSMOTE_vs_FairClassBal/a895803f7e2a09010dc2185653081b790a164096/"
                      "data/bar_pass_prediction.csv"),),
                 _SEE.format("law_school")),),
        {"race1": _binary("race1", "White", "non-White", lambda s: s.eq("white"))},
        _build_law),
    "compas": DatasetSpec(
        "compas",
        (RawFile("compas", "compas-scores-two-years.csv.gz",
                 (_gh("propublica/compas-analysis/bafff5da3f2e45eca6c2d5055faad269defd135a/"
                      "compas-scores-two-years.csv"),),
                 _SEE.format("compas")),),
        {"race": _binary("race", "African-American", "other", lambda s: s.eq("African-American")),
         "sex": _binary("sex", "Male", "Female", lambda s: s.eq("Male"))},
        _build_compas),
    "mnist": DatasetSpec(
        "mnist",
        tuple(RawFile("mnist", f, (f"https://ossci-datasets.s3.amazonaws.com/mnist/{f}",), _SEE.format("mnist"))
              for f in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")),
        {"digit": GroupSpec("digit", tuple(str(d) for d in range(10)), lambda s: np.asarray(s, np.int64))},
        _build_mnist, official_test=True),
    "utkface": DatasetSpec(
        "utkface",
        (RawFile("utkface", "utkface_48x48_gray.npz", (),
                 "derived 48x48 grayscale file with no canonical download; rebuild it from the UTKFace "
                 "aligned & cropped JPEGs as ../shared/datasets/utkface/SOURCE.md describes, or use the mirror"),),
        {"race": GroupSpec("race", ("White", "Black", "Asian", "Indian", "Others"),
                           lambda s: np.asarray(s, np.int64))},
        _build_utkface),
}

DATASETS: tuple[str, ...] = tuple(REGISTRY)


def load_dataset(name: str, options, sources: Sources, *, seed: int) -> GroupedData:
    """Fetch, verify and preprocess dataset ``name`` with its ``options`` (a ``DatasetOptions`` from params)."""
    if name not in REGISTRY:
        raise KeyError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    spec = REGISTRY[name]
    group_attr = options.group or spec.default_group
    if group_attr not in spec.groups:
        raise ValueError(f"dataset {name!r}: unknown group attribute {group_attr!r}; known: {', '.join(spec.groups)}")
    paths = {raw.name: sources.fetch(raw) for raw in spec.files}
    provenance = {f"{raw.folder}/{raw.name}": sha256_file(paths[raw.name]) for raw in spec.files}
    return spec.build(spec, paths, options, dataset_rng(seed, name), group_attr, provenance)
