"""Auditing a user's CSV: read it (any delimiter), check the label, group and feature columns with one-line errors,
infer the schema, and audit the table with :func:`~fairdp_core.audit.custom.audit_model` (:func:`audit_csv`)."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from .custom import audit_model, load_model_spec
from .custom_checks import MAX_CLASSES, AuditSettings, check_recipe
from .custom_result import CustomAudit

__all__ = ["audit_csv"]


TEXT_LEVELS_MAX = 50


def read_user_csv(path: Path) -> pd.DataFrame:
    """A user's CSV (any delimiter), or a one-line error: missing, empty, header only, unreadable."""
    import csv

    if not path.is_file():
        raise FileNotFoundError(f"--data {path}: no such file")
    if path.stat().st_size == 0 or not path.read_text(errors="replace").strip():
        raise ValueError(f"--data {path}: the file is empty (no header, no rows)")
    try:
        df = pd.read_csv(path, sep=None, engine="python")
    except (pd.errors.EmptyDataError, pd.errors.ParserError, csv.Error, UnicodeDecodeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"--data {path}: not a readable CSV ({first})") from None
    if len(df) == 0:
        raise ValueError(f"--data {path}: a header ({len(df.columns)} columns) and no data rows")
    return df


def _check_labels(s: pd.Series, path: Path, label: str) -> None:
    """Label values that differ only by case or surrounding whitespace are a typo, not a class."""
    values = sorted(s.dropna().astype(str).unique())
    seen: dict[str, list[str]] = {}
    for v in values:
        seen.setdefault(v.strip().casefold(), []).append(v)
    clash = [vs for vs in seen.values() if len(vs) > 1]
    if clash:
        shown = "; ".join(" vs ".join(repr(v) for v in vs) for vs in clash[:3])
        raise ValueError(f"{path}: the label column {label!r} has values that differ only by case or whitespace "
                         f"({shown}); clean them so that each class is spelled one way (--label {label})")


def _numeric_with_text(df: pd.DataFrame, feats: list[str], warn: Callable[[str], None]) -> pd.DataFrame:
    """A column whose cells are numbers but for a few text cells (at most 5% of its values) stays numeric: its text
    cells are read as missing (their rows are then dropped), with a warning naming the column and the count."""
    df = df.copy()
    for c in feats:
        if pd.api.types.is_numeric_dtype(df[c]):
            continue
        num = pd.to_numeric(df[c], errors="coerce")
        text = df[c].notna() & num.isna()
        if 0 < text.sum() <= 0.05 * df[c].notna().sum() and num.notna().sum() > 10:
            examples = ", ".join(repr(v) for v in df.loc[text, c].astype(str).unique()[:3])
            warn(f"column {c!r}: {int(text.sum())} text cells in a numeric column ({examples}) read as missing")
            df[c] = num
    return df


def _check_text_features(df: pd.DataFrame, feats: list[str], path: Path) -> None:
    """A text feature with one value per row (an ID) or more than TEXT_LEVELS_MAX values would one-hot into as many
    features: refused, naming the column and the flag that leaves it out."""
    n = len(df)
    for c in feats:
        if pd.api.types.is_numeric_dtype(df[c]):
            continue
        k = int(df[c].nunique())
        if k > TEXT_LEVELS_MAX or (k == n and n > 1):
            what = "one value per row (an ID?)" if k == n else f"{k} distinct values"
            raise ValueError(f"{path}: the text column {c!r} has {what}: it would become {k} one-hot features; "
                             f"pass --drop {c} to leave it out (or encode it as numbers)")


def _infer_schema(df: pd.DataFrame, columns: list[str], name: str):
    """A TabularSchema inferred FROM THE DATA (numeric ranges and vocabularies): tuning outside ε, stated in the
    output. Numeric: min/max of the column; other columns: their sorted distinct values."""
    from ..data.base import NumericColumn, TabularSchema

    numeric, categorical = {}, {}
    for c in columns:
        s = df[c]
        if pd.api.types.is_numeric_dtype(s) and s.nunique() > 10:
            lo, hi = float(s.min()), float(s.max())
            numeric[c] = NumericColumn(lo, hi if hi > lo else lo + 1.0)
        else:
            from ..data.base import _category_labels

            categorical[c] = tuple(sorted(set(_category_labels(s.dropna()))))
    return TabularSchema(name, numeric, categorical)


