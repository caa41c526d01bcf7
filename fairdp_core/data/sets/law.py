"""LSAC bar passage (the study's task: eventual passing), grouped by race as White / non-White.

Underlying data: LSAC National Longitudinal Bar Passage Study.
Citation: Wightman, L. F. (1998), "LSAC National Longitudinal Bar Passage Study", LSAC Research Report Series.
Licence: no explicit licence is given with these derived files.
- bar_pass_prediction.csv.gz: data/bar_pass_prediction.csv from GitHub
  TheRohanVerma/CMPUT622_FairSMOTE_vs_FairClassBal, commit a895803f7e2a09010dc2185653081b790a164096; the
  widely shared Kaggle-style "law school admissions / bar passage" table (38 columns, includes
  dnn_bar_pass_prediction). Compressed here with gzip -9 -n, uncompressed bytes unchanged.
Verified (pandas): 22407 rows x 38 columns; 7406 empty cells overall; pass_bar {'1': 21238, '0': 1169}.
"""

from __future__ import annotations

import numpy as np

from ..base import NumericColumn, TabularSchema
from ..sources import RawFile
from ..spec import DatasetSpec, binary_groups, finish_tabular, mirror_hint

# The LSAC National Longitudinal Bar Passage Study codebook (Wightman 1998; law_school/SOURCE.md) and the value set
# SOURCE.md verified for race1. Only admission-time and law-school features.
SCHEMA = TabularSchema("law", numeric={
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
COLUMNS = list(SCHEMA.columns)


def build(spec, paths, opts, rng, group_attr, provenance):
    import pandas as pd

    df = pd.read_csv(paths["bar_pass_prediction.csv.gz"], low_memory=False)
    notes = {"raw_rows": {"all": len(df)}}
    # Only the admission-time and law-school features; bar1/bar2/bar/dnn_bar_pass_prediction leak the target.
    used = COLUMNS + ["pass_bar"]
    df = df.dropna(subset=used).reset_index(drop=True)
    notes["clean_rows"] = {"all": len(df)}
    return finish_tabular(
        spec, opts, rng, df, None, target=lambda d: d["pass_bar"].astype(int).to_numpy(np.int64),
        group_attr=group_attr, notes=notes, provenance=provenance)


_URL = ("https://raw.githubusercontent.com/TheRohanVerma/CMPUT622_FairSMOTE_vs_FairClassBal/"
        "a895803f7e2a09010dc2185653081b790a164096/data/bar_pass_prediction.csv")
DATASET = DatasetSpec(
    "law",
    (RawFile("law_school", "bar_pass_prediction.csv.gz", urls=(_URL,), how_to_get=mirror_hint("law"),
             sha256="347ad4ecc52ec884bb8abfcf8df783b47821ae3ad3bc78e7a6edf4617a671e8a", nbytes=458741,
             content_sha256="76ebfdb0427ce8db038d53fa5943180ac77096bffb8264f000ed21e9f0ec82f2"),),
    {"race1": binary_groups("race1", "White", "non-White", lambda s: s.eq("white"))},
    build, label="Law", n_classes=2, origin=__doc__, schema=SCHEMA)
