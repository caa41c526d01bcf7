"""Helpers the report notebooks share (notebooks/*.py hold no algorithm code and no copied helpers).

A notebook's parameters cell has papermill's values when run by the pipeline; left at their defaults (``None``)
and run top to bottom in JupyterLab from ``notebooks/``, :func:`fill_parameters` takes them from params.yaml.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from ..atomic import write_text

__all__ = ["COLUMN_LABELS", "eps_panels", "fill_parameters", "findings", "flat_scalars", "frames", "left_out", "shower",
           "tabler", "write_metrics"]

_TABLE_IDS = itertools.count()


def fill_parameters(name: str, params_file: str | os.PathLike, given: Mapping[str, object]) -> dict[str, object]:
    """The notebook's parameters with every ``None`` replaced by what the pipeline would pass for ``params_file``."""
    from ..config import load_params
    from .pages import notebook_parameters

    missing = [k for k, v in given.items() if v is None]
    if not missing:
        return {}
    full = notebook_parameters(load_params(params_file), name)
    return {k: full[k] for k in missing if k in full}


def frames(results_dir: str | os.PathLike, runs: dict[str, dict]):
    """(summaries, runs_df, groups_df) of the runs' attack outputs (see :mod:`fairdp_core.reporting.results`)."""
    from . import results

    summaries = results.load_summaries(results_dir, runs)
    return summaries, results.run_table(summaries, runs), results.group_table(summaries, runs)


def eps_panels(df: pd.DataFrame, *, min_dp: int = 2) -> pd.DataFrame:
    """The rows of ``df`` (with ``setting``, ``epsilon``, ``label``) arranged for small multiples: one copy per
    setting and ε of the grid, with ``eps_label``, the non-private rows (ε NaN) repeated in every ε of their setting
    as the reference. An ε where a setting has fewer than ``min_dp`` DP algorithms (a sweep's DP-SGD baseline, with
    the default 2) is no panel."""
    from .results import eps_label

    panels = []
    for _, g in df.groupby("setting", sort=False):
        for e in sorted(g["epsilon"].dropna().unique()):
            sub = g[(g.epsilon == e) | g.epsilon.isna()]
            if sub[sub.epsilon.notna()]["label"].nunique() >= min_dp:
                panels.append(sub.assign(eps_label=eps_label(e)))
    return pd.concat(panels) if panels else df.iloc[0:0].assign(eps_label=[])


def shower(figures_dir: str | os.PathLike):
    """A ``show(fig, name, caption)`` that saves the figure beside the report (150 dpi PNG), writes the algorithm →
    colour mapping it used beside it (``<name>.colors.json``, checked across figures by
    :mod:`fairdp_core.reporting.checks`), and shows it by reference with its caption."""
    from IPython.display import Markdown, display

    from . import plots

    fig_dir = Path(figures_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)

    def show(fig, name: str, caption: str) -> None:
        path = fig_dir / f"{name}.png"
        fig.savefig(path, dpi=150, bbox_inches="tight", metadata={"Software": None})
        colors = getattr(fig, "fairdp_colors", {})
        write_text(fig_dir / f"{name}.colors.json", json.dumps(colors, indent=1, sort_keys=True) + "\n")
        plots.plt.close(fig)
        display(Markdown(f"![{name}](figures/{fig_dir.name}/{path.name})\n\n*Figure: {caption}*"))

    return show


# readable headers for the columns the notebooks show (anything else: underscores become spaces)
COLUMN_LABELS = {
    "delta_pp": "Δ (pp)", "null_floor_pp": "null floor (pp)", "delta_lo": "Δ low (pp)", "delta_hi": "Δ high (pp)",
    "excess_pp": "Δ − null floor (pp)", "p_delta": "p (some group differs)", "p_holm": "p (Holm)",
    "accuracy_pct": "accuracy (%)", "epsilon": "ε", "eps_label": "ε", "tau": "τ", "gamma": "γ", "sigma_g": "σ_g",
    "sigma_b": "σ_b", "q": "q", "T": "T", "eps_spent": "ε spent", "gpr_pp": "GPR (pp)", "lo_pp": "low (pp)",
    "hi_pp": "high (pp)", "value_pp": "difference (pp)", "change_pp": "change (pp)", "n_seeds": "seeds",
    "mean_diff": "mean difference (pp)", "p_sign_flip": "sign-flip p", "p_min": "smallest attainable p",
    "sd": "SD (pp)", "lo": "low", "hi": "high",
}


def _integral(col: pd.Series) -> bool:
    v = pd.to_numeric(col, errors="coerce").dropna()
    return len(v) > 0 and bool((v == v.round()).all()) and bool((v.abs() < 1e12).all())