def audit_csv(path: str | os.PathLike, settings: AuditSettings | None = None, *, label: str, group: str,
              slices: list[str] | None = None, drop: list[str] | None = None, group_as_feature: bool = True,
              test_fraction: float = 0.2, on_warning: Callable[[str], None] | None = None,
              max_classes: int = MAX_CLASSES) -> CustomAudit:
    """:func:`audit_model` on a CSV file, by ``settings`` (:class:`AuditSettings`; None: its defaults; a ``model``
    given as "module:function" is loaded here): ``label`` and ``group`` columns; every other column (but ``drop``)
    is a feature, numeric columns (more than 10 distinct values) scaled to [-1, 1] by their range and the rest
    one-hot. The scaling ranges and vocabularies are read from the file: that choice is outside ε (stated in the
    summary). A stratified ``test_fraction`` is held out for accuracy (split by ``settings.seed``). A label with more
    than ``max_classes`` values and a feature with no value in any row are refused in one line before any training
    (an impossible recipe already when ``settings`` is built); a feature with one value is kept with a warning."""
    from ..data.base import encode_rows, stratified_split

    path = Path(path)
    st = settings if settings is not None else AuditSettings()
    check_recipe(max_classes=max_classes)
    warn = on_warning or (lambda msg: warnings.warn(msg, UserWarning, stacklevel=3))
    df = read_user_csv(path)
    missing = [c for c in [label, group, *(slices or []), *(drop or [])] if c not in df.columns]
    if missing:
        have = ", ".join(repr(str(c)) for c in df.columns)  # repr: a name holding a line break stays one line
        raise ValueError(f"{path}: no column {', '.join(map(repr, missing))}; columns: {have}")
    known = {"group", "class", "correct", group, *(slices or [])}
    for a, b in st.intersections:
        for c in (a, b):
            if c not in known:
                raise ValueError(f"--intersect {a},{b}: {c!r} is not the group column, class, correct or a --slice "
                                 f"column (add --slice {c})")
    intersections = tuple(tuple("group" if c == group else c for c in pair) for pair in st.intersections)
    for c, what in ((label, "label"), (group, "group")):
        bad = int(df[c].isna().sum())
        if bad:
            raise ValueError(f"{path}: the {what} column {c!r} is missing in {bad} rows")
    _check_labels(df[label], path, label)
    k = int(df[label].nunique())
    if k > max_classes:
        raise ValueError(f"{path}: the label column {label!r} has {k} distinct values: that trains a {k}-class "
                         f"model; pass --max-classes {k} if that is meant, or another --label")
    feats = [c for c in df.columns if c not in {label, *(drop or [])} and (group_as_feature or c != group)]
    empty = [c for c in feats if df[c].isna().all()]
    if empty:
        raise ValueError(f"{path}: column {', '.join(map(repr, empty))} has no value in any row; pass "
                         + " ".join(f"--drop {c}" for c in empty) + " to leave it out")
    df = _numeric_with_text(df, feats, warn)
    _check_text_features(df, feats, path)
    n0 = len(df)
    cols = [c for c in feats if df[c].isna().any()]
    df = df.dropna(subset=feats).reset_index(drop=True)
    if len(df) < n0:
        warn(f"{path.name}: {n0 - len(df)} of {n0} rows dropped for a missing value (columns {', '.join(cols)})")
    if df[group].astype(str).nunique() < 2:
        raise ValueError(f"{path}: the group column {group!r} has one value ({df[group].astype(str).iloc[0]!r}); a "
                         "per-group audit compares at least two (--group)")
    classes = sorted(df[label].astype(str).unique())
    if len(classes) < 2:
        raise ValueError(f"{path}: the label column {label!r} has one value ({classes[0]!r}); nothing to predict")
    y = np.searchsorted(classes, df[label].astype(str)).astype(np.int64)
    group_values = sorted(df[group].astype(str).unique())
    gcode = np.searchsorted(group_values, df[group].astype(str)).astype(np.int64)
    for c in feats:  # after the file's refusals (audit_model's own checks come later)
        if c != group and df[c].nunique() == 1:
            warn(f"column {c!r} has one value ({str(df[c].iloc[0])!r}) in every row: it tells the models nothing "
                 f"(kept; --drop {c} leaves it out)")
    schema = _infer_schema(df, feats, path.stem)
    X, _ = encode_rows(df, schema)
    tr, te = stratified_split(y, gcode, test_fraction=test_fraction, rng=np.random.default_rng([st.seed, 1]))
    model = load_model_spec(st.model) if isinstance(st.model, str) else st.model
    extra = {"data": str(path.name), "rows": len(df), "label": label, "classes": classes, "group": group,
             "preprocessing": f"{len(schema.numeric)} numeric columns scaled to [-1, 1] by their range in the file, "
                              f"{len(schema.categorical)} one-hot. The ranges, the vocabularies, which columns are "
                              "numeric, the classes and the groups are read from the whole file (test rows too): "
                              "outside ε, and shared by every model, so this audit cannot measure what they leak. "
                              "Rows with a missing feature dropped.",
             "features": len(schema.feature_names)}
    sl = {c: df[c].astype(str).to_numpy()[tr] for c in (slices or [])}
    st = dataclasses.replace(st, model=model, intersections=intersections, title=f"{path.name}: {label} by {group}")
    return audit_model(X[tr], y[tr], gcode[tr], st, group_names=group_values, class_names=classes, X_test=X[te],
                       y_test=y[te], slices=sl, extra=extra)
