"""Loaders for the datasets of the study (docs/study.md, 'Datasets and groups'), CIFAR-10 for the DP-SGD utility
check, and their registry; the image datasets' builders are in :mod:`fairdp_core.data.images`.

Each builder reads verified raw files and returns a :class:`GroupedData`. A tabular dataset is encoded with its
public schema (:class:`TabularSchema`, kept beside its builder): every categorical vocabulary and every numeric
transform and bound comes from the dataset's documentation, never from its records, so no record changes the
feature space or another record's encoding (a differential-privacy requirement: the training pool is private).
The train/test split (for datasets without an official test file) is stratified by (group, label) and driven by a
generator derived from the params seed and the dataset name.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from .base import (
    GroupedData,
    NumericColumn,
    Split,
    TabularSchema,
    encode_with_schema,
    stratified_split,
    stratified_subset,
)
from .images import CIFAR10_CLASSES, _build_cifar10, _build_mnist, _build_utkface
from .sources import RawFile, Sources, sha256_file

__all__ = ["CIFAR10_CLASSES", "DATASETS", "REGISTRY", "DatasetSpec", "dataset_rng", "group_column", "load_dataset"]

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
    schema: TabularSchema | None = None  # tabular datasets: the public feature space

    @property
    def default_group(self) -> str:
        return next(iter(self.groups))


def dataset_rng(seed: int, name: str) -> np.random.Generator:
    """The generator for a dataset's split/subset: the params seed, specialised by the dataset name."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(zlib.crc32(name.encode()),)))


def _binary(column: str, first: str, second: str, is_first: Callable[[pd.Series], pd.Series]) -> GroupSpec:
    return GroupSpec(column, (first, second), lambda s: np.where(is_first(s), 0, 1).astype(np.int64))


def _finish_tabular(spec: DatasetSpec, opts, rng, tr: pd.DataFrame, te: pd.DataFrame | None, *, target: Callable,
                    group_attr: str, notes: dict, provenance: dict) -> GroupedData:
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
    schema = spec.schema
    if not opts.group_as_feature:
        schema = schema.without(gspec.column)
    elif gspec.column not in schema.columns:
        raise ValueError(f"dataset {spec.name!r}: the public schema lacks the group column {gspec.column!r}")
    Xtr, Xte, names, public = encode_with_schema(tr, te, schema=schema)
    notes = {**notes, "public_schema": public}
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


# Vocabularies: adult.names, in its order. Numeric bounds: adult.names' extraction filter
# ((AAGE>16) && (AGI>100) && (AFNLWGT>1) && (HRSWK>0)) and the census fields' coding.
_ADULT_SCHEMA = TabularSchema("adult", numeric={
    "age": NumericColumn(17, 90),  # 17: AAGE>16 (adult.names); 90: the census top-code for age
    "fnlwgt": NumericColumn(1e4, 1e7, "log1p"),  # CPS person weight; powers of ten around it (only AFNLWGT>1 is given)
    "education-num": NumericColumn(1, 16),  # the 16 education levels of adult.names, Preschool=1 .. Doctorate=16
    "capital-gain": NumericColumn(0, 99_999, "log1p"),  # dollars; 99999 is the 5-digit census field's top code
    "capital-loss": NumericColumn(0, 99_999, "log1p"),  # dollars; the same 5-digit census field
    "hours-per-week": NumericColumn(1, 99),  # 1: HRSWK>0 (adult.names); 99: the 2-digit census field's maximum
}, categorical={
    "workclass": ("Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov",
                  "Without-pay", "Never-worked"),  # adult.names
    "education": ("Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm", "Assoc-voc", "9th",
                  "7th-8th", "12th", "Masters", "1st-4th", "10th", "Doctorate", "5th-6th", "Preschool"),  # adult.names
    "marital-status": ("Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
                       "Married-spouse-absent", "Married-AF-spouse"),  # adult.names
    "occupation": ("Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial", "Prof-specialty",
                   "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical", "Farming-fishing", "Transport-moving",
                   "Priv-house-serv", "Protective-serv", "Armed-Forces"),  # adult.names
    "relationship": ("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"),  # adult.names
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),  # adult.names
    "sex": ("Female", "Male"),  # adult.names
    "native-country": ("United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
                       "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba", "Iran",
                       "Honduras", "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico", "Portugal",
                       "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador", "Taiwan", "Haiti", "Columbia",
                       "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand", "Yugoslavia", "El-Salvador",
                       "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands"),  # adult.names (its spellings)
})