def tabler(figures_dir: str | os.PathLike, *, top: int = 15):
    """A ``table(df, caption, floatfmt="{:.2f}", csv=None)`` for the reports: readable headers
    (:data:`COLUMN_LABELS`), whole numbers without decimals, "—" for a missing value, a caption always; a table of
    more than ``top`` rows is written whole to ``figures/<report>/<csv>.csv`` beside the page, which shows its
    first ``top`` rows and links the file."""
    from IPython.display import Markdown, display

    fig_dir = Path(figures_dir)

    def table(df: pd.DataFrame, caption: str, floatfmt: str = "{:.2f}", csv: str | None = None,
              rows: int | None = None) -> None:
        if not caption:
            raise ValueError("every table in a report needs a caption")
        d = df.reset_index(drop=True)
        note = ""
        top_ = rows or top
        if len(d) > top_:
            if not csv:
                raise ValueError(f"a table of {len(d)} rows needs csv= (the page shows {top_})")
            fig_dir.mkdir(parents=True, exist_ok=True)
            write_text(fig_dir / f"{csv}.csv", d.to_csv(index=False, float_format="%.6g"))
            note = f" (first {top_} of {len(d)} rows; all of them: figures/{fig_dir.name}/{csv}.csv)"
            d = d.head(top_)
        fmt = {}
        for c in d.columns:
            if pd.api.types.is_bool_dtype(d[c]):
                d[c] = d[c].map({True: "yes", False: "no"})
            elif pd.api.types.is_numeric_dtype(d[c]):
                fmt[c] = "{:,.0f}" if _integral(d[c]) else floatfmt
            else:
                d[c] = d[c].map(lambda v: "—" if v is None or (isinstance(v, float) and v != v) else v)
        d = d.rename(columns={c: COLUMN_LABELS.get(c, str(c).replace("_", " ")) for c in d.columns})
        fmt = {COLUMN_LABELS.get(c, str(c).replace("_", " ")): f for c, f in fmt.items()}
        st = d.style.format(fmt, na_rep="—").hide(axis="index").set_uuid(f"t{next(_TABLE_IDS)}")
        text = [c for c in d.columns if c not in fmt]
        if text:  # words read from the left, numbers from the right
            st = st.set_properties(subset=text, **{"text-align": "left"})
        display(st.set_caption(caption + note))
        if note:
            display(Markdown(f"[All {len(df)} rows as CSV](figures/{fig_dir.name}/{csv}.csv)"))

    return table


def linker(figures_dir: str | os.PathLike):
    """A ``link(df, csv, text)`` that writes a table only as ``figures/<report>/<csv>.csv`` beside the page and shows
    a link to it (for a table a reader may want but the page has no room for)."""
    from IPython.display import Markdown, display

    fig_dir = Path(figures_dir)

    def link(df: pd.DataFrame, csv: str, text: str) -> None:
        fig_dir.mkdir(parents=True, exist_ok=True)
        write_text(fig_dir / f"{csv}.csv", df.to_csv(index=False, float_format="%.6g"))
        display(Markdown(f"[{text} ({len(df)} rows, CSV)](figures/{fig_dir.name}/{csv}.csv)"))

    return link


def flat_scalars(obj, prefix: str = "") -> dict[str, float | int | str | None]:
    """Nested dicts and lists -> one flat dict of scalars with dotted keys (what ``dvc metrics show`` reads)."""
    out: dict[str, float | int | str | None] = {}
    items = obj.items() if isinstance(obj, Mapping) else enumerate(obj) if isinstance(obj, (list, tuple)) else None
    if items is None:
        if hasattr(obj, "item"):
            obj = obj.item()
        if isinstance(obj, float) and obj != obj:
            obj = None
        return {prefix: obj}
    for k, v in items:
        out.update(flat_scalars(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def write_metrics(path: str | os.PathLike, metrics: Mapping) -> None:
    """Write a metrics file atomically: a flat dict of scalars, keys sorted, rounded to 6 significant digits."""
    flat = {k: (float(f"{v:.6g}") if isinstance(v, float) else v) for k, v in sorted(flat_scalars(metrics).items())}
    write_text(path, json.dumps(flat, indent=1) + "\n")


FINDINGS_STYLE = ("background:#f5f8fc;border:1px solid #c9d8ea;border-radius:6px;padding:0.5em 1em;margin:0.8em 0;"
                  "font-size:1.05em")


def left_out(params_file: str | os.PathLike) -> None:
    """Say, in one line, which runs of the profile this page leaves out and why
    (:func:`fairdp_core.reporting.pages.left_out_sentence`); nothing when none is."""
    from IPython.display import Markdown, display

    from ..config import load_params
    from .pages import left_out_sentence

    sentence = left_out_sentence(load_params(params_file))
    if sentence:
        display(Markdown(f"*{sentence}*"))


def findings(sentences: list[str], numbers: Mapping[str, float | int]) -> dict[str, float | int]:
    """Show a page's answer: 2–4 sentences whose ``{name:spec}`` fields are filled from ``numbers`` (``**bold**``
    allowed), in the findings box that the report moves to the top of its page (a cell tagged ``findings``). Each
    number is written as ``<span data-key="name">``, and the returned ``{"findings.<name>": value}`` go into the
    page's metrics file, so that a test reads every number back from the page and compares it with the file."""
    import html
    import re
    import string

    from IPython.display import HTML, display

    if not 2 <= len(sentences) <= 4:
        raise ValueError(f"findings: {len(sentences)} sentences; a page answers in 2 to 4")
    out = []
    for sentence in sentences:
        parts = []
        for literal, field, spec, _ in string.Formatter().parse(sentence):
            parts.append(html.escape(literal, quote=False))
            if field is not None:
                parts.append(f'<span class="n" data-key="{field}">{format(numbers[field], spec or "")}</span>')
        out.append(re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", "".join(parts)))
    display(HTML(f'<div class="findings" id="findings" data-sentences="{len(out)}" style="{FINDINGS_STYLE}">'
                 "<b>Findings.</b> " + " ".join(out) + "</div>"))
    return {f"findings.{k}": (v.item() if hasattr(v, "item") else v) for k, v in numbers.items()}
