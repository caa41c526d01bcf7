"""Default of credit card clients (Taiwan), grouped by sex; default next month is the label.

Canonical source: UCI Machine Learning Repository, "Default of Credit Card Clients",
https://archive.ics.uci.edu/dataset/350/default+of+credit+card+clients (distributed as an .xls).
Citation: Yeh, I-C. (2009). UCI Machine Learning Repository. https://doi.org/10.24432/C55S3H ;
Yeh, I-C. and Lien, C-H. (2009), Expert Systems with Applications 36(2):2473-2480.
Licence: CC BY 4.0 (as UCI lists it).
- default_of_credit_card_clients.csv.gz: "default of credit card clients.csv" from GitHub
  phdtai/Default-of-Credit-Card-Clients, commit 3c54b079c129384b8148fc12943ab239428da550, a CSV export of
  the UCI .xls (keeps its two header rows; CRLF line endings); renamed and compressed here (gzip -9 -n),
  bytes unchanged. Rows are in a permuted order, not ID order; all IDs 1..30000 occur once, so sorting by
  ID restores the UCI order. After sorting, every cell equals the Kaggle re-export UCI_Credit_Card.csv
  except two AGE cells (ID 3, 4) that are blank in that copy.
Verified (header=1): 30000 rows x 25 cols, 0 missing; default payment next month {'0': 23364, '1': 6636}.
"""

from __future__ import annotations

import numpy as np

from ..base import NumericColumn, TabularSchema
from ..sources import RawFile
from ..spec import DatasetSpec, binary_groups, finish_tabular, mirror_hint

# Codes: the UCI page's attribute information (https://archive.ics.uci.edu/dataset/350, X1..X23; credit_default/
# SOURCE.md gives SEX). Amounts are NT dollars, bounded by powers of ten beyond the largest credit line.
SCHEMA = TabularSchema("credit", numeric={
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


def build(spec, paths, opts, rng, group_attr, provenance):
    import pandas as pd

    df = pd.read_csv(paths["default_of_credit_card_clients.csv.gz"], header=1)
    df = df.sort_values("ID").reset_index(drop=True)  # the export's rows are permuted (SOURCE.md)
    notes = {"raw_rows": {"all": len(df)}}
    return finish_tabular(
        spec, opts, rng, df, None, target=lambda d: d["default payment next month"].to_numpy(np.int64),
        group_attr=group_attr, notes=notes, provenance=provenance)


_URL = ("https://raw.githubusercontent.com/phdtai/Default-of-Credit-Card-Clients/3c54b079c129384b8148fc12943ab239428da550/"
        "default%20of%20credit%20card%20clients.csv")
DATASET = DatasetSpec(
    "credit",
    (RawFile("credit_default", "default_of_credit_card_clients.csv.gz", urls=(_URL,), how_to_get=mirror_hint("credit"),
             sha256="5ade40b09ef8e6f2001a0bc92dbaeac523e747a22278877533a77e8314b7c5df", nbytes=976611,
             content_sha256="4505b02ccb337e8c9bf6cbcb57d9b96bf38f0bd06b331ed0c2085714777ffbba"),),
    {"SEX": binary_groups("SEX", "male", "female", lambda s: s.eq(1))},
    build, label="Credit", n_classes=2, origin=__doc__, schema=SCHEMA)
