"""ProPublica's COMPAS two-year recidivism, grouped by race (African-American or not) or sex.

Canonical source: GitHub propublica/compas-analysis (the original repository).
Citation: Angwin, J., Larson, J., Mattu, S., and Kirchner, L. (2016), "Machine Bias", ProPublica;
methodology: https://www.propublica.org/article/how-we-analyzed-the-compas-recidivism-algorithm
Licence: the repository has no licence file.
- compas-scores-two-years.csv.gz: compas-scores-two-years.csv from propublica/compas-analysis, commit
  bafff5da3f2e45eca6c2d5055faad269defd135a (2017-06-13); compressed here with gzip -9 -n, bytes unchanged.
Verified (pandas): 7214 rows x 53 columns; two_year_recid {'0': 3963, '1': 3251}.
"""

from __future__ import annotations

import numpy as np

from ..base import NumericColumn, TabularSchema
from ..sources import RawFile
from ..spec import DatasetSpec, binary_groups, finish_tabular, mirror_hint

# Value sets of ProPublica's analysis (compas-analysis, Compas Analysis.ipynb; compas/SOURCE.md); counts are bounded
# by a power of ten.
SCHEMA = TabularSchema("compas", numeric={
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


def build(spec, paths, opts, rng, group_attr, provenance):
    import pandas as pd

    df = pd.read_csv(paths["compas-scores-two-years.csv.gz"])
    notes = {"raw_rows": {"all": len(df)}}
    # ProPublica's filter (compas-analysis, Compas Analysis.ipynb).
    df = df[(df.days_b_screening_arrest <= 30) & (df.days_b_screening_arrest >= -30) & (df.is_recid != -1)
            & (df.c_charge_degree != "O") & (df.score_text != "N/A")].reset_index(drop=True)
    notes["clean_rows"] = {"all": len(df)}
    return finish_tabular(
        spec, opts, rng, df, None, target=lambda d: d["two_year_recid"].to_numpy(np.int64),
        group_attr=group_attr, notes=notes, provenance=provenance)


_URL = ("https://raw.githubusercontent.com/propublica/compas-analysis/bafff5da3f2e45eca6c2d5055faad269defd135a/"
        "compas-scores-two-years.csv")
DATASET = DatasetSpec(
    "compas",
    (RawFile("compas", "compas-scores-two-years.csv.gz", urls=(_URL,), how_to_get=mirror_hint("compas"),
             sha256="706137877c1ffafbb8580f2523644bbe34e639dad00922abc6079f8f31d75514", nbytes=632129,
             content_sha256="c451db85908b2f7fef1d83203bedf6b71ecda0d5af468d82ae62178f91d0cc7d"),),
    {"race": binary_groups("race", "African-American", "other", lambda s: s.eq("African-American")),
     "sex": binary_groups("sex", "Male", "Female", lambda s: s.eq("Male"))},
    build, label="COMPAS", n_classes=2, origin=__doc__, schema=SCHEMA)