def _adult_frames(paths) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The cleaned Adult train and test frames (rows with a '?' cell dropped) and their row counts."""
    tr = pd.read_csv(paths["adult.data.gz"], header=None, names=_ADULT_COLS, skipinitialspace=True)
    te = pd.read_csv(paths["adult.test.gz"], header=None, names=_ADULT_COLS, skipinitialspace=True, skiprows=1)
    notes = {"raw_rows": {"train": len(tr), "test": len(te)}}
    # Cleaning: drop rows with a missing ('?') cell, as is standard for Adult.
    tr = tr[~(tr == "?").any(axis=1)].reset_index(drop=True)
    te = te[~(te == "?").any(axis=1)].reset_index(drop=True)
    notes["clean_rows"] = {"train": len(tr), "test": len(te)}
    return tr, te, notes


def _build_adult(spec, paths, opts, rng, group_attr, provenance):
    tr, te, notes = _adult_frames(paths)
    return _finish_tabular(  # the test file's labels end in '.': '>50K.'
        spec, opts, rng, tr, te, target=lambda d: d["income"].str.rstrip(".").eq(">50K").to_numpy(np.int64),
        group_attr=group_attr, notes=notes, provenance=provenance)


# -------------------------------------------------------------------------------------------------- bank

# Vocabularies: bank-names.txt (§7, attribute information), in its order. Numeric bounds: bank-names.txt where it
# gives them, else natural limits rounded outward to a power of ten.
_BANK_SCHEMA = TabularSchema("bank", numeric={
    "age": NumericColumn(18, 100),  # years; an adult bank client (18) up to 100
    "balance": NumericColumn(-1e6, 1e6, "signed_log1p"),  # average yearly balance in euros, negative if overdrawn
    "day": NumericColumn(1, 31),  # last contact day of the month (bank-names.txt)
    "duration": NumericColumn(0, 1e4, "log1p"),  # last contact duration in seconds; 1e4 s is 2.8 hours
    "campaign": NumericColumn(1, 100, "log1p"),  # contacts in this campaign, >= 1 as it includes the last (bank-names.txt)
    # pdays: days since a previous campaign's contact, -1 = not contacted (bank-names.txt); 1000 days is about 2.7
    # years, the order of the 30-month span of the data (May 2008 - Nov 2010, bank-names.txt)
    "pdays": NumericColumn(-1, 1000, "signed_log1p"),
    "previous": NumericColumn(0, 1000, "log1p"),  # contacts before this campaign (a count)
}, categorical={
    "job": ("admin.", "unknown", "unemployed", "management", "housemaid", "entrepreneur", "student", "blue-collar",
            "self-employed", "retired", "technician", "services"),  # bank-names.txt
    "marital": ("married", "divorced", "single"),  # bank-names.txt ("divorced" means divorced or widowed)
    "education": ("unknown", "secondary", "primary", "tertiary"),  # bank-names.txt
    "default": ("yes", "no"),  # bank-names.txt
    "housing": ("yes", "no"),  # bank-names.txt
    "loan": ("yes", "no"),  # bank-names.txt
    "contact": ("unknown", "telephone", "cellular"),  # bank-names.txt
    "month": ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),  # bank-names.txt
    "poutcome": ("unknown", "other", "failure", "success"),  # bank-names.txt
})


def _build_bank(spec, paths, opts, rng, group_attr, provenance):
    df = pd.read_csv(paths["bank-full.csv.gz"], sep=";")
    notes = {"raw_rows": {"all": len(df)}}
    return _finish_tabular(
        spec, opts, rng, df, None, target=lambda d: d["y"].eq("yes").to_numpy(np.int64),
        group_attr=group_attr, notes=notes, provenance=provenance)


# ------------------------------------------------------------------------------------------------ credit

# Codes: the UCI page's attribute information (https://archive.ics.uci.edu/dataset/350, X1..X23; credit_default/
# SOURCE.md gives SEX). Amounts are NT dollars, bounded by powers of ten beyond the largest credit line.
_CREDIT_SCHEMA = TabularSchema("credit", numeric={
    "LIMIT_BAL": NumericColumn(0, 1e7, "log1p"),  # X1: amount of given credit, NT$
    "AGE": NumericColumn(18, 100),  # X5: age in years; an adult card holder (18) up to 100
    # X6..X11: repayment status, -1 = paid duly, 1..8 = months of delay, 9 = nine months and above (UCI). The file
    # also holds -2 and 0, which UCI does not document (read as "no consumption" and "revolving credit"): lo = -2.
    **{f"PAY_{i}": NumericColumn(-2, 9) for i in (0, 2, 3, 4, 5, 6)},
    # X12..X17: bill statement amounts, NT$; negative when the client is in credit, hence signed_log1p.
    **{f"BILL_AMT{i}": NumericColumn(-1e7, 1e7, "signed_log1p") for i in range(1, 7)},
    **{f"PAY_AMT{i}": NumericColumn(0, 1e7, "log1p") for i in range(1, 7)},  # X18..X23: amounts paid, NT$
}, categorical={
    "SEX": ("1", "2"),  # X2: 1 = male, 2 = female (UCI; SOURCE.md)
    # X3: 1 = graduate school, 2 = university, 3 = high school, 4 = others (UCI). The file also holds 0, 5 and 6,
    # which UCI does not document (usually read as "unknown"); they are kept as their own categories so that no
    # record is dropped or merged by a rule chosen after looking at the data.
    "EDUCATION": ("0", "1", "2", "3", "4", "5", "6"),
    # X4: 1 = married, 2 = single, 3 = others (UCI); 0 is in the file but undocumented, kept likewise.
    "MARRIAGE": ("0", "1", "2", "3"),
})


def _build_credit(spec, paths, opts, rng, group_attr, provenance):
    df = pd.read_csv(paths["default_of_credit_card_clients.csv.gz"], header=1)
    df = df.sort_values("ID").reset_index(drop=True)  # the export's rows are permuted (SOURCE.md)
    notes = {"raw_rows": {"all": len(df)}}
    return _finish_tabular(
        spec, opts, rng, df, None, target=lambda d: d["default payment next month"].to_numpy(np.int64),
        group_attr=group_attr, notes=notes, provenance=provenance)


# --------------------------------------------------------------------------------------------------- law

# The LSAC National Longitudinal Bar Passage Study codebook (Wightman 1998; law_school/SOURCE.md) and the value set
# SOURCE.md verified for race1. Only admission-time and law-school features.
_LAW_SCHEMA = TabularSchema("law", numeric={
    "lsat": NumericColumn(10, 48),  # the LSAT's 10-48 score scale (1982-1991), the scale of the 1991 LSAC cohort
    "ugpa": NumericColumn(0, 4),  # undergraduate GPA on the 0-4 scale
    "zfygpa": NumericColumn(-4, 4),  # first-year law GPA, z-scored within school: +-4 standard deviations
    "zgpa": NumericColumn(-4, 4),  # cumulative law GPA, z-scored within school: +-4 standard deviations
    "decile1b": NumericColumn(1, 10),  # class-rank decile after year 1
    "decile3": NumericColumn(1, 10),  # class-rank decile after year 3
    "fam_inc": NumericColumn(1, 5),  # family income quintile, 1 (lowest) .. 5 (highest)
    "tier": NumericColumn(1, 6),  # the codebook's six law-school tiers (clusters)
}, categorical={
    "fulltime": ("1", "2"),  # 1 = full-time, 2 = part-time
    "male": ("0", "1"),  # indicator
    "race1": ("white", "black", "hisp", "asian", "other"),  # law_school/SOURCE.md (rows with no race are dropped)
})
_LAW_COLUMNS = list(_LAW_SCHEMA.columns)


def _build_law(spec, paths, opts, rng, group_attr, provenance):
    df = pd.read_csv(paths["bar_pass_prediction.csv.gz"], low_memory=False)
    notes = {"raw_rows": {"all": len(df)}}
    # Only the admission-time and law-school features; bar1/bar2/bar/dnn_bar_pass_prediction leak the target.
    used = _LAW_COLUMNS + ["pass_bar"]
    df = df.dropna(subset=used).reset_index(drop=True)
    notes["clean_rows"] = {"all": len(df)}
    return _finish_tabular(
        spec, opts, rng, df, None, target=lambda d: d["pass_bar"].astype(int).to_numpy(np.int64),
        group_attr=group_attr, notes=notes, provenance=provenance)


# The paper's Law variant (its public code): first-attempt pass (bar1 = "P", 88.8% of the rows) from eight
# admission-time and law-school scores and race as White / non-White. The study's own "law" predicts eventual
# passing (pass_bar, 94.9%) from more features; both read the same raw file.
_LAW_PAPER_SCHEMA = TabularSchema("law_paper", numeric={
    k: _LAW_SCHEMA.numeric[k] for k in ("decile1b", "decile3", "lsat", "ugpa", "zfygpa", "zgpa", "fam_inc", "tier")
}, categorical={
    "race_white": ("0", "1"),  # 1 = race1 "white" (the paper's binary race)
})
_LAW_PAPER_COLUMNS = ["decile1b", "decile3", "lsat", "ugpa", "zfygpa", "zgpa", "fam_inc", "tier", "race1"]


def _build_law_paper(spec, paths, opts, rng, group_attr, provenance):
    df = pd.read_csv(paths["bar_pass_prediction.csv.gz"], low_memory=False)
    notes = {"raw_rows": {"all": len(df)}}
    df = df.dropna(subset=_LAW_PAPER_COLUMNS + ["bar1"]).reset_index(drop=True)
    bad = set(df["bar1"]) - {"P", "F"}
    if bad:
        raise ValueError(f"dataset 'law_paper': column bar1 has values {sorted(bad)} outside the codebook's P/F")
    df["race_white"] = np.where(df["race1"].eq("white"), "1", "0")
    notes["clean_rows"] = {"all": len(df)}
    return _finish_tabular(
        spec, opts, rng, df, None, target=lambda d: d["bar1"].eq("P").astype(int).to_numpy(np.int64),
        group_attr=group_attr, notes=notes, provenance=provenance)


# ------------------------------------------------------------------------------------------------ compas

# Value sets of ProPublica's analysis (compas-analysis, Compas Analysis.ipynb; compas/SOURCE.md); counts are bounded
# by a power of ten.
_COMPAS_SCHEMA = TabularSchema("compas", numeric={
    "age": NumericColumn(18, 100),  # years; COMPAS screens adults (18) and 100 bounds a human age
    "priors_count": NumericColumn(0, 100, "log1p"),  # number of prior offences (a count)
    "juv_fel_count": NumericColumn(0, 100, "log1p"),  # juvenile felonies (a count)
    "juv_misd_count": NumericColumn(0, 100, "log1p"),  # juvenile misdemeanours (a count)
    "juv_other_count": NumericColumn(0, 100, "log1p"),  # other juvenile offences (a count)
}, categorical={
    "c_charge_degree": ("F", "M"),  # felony / misdemeanour; ProPublica's filter drops "O" (ordinary traffic)
    "sex": ("Male", "Female"),  # ProPublica
    "age_cat": ("Less than 25", "25 - 45", "Greater than 45"),  # ProPublica's age categories
    "race": ("African-American", "Caucasian", "Hispanic", "Other", "Asian", "Native American"),  # SOURCE.md
})


def _build_compas(spec, paths, opts, rng, group_attr, provenance):
    df = pd.read_csv(paths["compas-scores-two-years.csv.gz"])
    notes = {"raw_rows": {"all": len(df)}}
    # ProPublica's filter (compas-analysis, Compas Analysis.ipynb).
    df = df[(df.days_b_screening_arrest <= 30) & (df.days_b_screening_arrest >= -30) & (df.is_recid != -1)
            & (df.c_charge_degree != "O") & (df.score_text != "N/A")].reset_index(drop=True)
    notes["clean_rows"] = {"all": len(df)}
    return _finish_tabular(
        spec, opts, rng, df, None, target=lambda d: d["two_year_recid"].to_numpy(np.int64),
        group_attr=group_attr, notes=notes, provenance=provenance)


# ------------------------------------------------------------------------------------------------ images




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
        _build_adult, official_test=True, schema=_ADULT_SCHEMA),
    "bank": DatasetSpec(
        "bank",
        (RawFile("bank_marketing", "bank-full.csv.gz",
                 (f"{_UCI}/static/public/222/bank+marketing.zip!bank.zip!bank-full.csv",),
                 _SEE.format("bank_marketing")),),
        {"marital": _binary("marital", "married", "not married", lambda s: s.eq("married"))},
        _build_bank, schema=_BANK_SCHEMA),
    "credit": DatasetSpec(
        "credit",
        (RawFile("credit_default", "default_of_credit_card_clients.csv.gz",
                 (_gh("phdtai/Default-of-Credit-Card-Clients/3c54b079c129384b8148fc12943ab239428da550/"
                      "default%20of%20credit%20card%20clients.csv"),),
                 _SEE.format("credit_default")),),
        {"SEX": _binary("SEX", "male", "female", lambda s: s.eq(1))},
        _build_credit, schema=_CREDIT_SCHEMA),
    "law": DatasetSpec(
        "law",
        (RawFile("law_school", "bar_pass_prediction.csv.gz",
                 (_gh("TheRohanVerma/CMPUT622_FairSMOTE_vs_FairClassBal/a895803f7e2a09010dc2185653081b790a164096/"
                      "data/bar_pass_prediction.csv"),),
                 _SEE.format("law_school")),),
        {"race1": _binary("race1", "White", "non-White", lambda s: s.eq("white"))},
        _build_law, schema=_LAW_SCHEMA),
    "law_paper": DatasetSpec(
        "law_paper",
        (RawFile("law_school", "bar_pass_prediction.csv.gz",
                 (_gh("TheRohanVerma/CMPUT622_FairSMOTE_vs_FairClassBal/a895803f7e2a09010dc2185653081b790a164096/"
                      "data/bar_pass_prediction.csv"),),
                 _SEE.format("law_school")),),
        {"race1": _binary("race_white", "White", "non-White", lambda s: s.eq("1"))},
        _build_law_paper, schema=_LAW_PAPER_SCHEMA),
    "compas": DatasetSpec(
        "compas",
        (RawFile("compas", "compas-scores-two-years.csv.gz",
                 (_gh("propublica/compas-analysis/bafff5da3f2e45eca6c2d5055faad269defd135a/"
                      "compas-scores-two-years.csv"),),
                 _SEE.format("compas")),),
        {"race": _binary("race", "African-American", "other", lambda s: s.eq("African-American")),
         "sex": _binary("sex", "Male", "Female", lambda s: s.eq("Male"))},
        _build_compas, schema=_COMPAS_SCHEMA),
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
    # not in the study's mirror: the DP-SGD utility check (gpu profile), canonical download only
    "cifar10": DatasetSpec(
        "cifar10",
        (RawFile("cifar10", "cifar-10-python.tar.gz", ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
                 "the canonical archive of https://www.cs.toronto.edu/~kriz/cifar.html (set data.download: true, or "
                 "put it in data/raw/cifar10/)"),),
        {"class": GroupSpec("class", CIFAR10_CLASSES, lambda s: np.asarray(s, np.int64))},
        _build_cifar10, official_test=True),
}

DATASETS: tuple[str, ...] = tuple(REGISTRY)


def load_dataset(name: str, options, sources: Sources, *, seed: int) -> GroupedData:
    """Fetch, verify and preprocess dataset ``name`` with its ``options`` (a ``DatasetOptions`` from params)."""
    base = getattr(options, "source", None) or name  # a variant (``source``) is prepared from its study dataset
    if base not in REGISTRY:
        raise KeyError(f"unknown dataset {base!r}; known: {', '.join(DATASETS)}")
    spec = REGISTRY[base]
    group_attr = options.group or spec.default_group
    if group_attr not in spec.groups:
        raise ValueError(f"dataset {name!r}: unknown group attribute {group_attr!r}; known: {', '.join(spec.groups)}")
    paths = {raw.name: sources.fetch(raw) for raw in spec.files}
    provenance = {f"{raw.folder}/{raw.name}": sha256_file(paths[raw.name]) for raw in spec.files}
    data = spec.build(spec, paths, options, dataset_rng(seed, base), group_attr, provenance)
    return data if base == name else replace(data, name=name, notes={**data.notes, "source": base})


def group_column(data: GroupedData) -> tuple[str, tuple[str, ...], np.ndarray]:
    """The raw column behind ``data``'s group attribute: its name, its public vocabulary (the encoded one-hot
    block ``<column>=<value>``, when the column is a model input) and the group of each vocabulary value."""
    base = data.notes.get("source", data.name)
    gspec = REGISTRY[str(base)].groups[data.group_attribute]
    vocab = tuple(data.notes.get("public_schema", {}).get("categorical", {}).get(gspec.column, ()))
    return gspec.column, vocab, gspec.assign(pd.Series(vocab, dtype=object)) if vocab else np.zeros(0, np.int64)
