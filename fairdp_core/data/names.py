"""The datasets of the study and their group attributes, as plain data (no pandas, no loader code).

params.yaml is validated against this table, so loading params does not import the loaders; tests check that it
agrees with the loaders' registry (:data:`fairdp_core.data.loaders.REGISTRY`). The first attribute is the default.
"""

from __future__ import annotations

__all__ = ["DATASET_CLASSES", "DATASET_GROUPS"]

DATASET_GROUPS: dict[str, tuple[str, ...]] = {
    "adult": ("sex", "race"),
    "bank": ("marital",),
    "credit": ("SEX",),
    "law": ("race1",),
    "law_paper": ("race1",),  # the paper's variant: first-attempt pass, race as White / non-White
    "compas": ("race", "sex"),
    "mnist": ("digit",),
    "utkface": ("race",),
    "cifar10": ("class",),  # not in the mirror: the gpu profile's DP-SGD utility check
}

# The number of label classes of each dataset's task (tests check it against the loaded data): what "chance" means
# for the degenerate-model check (:func:`fairdp_core.audit.verdicts.is_degenerate`) where a summary does not say.
DATASET_CLASSES: dict[str, int] = {
    "adult": 2, "bank": 2, "credit": 2, "law": 2, "law_paper": 2, "compas": 2, "mnist": 10, "utkface": 2,
    "cifar10": 10,
}
