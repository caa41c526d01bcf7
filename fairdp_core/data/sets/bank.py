"""UCI Bank Marketing (bank-full), grouped by marital status; a term deposit subscription is the label.

Canonical source: UCI Machine Learning Repository, "Bank Marketing",
https://archive.ics.uci.edu/dataset/222/bank+marketing
Citation: Moro, S., Rita, P., and Cortez, P. (2014). Bank Marketing. UCI Machine Learning Repository.
https://doi.org/10.24432/C5K306 ; S. Moro, P. Cortez, P. Rita (2014), "A Data-Driven Approach to Predict the
Success of Bank Telemarketing", Decision Support Systems 62:22-31.
Licence: CC BY 4.0 (as UCI lists it).
- bank-full.csv.gz: bank-full.csv extracted from UCI's original bank.zip (2012) inside bank+marketing.zip in
  GitHub Eshani-haldorai/bank-marketing-classifier, commit eb5cc1ace7babca900ef7484106d073ff70164c7; compressed
  here with gzip -9 -n, uncompressed bytes unchanged. An independent copy (Sai-sharmi-gade/PRODIGY_DS_03, commit
  8ab2dcea124295334ea7f06b39043bbb88da63c1) gives an identical bank-full.csv (same md5).
Verified (pandas, sep=';'): bank-full.csv 45211 rows x 17 cols; y {'no': 39922, 'yes': 5289}.
"""

from __future__ import annotations

import numpy as np

from ..base import NumericColumn, TabularSchema
from ..sources import RawFile
from ..spec import DatasetSpec, binary_groups, finish_tabular, mirror_hint

# Vocabularies: bank-names.txt (§7, attribute information), in its order. Numeric bounds: bank-names.txt where it
# gives them, else natural limits rounded outward to a power of ten.
SCHEMA = TabularSchema("bank", numeric={
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


def build(spec, paths, opts, rng, group_attr, provenance):
    import pandas as pd

    df = pd.read_csv(paths["bank-full.csv.gz"], sep=";")
    notes = {"raw_rows": {"all": len(df)}}
    return finish_tabular(
        spec, opts, rng, df, None, target=lambda d: d["y"].eq("yes").to_numpy(np.int64),
        group_attr=group_attr, notes=notes, provenance=provenance)


_URL = ("https://archive.ics.uci.edu/static/public/222/bank+marketing.zip!bank.zip!bank-full.csv")
DATASET = DatasetSpec(
    "bank",
    (RawFile("bank_marketing", "bank-full.csv.gz", urls=(_URL,), how_to_get=mirror_hint("bank"),
             sha256="a33820520e31d26b498e31003e99eb0e477690b699a38eade375acf3b3004dcd", nbytes=475023,
             content_sha256="d1513ec63b385506f7cfce9f2c5caa9fe99e7ba4e8c3fa264b3aaf0f849ed32d"),),
    {"marital": binary_groups("marital", "married", "not married", lambda s: s.eq("married"))},
    build, label="Bank", n_classes=2, origin=__doc__, schema=SCHEMA)
