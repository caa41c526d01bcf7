"""Seaborn figures for the reports: functions that take tidy frames and return a Figure (no savefig inside)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

__all__ = [
    "delta_vs",
    "estimator_distributions",
    "fairness_bars",
    "gpr_by_group",
    "level_shift",
    "looa_vs_alooa",
    "pareto",
]

sns.set_theme(style="whitegrid", context="notebook")


def _errorbars(ax, df, x, y, lo, hi, hue, order, hue_order):
    """Draw CI error bars on a seaborn barplot (dodged like seaborn's bars)."""
    n = len(hue_order)
    width = 0.8 / n
    for j, h in enumerate(hue_order):
        for i, xv in enumerate(order):
            row = df[(df[x] == xv) & (df[hue] == h)]
            if len(row):
                r = row.iloc[0]
                xpos = i - 0.4 + width * (j + 0.5)
                ax.errorbar(xpos, r[y], yerr=[[max(0.0, r[y] - r[lo])], [max(0.0, r[hi] - r[y])]], fmt="none",
                            ecolor="black", capsize=2, lw=1)


def gpr_by_group(df: pd.DataFrame, *, title: str = "", scale: float = 100.0) -> plt.Figure:
    """Bars of GPR per group (pp) for each algorithm, with 95% CIs. ``df``: group_table rows of one setting."""
    d = df.copy()
    for c in ("gpr", "gpr_lo", "gpr_hi"):
        d[c] = d[c] * scale
    order = list(dict.fromkeys(d["group"]))
    hue_order = list(dict.fromkeys(d["label"]))
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(order) * len(hue_order) / 2 + 3), 3.6))
    sns.barplot(data=d, x="group", y="gpr", hue="label", order=order, hue_order=hue_order, ax=ax, errorbar=None)
    _errorbars(ax, d, "group", "gpr", "gpr_lo", "gpr_hi", "label", order, hue_order)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(xlabel="group", ylabel="GPR (pp of advantage)", title=title)
    ax.legend(title=None, fontsize=8)
    fig.tight_layout()
    return fig


def estimator_distributions(adv: dict[str, np.ndarray], null: dict[str, np.ndarray], *, title: str = "") -> plt.Figure:
    """Histograms of per-record advantage for each estimator, observed vs under permuted membership labels."""
    fig, axes = plt.subplots(1, len(adv), figsize=(4 * len(adv), 3.2), sharey=True)
    for ax, (name, a) in zip(np.atleast_1d(axes), adv.items()):
        bins = np.linspace(min(a.min(), null[name].min()), max(a.max(), null[name].max()), 25)
        ax.hist(null[name], bins=bins, alpha=0.5, label="null (permuted labels)", density=True)
        ax.hist(a, bins=bins, alpha=0.5, label="observed", density=True)
        ax.axvline(null[name].mean(), color="C0", ls="--", lw=1)
        ax.axvline(a.mean(), color="C1", ls="--", lw=1)
        ax.set(title=f"{name}: mean {a.mean():.3f} (null {null[name].mean():.3f})", xlabel="advantage")
    np.atleast_1d(axes)[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def delta_vs(df: pd.DataFrame, x: str, *, hue: str = "label", title: str = "") -> plt.Figure:
    """Δ (pp, plug-in, with its 95% interval) and accuracy against ``x`` (e.g. epsilon or tau), one line per ``hue``."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for h, g in df.groupby(hue, sort=False):
        g = g.groupby(x, as_index=False).agg(delta=("delta_pp", "mean"), delta_lo=("delta_lo", "mean"),
                                              delta_hi=("delta_hi", "mean"), accuracy=("accuracy", "mean"))
        err = np.clip([g["delta"] - g["delta_lo"], g["delta_hi"] - g["delta"]], 0, None)
        axes[0].errorbar(g[x], g["delta"], yerr=err, marker="o", capsize=3, label=str(h))
        axes[1].plot(g[x], 100 * g["accuracy"], marker="o", label=str(h))
    axes[0].set(xlabel=x, ylabel="Δ (pp, plug-in)", title="disparity Δ (95% interval)")
    axes[1].set(xlabel=x, ylabel="test accuracy (%)", title="accuracy")
    if x == "epsilon":
        for ax in axes:
            ax.set_xscale("log")
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def pareto(df: pd.DataFrame, *, title: str = "") -> plt.Figure:
    """Δ against accuracy for every configuration; the Pareto front (lower Δ, higher accuracy) joined."""
    fig, ax = plt.subplots(figsize=(6, 4))
    sns.scatterplot(data=df, x="accuracy", y="delta_pp", hue="label", style="epsilon", ax=ax, s=60)
    pts = df.sort_values("accuracy", ascending=False)[["accuracy", "delta_pp"]].to_numpy()
    front, best = [], np.inf
    for acc, d in pts:
        if d < best:
            front.append((acc, d))
            best = d
    if front:
        f = np.array(front)
        ax.plot(f[:, 0], f[:, 1], color="black", lw=1, ls="--", label="Pareto front")
    ax.set(xlabel="test accuracy", ylabel="Δ (pp, plug-in)", title=title)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def level_shift(df: pd.DataFrame, *, title: str = "") -> plt.Figure:
    """Per group: GPR change from DP-SGD to DP-SGD-S (pp, with CI); above 0 = that group got riskier."""
    fig, ax = plt.subplots(figsize=(max(5, 0.6 * df["group"].nunique() + 3), 3.4))
    d = df.reset_index(drop=True)
    err = np.clip([100 * (d["change"] - d["lo"]), 100 * (d["hi"] - d["change"])], 0, None)
    ax.errorbar(np.arange(len(d)), 100 * d["change"], yerr=err, fmt="o", capsize=3)
    ax.set_xticks(np.arange(len(d)), d["group"], rotation=30)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(ylabel="GPR(DP-SGD-S) − GPR(DP-SGD), pp", title=title)
    fig.tight_layout()
    return fig


def fairness_bars(df: pd.DataFrame, *, title: str = "") -> plt.Figure:
    """Outcome-fairness metrics (with CIs) per algorithm. ``df``: metric, label, value, lo, hi."""
    order = list(dict.fromkeys(df["metric"]))
    hue_order = list(dict.fromkeys(df["label"]))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    sns.barplot(data=df, x="metric", y="value", hue="label", order=order, hue_order=hue_order, ax=ax, errorbar=None)
    _errorbars(ax, df, "metric", "value", "lo", "hi", "label", order, hue_order)
    ax.set(xlabel="", ylabel="difference between groups", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def looa_vs_alooa(df: pd.DataFrame, *, title: str = "") -> plt.Figure:
    """Record by record: PA-LOOA against PA-ALOOA advantage (cross-fitted)."""
    fig, ax = plt.subplots(figsize=(4.5, 4))
    sns.scatterplot(data=df, x="alooa_cross_fit", y="looa_cross_fit", hue="group", ax=ax)
    lim = [min(df[["alooa_cross_fit", "looa_cross_fit"]].min()) - 0.05,
           max(df[["alooa_cross_fit", "looa_cross_fit"]].max()) + 0.05]
    ax.plot(lim, lim, color="grey", lw=0.8, ls="--")
    ax.set(xlabel="PA-ALOOA advantage", ylabel="PA-LOOA advantage", title=title)
    fig.tight_layout()
    return fig
