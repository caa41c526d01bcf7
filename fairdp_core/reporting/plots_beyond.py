"""The figures of the risks beyond membership and of the synthetic-data page: each risk against ε, the attribute-
inference gaps, inversion by class and its reconstructions, and downstream accuracy against ε."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .plots import EPSILON_COLORS, _algorithm_colors, _bars, _color, _finish, _grid, _legend_below, _palette, _tag

__all__ = ["attribute_gap_grid", "inversion_class_grid", "reconstruction_grid", "risk_vs_epsilon", "synth_accuracy"]


RISK_ORDER = ("membership", "attribute inference", "model inversion")


def risk_vs_epsilon(df: pd.DataFrame, *, source: dict[str, tuple[float, float]] | None = None,
                    title: str = "") -> plt.Figure:
    """Attack success (%) without DP and at each ε, one panel per risk, one line per setting (95% intervals); a
    dotted grey line at each chance level; ``source``: risk -> (without DP, with DP at ε = 2), drawn as black
    diamonds. ``df``: risk, setting, x (ordered categories, e.g. 'SGD', 'ε = 10', ...), success, success_lo,
    success_hi, chance (fractions)."""
    risks = [r for r in RISK_ORDER if r in set(df["risk"])]
    xs = list(dict.fromkeys(df["x"]))
    fig, axes = _grid(1, max(len(risks), 1), w=4.4, h=3.0, sharey=True)
    settings = list(dict.fromkeys(df["setting"]))
    palette = _palette(settings)
    for ax, risk in zip(axes[0], risks):
        sub = df[df.risk == risk]
        for k, s in enumerate(settings):
            d = sub[sub.setting == s].set_index("x").reindex([x for x in xs if x in set(sub[sub.setting == s]["x"])])
            if not len(d):
                continue
            pos = np.array([xs.index(x) for x in d.index]) + (k - (len(settings) - 1) / 2) * 0.06
            ax.errorbar(pos, 100 * d["success"], yerr=[100 * (d["success"] - d["success_lo"]).clip(lower=0),
                                                       100 * (d["success_hi"] - d["success"]).clip(lower=0)],
                        color=palette[s], marker="o", ms=4, lw=1.4, capsize=2)
            ax.axhline(100 * d["chance"].iloc[0], color="grey", ls=":", lw=0.9)
        if source and risk.split()[0] in {k.split()[0] for k in source}:
            no_dp, dp = next(v for k, v in source.items() if k.split()[0] == risk.split()[0])
            for x, v in (("SGD", no_dp), ("ε = 2", dp)):
                if x in xs:
                    ax.plot([xs.index(x)], [v], marker="D", color="black", ms=7, mfc="none", mew=1.5, ls="")
        ax.set_xticks(np.arange(len(xs)), xs, fontsize=9)
        ax.set_title(risk, fontsize=10)
    axes[0, 0].set_ylabel("attack success (%)", fontsize=9)
    if title:
        fig.suptitle(title)
    labels = settings + (["— source (image models)"] if source else [])
    _legend_below(fig, labels, markers=True, palette=palette)
    _finish(fig, n_legend_rows=int(np.ceil(len(labels) / 4)))
    return _tag(fig, settings, palette)


def _fill_columns(n_panels: int, n_cols: int) -> int:
    """At most ``n_cols`` columns, as few empty cells in the last row as possible (6 panels: 3 × 2, not 4 + 2)."""
    if n_panels <= n_cols:
        return max(n_panels, 1)
    return min(range(max(2, n_cols - 1), n_cols + 1), key=lambda c: (-n_panels % c, -c))


def _setting_bars(df: pd.DataFrame, x: str, hue: str, y: str, lo: str, hi: str, *, ylabel: str, title: str = "",
                  n_cols: int = 3, w: float = 4.6, h: float = 2.6) -> plt.Figure:
    """Grouped bars of ``y`` per ``x`` and ``hue`` with 95% whiskers, one panel per ``setting``; legend below. A
    categorical column keeps its categories' order; ``hue`` labels that are neither algorithms nor ε get distinct
    colours in their order."""
    def order(col):
        present = set(df[col])
        cats = df[col].cat.categories if isinstance(df[col].dtype, pd.CategoricalDtype) else dict.fromkeys(df[col])
        return [v for v in cats if v in present]

    settings, hues = list(dict.fromkeys(df["setting"])), order(hue)
    palette = {str(v): _color(str(v)) if str(v) in _algorithm_colors() or str(v) in EPSILON_COLORS else None
               for v in hues}
    palette.update({k: c for k, c in _palette([k for k, v in palette.items() if v is None]).items()})
    n_cols = _fill_columns(len(settings), n_cols)
    n_rows = int(np.ceil(len(settings) / n_cols))
    fig, axes = _grid(n_rows, n_cols, w=w, h=h)
    for k, s in enumerate(settings):
        ax = axes[k // n_cols, k % n_cols]
        sub = df[df.setting == s]
        _bars(ax, sub, x, hue, y, lo, hi, [v for v in order(x) if v in set(sub[x])],
              [v for v in hues if v in set(sub[hue])], palette=palette)
        ax.set_title(s, fontsize=10)
        if np.allclose(sub[[y, lo, hi]].to_numpy(dtype=float), 0):  # nothing to draw: say why, not a blank panel
            ax.text(0.5, 0.75, "every value exactly 0", transform=ax.transAxes, ha="center", fontsize=8, color="0.3")
    for k in range(len(settings), n_rows * n_cols):
        axes[k // n_cols, k % n_cols].set_axis_off()
    fig.supylabel(ylabel, fontsize=9)  # once for the figure: per-row labels overlap on short panels
    if title:
        fig.suptitle(title)
    _legend_below(fig, [str(v) for v in hues], palette=palette)
    _finish(fig, n_legend_rows=int(np.ceil(len(hues) / 4)))
    return _tag(fig, [str(v) for v in hues], palette)


def attribute_gap_grid(df: pd.DataFrame, *, title: str = "") -> plt.Figure:
    """Attribute inference: success on members − non-members (pp, 95% interval) per training (x: SGD, each ε) and
    group (bars); one panel per setting. ``df``: setting, x, group, gap_pp, lo_pp, hi_pp."""
    return _setting_bars(df, "x", "group", "gap_pp", "lo_pp", "hi_pp", ylabel="members − non-members (pp)",
                         title=title, n_cols=4, w=3.9, h=1.9)


def inversion_class_grid(df: pd.DataFrame, *, title: str = "") -> plt.Figure:
    """Model inversion: the evaluator's accuracy on each class's reconstructions (%, 95% interval over model pairs)
    per class (x) and training (bars: SGD, each ε); one panel per setting. ``df``: setting, class, x, success_pct,
    lo_pct, hi_pct."""
    return _setting_bars(df, "class", "x", "success_pct", "lo_pct", "hi_pct", ylabel="evaluator accuracy (%)",
                         title=title, n_cols=3, w=5.2)


def reconstruction_grid(images: dict[str, np.ndarray], class_names, *, title: str = "") -> plt.Figure:
    """Reconstructions: one row per label (e.g. 'SGD', 'DP-SGD ε = 1'), one column per class; ``images[label]`` is
    [C, channels, H, W] in [0, 1]."""
    labels = list(images)
    C = len(class_names)
    fig, axes = plt.subplots(len(labels), C, figsize=(0.58 * C + 1.6, 0.6 * len(labels) + 0.4), squeeze=False)
    for i, lab in enumerate(labels):
        for c in range(C):
            ax = axes[i, c]
            img = np.asarray(images[lab][c], dtype=np.float32)
            ax.imshow(img[0] if img.shape[0] == 1 else img.transpose(1, 2, 0), cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(str(class_names[c]), fontsize=9)
            if c == 0:
                ax.set_ylabel(lab, fontsize=8, rotation=0, ha="right", va="center")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.fairdp_colors = {}
    return fig


def synth_accuracy(df: pd.DataFrame, *, refs: pd.DataFrame | None = None, title: str = "") -> plt.Figure:
    """Train on synthetic, test on real: accuracy (%) against ε (log) per dataset, one line per method with its t
    interval over seeds (``label``, ``epsilon``, ``accuracy_pct``, ``accuracy_lo``, ``accuracy_hi``); ``refs``
    (``dataset``, ``label``, ``accuracy_pct``, ε NaN): horizontal dashed lines for the non-private references, and
    ``majority_pct`` dotted when given."""
    datasets = list(dict.fromkeys(df["dataset"]))
    fig, axes = _grid(1, len(datasets), w=5.2, h=3.2)
    axes = np.atleast_1d(axes).ravel()
    labels = list(dict.fromkeys(list(df["label"]) + ([] if refs is None else list(refs["label"]))))
    for ax, ds in zip(axes, datasets):
        sub = df[df.dataset == ds]
        for lab, g in sub.groupby("label", sort=False):
            g = g.sort_values("epsilon")
            lo = (g["accuracy_pct"] - g["accuracy_lo"]).fillna(0).clip(lower=0)
            hi = (g["accuracy_hi"] - g["accuracy_pct"]).fillna(0).clip(lower=0)
            ax.errorbar(g["epsilon"], g["accuracy_pct"], yerr=[lo, hi], marker="o", ms=4, capsize=3,
                        color=_color(lab), label=lab)
        if refs is not None:
            for _, r in refs[refs.dataset == ds].iterrows():
                if r["label"] == "majority class":
                    ax.axhline(r["accuracy_pct"], color="#999999", ls=":", lw=1)
                else:
                    ax.axhline(r["accuracy_pct"], color=_color(r["label"]), ls="--", lw=1.2)
        ax.set_xscale("log")
        lo_y, hi_y = ax.get_ylim()
        ax.set_ylim(max(0.0, lo_y), min(100.0, hi_y))  # a t interval over 3 seeds can run past 0 or 100
        ax.set_title(ds)
        ax.set_xlabel("ε (log scale)")
        ax.set_ylabel("test accuracy (%)")
    shown = [lab for lab in labels if lab != "majority class"]
    _legend_below(fig, shown)
    if title:
        fig.suptitle(title)
    _finish(fig, (len(shown) + 3) // 4)
    return _tag(fig, [lab for lab in labels if lab != "majority class"])
