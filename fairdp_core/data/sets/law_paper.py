"""The paper's Law task (its public code): first-attempt bar passage, grouped by race as White / non-White.

The raw file is the study's law file (:mod:`fairdp_core.data.sets.law`, where its origin is given); only the
task differs.
"""

from __future__ import annotations

import numpy as np

from ..base import TabularSchema
from ..spec import DatasetSpec, binary_groups, finish_tabular
from .law import DATASET as LAW
from .law import SCHEMA as LAW_SCHEMA

# The paper's Law variant (its public code): first-attempt pass (bar1 = "P", 88.8% of the rows) from eight
# admission-time and law-school scores and race as White / non-White. The study's own "law" predicts eventual
# passing (pass_bar, 94.9%) from more features; both read the same raw file.
SCHEMA = TabularSchema("law_paper", numeric={
    k: LAW_SCHEMA.numeric[k] for k in ("decile1b", "decile3", "lsat", "ugpa", "zfygpa", "zgpa", "fam_inc", "tier")
}, categorical={
    "race_white": ("0", "1"),  # 1 = race1 "white" (the paper's binary race)
})
COLUMNS = ["decile1b", "decile3", "lsat", "ugpa", "zfygpa", "zgpa", "fam_inc", "tier", "race1"]


def build(spec, paths, opts, rng, group_attr, provenance):
    import pandas as pd

    df = pd.read_csv(paths["bar_pass_prediction.csv.gz"], low_memory=False)
    notes = {"raw_rows": {"all": len(df)}}
    df = df.dropna(subset=COLUMNS + ["bar1"]).reset_index(drop=True)
    bad = set(df["bar1"]) - {"P", "F"}
    if bad:
        raise ValueError(f"dataset 'law_paper': column bar1 has values {sorted(bad)} outside the codebook's P/F")
    df["race_white"] = np.where(df["race1"].eq("white"), "1", "0")
    notes["clean_rows"] = {"all": len(df)}
    return finish_tabular(
        spec, opts, rng, df, None, target=lambda d: d["bar1"].eq("P").astype(int).to_numpy(np.int64),
        group_attr=group_attr, notes=notes, provenance=provenance)


DATASET = DatasetSpec(
    "law_paper", LAW.files,  # the same raw file as the study's law
    {"race1": binary_groups("race_white", "White", "non-White", lambda s: s.eq("1"))},
    build, label="Law (paper's task)", n_classes=2, origin=__doc__, schema=SCHEMA)
