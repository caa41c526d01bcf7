"""UCI Adult (census income), grouped by sex (default) or race; income above $50K is the label.

Canonical source: UCI Machine Learning Repository, "Adult", https://archive.ics.uci.edu/dataset/2/adult
(old path: https://archive.ics.uci.edu/ml/machine-learning-databases/adult/).
Citation: Becker, B. and Kohavi, R. (1996). Adult. UCI Machine Learning Repository.
https://doi.org/10.24432/C5XW20
Licence: CC BY 4.0 (as UCI lists it).
- adult.data.gz: adult.data from GitHub jj4192/MLp3 (dataset/adult/adult.data), commit
  18548a53e562971567fa096e984848b138e371bb; its size and md5 match the canonical UCI file.
- adult.test.gz: no unmodified copy was found; adult.test from GitHub YuzhongHuangCS/fairness, commit
  10dcbc38734e5f95a574c44de972b8e084229d38, repaired: the header row that replaced the original first line was
  changed back to "|1x3 Cross validator" and the missing final newline was added (no record touched); the
  result's md5 matches the canonical UCI adult.test.
Both were compressed here with gzip -9 -n; uncompressed bytes are as described above.
Verified (pandas): adult.data 32561 rows x 15 cols, 4262 '?' cells; adult.test 16281 rows x 15 cols, 2203 '?'.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..base import NumericColumn, TabularSchema
from ..sources import RawFile
from ..spec import DatasetSpec, binary_groups, finish_tabular, mirror_hint

if TYPE_CHECKING:
    import pandas as pd


COLUMNS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
               "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
               "income"]


# Vocabularies: adult.names, in its order. Numeric bounds: adult.names' extraction filter
# ((AAGE>16) && (AGI>100) && (AFNLWGT>1) && (HRSWK>0)) and the census fields' coding.
SCHEMA = TabularSchema("adult", numeric={
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


def adult_frames(paths) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The cleaned Adult train and test frames (rows with a '?' cell dropped) and their row counts."""
    import pandas as pd

    tr = pd.read_csv(paths["adult.data.gz"], header=None, names=COLUMNS, skipinitialspace=True)
    te = pd.read_csv(paths["adult.test.gz"], header=None, names=COLUMNS, skipinitialspace=True, skiprows=1)
    notes = {"raw_rows": {"train": len(tr), "test": len(te)}}
    # Cleaning: drop rows with a missing ('?') cell, as is standard for Adult.
    tr = tr[~(tr == "?").any(axis=1)].reset_index(drop=True)
    te = te[~(te == "?").any(axis=1)].reset_index(drop=True)
    notes["clean_rows"] = {"train": len(tr), "test": len(te)}
    return tr, te, notes


def build(spec, paths, opts, rng, group_attr, provenance):
    tr, te, notes = adult_frames(paths)
    return finish_tabular(  # the test file's labels end in '.': '>50K.'
        spec, opts, rng, tr, te, target=lambda d: d["income"].str.rstrip(".").eq(">50K").to_numpy(np.int64),
        group_attr=group_attr, notes=notes, provenance=provenance)


_UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases/adult"
DATASET = DatasetSpec(
    "adult",
    (RawFile("adult", "adult.data.gz", urls=(f"{_UCI}/adult.data",), how_to_get=mirror_hint("adult"),
             sha256="c7a2b4716a97f930123e0baf879188d701e798172631a654fc703d4b082907f3", nbytes=408969,
             content_sha256="5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d"),
     RawFile("adult", "adult.test.gz", urls=(f"{_UCI}/adult.test",), how_to_get=mirror_hint("adult"),
             sha256="8a2c1bffa6e7ce5abfa43881ae5e87c4311ebc2b3cd526c9c40a43f19f06f799", nbytes=205254,
             content_sha256="a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05")),
    {"sex": binary_groups("sex", "Male", "Female", lambda s: s.eq("Male")),
     "race": binary_groups("race", "White", "non-White", lambda s: s.eq("White"))},
    build, label="Adult", n_classes=2, origin=__doc__, official_test=True, schema=SCHEMA)
