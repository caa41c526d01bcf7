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

from .atomic import write_text

__all__ = ["fill_parameters", "flat_scalars", "frames", "shower", "table", "write_metrics"]

_TABLE_IDS = itertools.count()


def fill_parameters(name: str, params_file: str | os.PathLike, given: Mapping[str, object]) -> dict[str, object]:
    """The notebook's parameters with every ``None`` replaced by what the pipeline would pass for ``params_file``."""
    from .config import load_params
    from .reporting import notebook_parameters

    missing = [k for k, v in given.items() if v is None]
    if not missing:
        return {}
    full = notebook_parameters(load_params(params_file), name)
    return {k: full[k] for k in missing if k in full}


def frames(results_dir: str | os.PathLike, runs: dict[str, dict]):
    """(summaries, runs_df, groups_df) of the runs' attack outputs (see :mod:`fairdp_core.results`)."""
    from . import results

    summaries = results.load_summaries(results_dir, runs)
    return summaries, results.run_table(summaries, runs), results.group_table(summaries, runs)


def shower(figures_dir: str | os.PathLike):
    """A ``show(fig, name)`` that saves the figure beside the report (150 dpi PNG) and shows it by reference."""
    from IPython.display import Markdown, display

    from . import plots

    fig_dir = Path(figures_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)

    def show(fig, name: str) -> None:
        path = fig_dir / f"{name}.png"
        fig.savefig(path, dpi=150, bbox_inches="tight", metadata={"Software": None})
        plots.plt.close(fig)
        display(Markdown(f"![{name}](figures/{fig_dir.name}/{path.name})"))

    return show


def table(df: pd.DataFrame, floatfmt: str = "{:.3f}", caption: str | None = None) -> None:
    """Display ``df`` without its index, numbers formatted, with a caption; table ids are deterministic (pandas'
    Styler would otherwise draw a random id per table and every rerun would change the HTML)."""
    from IPython.display import display

    st = df.style.format(floatfmt, subset=df.select_dtypes("number").columns, na_rep="—").hide(axis="index")
    st = st.set_uuid(f"t{next(_TABLE_IDS)}")
    display(st.set_caption(caption) if caption else st)


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
