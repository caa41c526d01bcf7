"""Figures for the reports: functions that take tidy frames and return a Figure (no savefig inside).

One visual language across every report:

- each algorithm has one colour everywhere (:data:`ALGORITHM_COLORS`, colour-blind safe, Okabe-Ito), each attack
  too (:data:`ATTACK_COLORS`); a figure records the mapping it used in ``fig.fairdp_colors`` and the reports write
  it beside the PNG (``<name>.colors.json``), so a test can check that every figure agrees;
- settings are small multiples (one panel per dataset × ε), not one image per setting;
- legends sit outside the panels (below the grid), so they cover no data;
- bars carry a marker at their value, so a zero-height bar is visible and differs from a missing one;
- advantage quantities are in pp, accuracy in %.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..audit.palette import GROUP_COLORS, THEME

__all__ = [
    "ALGORITHM_COLORS",  # noqa: F822 - the module's __getattr__ builds it on first use
    "ATTACK_COLORS", "ATTACK_LABELS", "ATTACK_SHORT",  # noqa: F822 - from the attack registry, on each access
    "claims_forest", "delta_by_attack", "delta_vs_epsilon", "estimator_distributions",
    "fairness_grid", "gpr_grid", "leveling_grid", "looa_vs_alooa", "pareto", "sweep_lines",
]

sns.set_theme(**THEME)

# The synthetic-data route's colours; SGD (real data) and DP-SGD keep their rules' colours
_SYNTH_COLORS = {
    "DPDSyn": "#C0392B",
    "DPDSyn (no noise)": "#F1948A",
    "MST": "#7D3C98",
    "DP-CGAN": "#17BECF",
    "PATE-CTGAN (nominal ε)": "#B7950B",
    "DP-CTGAN (nominal ε)": "#6E2C00",
}


def _algorithm_colors() -> dict[str, str]:
    """:data:`ALGORITHM_COLORS`, built on first use: each clipping rule's colour comes from the rule registry
    (fairdp_core.rules), whose modules need torch, so a figure that draws no algorithm (the custom audit's ROC curves)
    does not import it."""
    global _ALGORITHM_COLORS
    if _ALGORITHM_COLORS is None:
        from ..rules import COLORS as RULE_COLORS

        _ALGORITHM_COLORS = {**RULE_COLORS, **_SYNTH_COLORS}
    return _ALGORITHM_COLORS


_ALGORITHM_COLORS: dict[str, str] | None = None


def _attack_tables() -> dict[str, dict[str, str]]:
    """Each attack's label (by name), colour and short tick (by label), read from the attack registry
    (:data:`fairdp_core.audit.run.REGISTRY`) at each call, so an attack registered later is drawn too."""
    from ..audit.run import REGISTRY

    return {"ATTACK_LABELS": {n: a.label for n, a in REGISTRY.items()},
            "ATTACK_COLORS": {a.label: a.color for a in REGISTRY.values()},
            "ATTACK_SHORT": {a.label: a.short for a in REGISTRY.values()}}


def __getattr__(name: str):
    """``plots.ALGORITHM_COLORS``: every algorithm's colour, by the labels the reports print
    (results.ALGORITHM_LABELS); ``plots.ATTACK_LABELS``, ``ATTACK_COLORS``, ``ATTACK_SHORT``: from the attack
    registry."""
    if name == "ALGORITHM_COLORS":
        return _algorithm_colors()
    if name in ("ATTACK_LABELS", "ATTACK_COLORS", "ATTACK_SHORT"):
        return _attack_tables()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_OTHER = ["#999933", "#44AA99", "#AA4499", "#332288", "#DDCC77", "#117733"]


# the training of a bank in the beyond-membership report: SGD in its algorithm colour, each ε its own
EPSILON_COLORS = {"ε = 10": "#332288", "ε = 2": "#44AA99", "ε = 1": "#CC6677", "ε = 0.1": "#DDCC77"}


def _color(label: str) -> str:
    """The fixed colour of an algorithm, attack or ε label (any other label gets a fixed colour by name)."""
    if label in _algorithm_colors():
        return _algorithm_colors()[label]
    if label in EPSILON_COLORS:
        return EPSILON_COLORS[label]
    attack_colors = _attack_tables()["ATTACK_COLORS"]
    if label in attack_colors:
        return attack_colors[label]
    return _OTHER[sum(map(ord, label)) % len(_OTHER)]


def _tag(fig: plt.Figure, labels, palette: dict[str, str] | None = None) -> plt.Figure:
    fig.fairdp_colors = {str(lab): (palette or {}).get(str(lab), _color(str(lab))) for lab in labels}
    return fig


def _palette(labels) -> dict[str, str]:
    """Distinct colours for labels that are neither algorithms nor ε (groups, settings), in their order."""
    colors = GROUP_COLORS + _OTHER
    return {str(lab): colors[i % len(colors)] for i, lab in enumerate(labels)}


def _grid(n_rows: int, n_cols: int, *, w: float = 4.6, h: float = 2.8, sharey: bool | str = False):
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(w * n_cols, h * n_rows + 0.7), squeeze=False, sharey=sharey)
    return fig, axes


def _legend_below(fig, labels, *, names=None, title: str | None = None, markers: bool = False,
                  palette: dict[str, str] | None = None) -> None:
    handles = [plt.Line2D([], [], color="black" if lab.startswith("—") else (palette or {}).get(lab, _color(lab)),
                          marker="" if lab.startswith("—") else "o" if markers else "s",
                          ls="-" if markers or lab.startswith("—") else "", lw=2, markersize=8) for lab in labels]
    fig.legend(handles, names or [lab.removeprefix("— ") for lab in labels], loc="lower center",
               ncol=min(len(labels), 4), fontsize=9, title=title,
               frameon=False, bbox_to_anchor=(0.5, 0.0))


def _finish(fig, n_legend_rows: int = 1) -> None:
    h = fig.get_figheight()
    bottom = (0.25 + 0.3 * n_legend_rows) / h if n_legend_rows else 0
    top = 1 - (0.45 / h if fig._suptitle is not None else 0)
    fig.tight_layout(rect=(0, bottom, 1, top))


def _bars(ax, sub: pd.DataFrame, x: str, hue: str, y: str, lo: str | None, hi: str | None, x_order, hue_order,
          *, floor: str | None = None, palette: dict[str, str] | None = None) -> None:
    """Grouped bars with CI whiskers; a dot at every bar's value (a zero bar shows; a missing one shows nothing);
    ``floor``: a black tick at each bar's null floor."""
    n = max(len(hue_order), 1)
    width = 0.8 / n
    for j, h in enumerate(hue_order):
        for i, xv in enumerate(x_order):
            row = sub[(sub[x] == xv) & (sub[hue] == h)]
            if not len(row):
                continue
            r = row.iloc[0]
            xpos = i - 0.4 + width * (j + 0.5)
            c = (palette or {}).get(str(h), _color(str(h)))
            ax.bar(xpos, r[y], width=width * 0.92, color=c, alpha=0.85)
            ax.plot([xpos], [r[y]], marker="o", ms=3, color="black", zorder=3)
            if lo and hi and np.isfinite(r[lo]) and np.isfinite(r[hi]):
                ax.errorbar(xpos, r[y], yerr=[[max(0.0, r[y] - r[lo])], [max(0.0, r[hi] - r[y])]], fmt="none",
                            ecolor="black", capsize=2, lw=0.8)
            if floor and np.isfinite(r[floor]):
                ax.plot([xpos - width * 0.45, xpos + width * 0.45], [r[floor]] * 2, color="black", lw=2.2)
    ax.set_xticks(np.arange(len(x_order)), [str(v) for v in x_order], rotation=30 if len(x_order) > 4 else 0,
                  ha="right" if len(x_order) > 4 else "center", fontsize=8)
    ax.axhline(0, color="grey", lw=0.8)


def _facets(df: pd.DataFrame, n_cols: int = 4, *, w: float = 4.2, h: float = 2.7):
    """Small multiples: one panel per (setting, ε), in the frame's order, ``n_cols`` a row (a dataset's ε values
    side by side). Returns (fig, [(setting, ε, ax, first_in_row)]); spare axes are hidden."""
    keys = list(dict.fromkeys(zip(df["setting"], df["eps_label"])))
    n_cols = min(n_cols, max(len(keys), 1))
    n_rows = int(np.ceil(len(keys) / n_cols))
    fig, axes = _grid(n_rows, n_cols, w=w, h=h)
    out = [(s, e, axes[k // n_cols, k % n_cols], k % n_cols == 0) for k, (s, e) in enumerate(keys)]
    for k in range(len(keys), n_rows * n_cols):
        axes[k // n_cols, k % n_cols].set_axis_off()
    return fig, out


def _bar_facets(df: pd.DataFrame, x: str, y: str, lo: str | None, hi: str | None, *, ylabel: str,
                floor: str | None = None, upright: bool = False, w: float = 4.2, h: float = 2.7,
                title: str = "") -> plt.Figure:
    """Grouped bars of ``y`` per ``x`` and algorithm (``label``), one panel per setting × ε (:func:`_facets`), the
    legend below; ``upright``: x tick labels horizontal (multi-line names)."""
    labels = list(dict.fromkeys(df["label"]))
    fig, panels = _facets(df, w=w, h=h)
    for s, e, ax, first in panels:
        sub = df[(df.setting == s) & (df.eps_label == e)]
        _bars(ax, sub, x, "label", y, lo, hi, list(dict.fromkeys(sub[x])) if not upright else
              [v for v in dict.fromkeys(df[x]) if v in set(sub[x])],
              [lab for lab in labels if lab in set(sub["label"])], floor=floor)
        if upright:
            ax.tick_params(axis="x", labelrotation=0)
            for t in ax.get_xticklabels():
                t.set_ha("center")
        ax.set_title(f"{s}, {e}", fontsize=10)
        ax.set_ylabel(ylabel if first else "", fontsize=9)
    if title:
        fig.suptitle(title)
    _legend_below(fig, labels + (["— null floor"] if floor else []))
    _finish(fig)
    return _tag(fig, labels)


def gpr_grid(df: pd.DataFrame, *, title: str = "") -> plt.Figure:
    """GPR per group (pp, 95% interval) for each algorithm: one panel per setting × ε (a dataset's ε values side by
    side). ``df``: setting, eps_label, group, label, gpr_pp, lo_pp, hi_pp."""
    return _bar_facets(df, "group", "gpr_pp", "lo_pp", "hi_pp", ylabel="GPR (pp)", title=title)


def leveling_grid(df: pd.DataFrame, *, title: str = "", n_cols: int = 4) -> plt.Figure:
    """Per group: GPR(DP-SGD-S) − GPR(DP-SGD), pp with its interval; one panel per setting × ε, ``n_cols`` panels
    a row. ``df``: setting, eps_label, group, change_pp, lo_pp, hi_pp, role."""
    keys = list(dict.fromkeys(zip(df["setting"], df["eps_label"])))
    n_rows = int(np.ceil(len(keys) / n_cols))
    fig, axes = _grid(n_rows, n_cols, w=3.9, h=2.5)
    for k, (s, e) in enumerate(keys):
        ax = axes[k // n_cols, k % n_cols]
        d = df[(df.setting == s) & (df.eps_label == e)].reset_index(drop=True)
        err = np.clip([d["change_pp"] - d["lo_pp"], d["hi_pp"] - d["change_pp"]], 0, None)
        ax.errorbar(np.arange(len(d)), d["change_pp"], yerr=err, fmt="o", capsize=3,
                    color=_algorithm_colors()["DP-SGD-S"])
        many = len(d) > 5  # roles in the title: under the ticks they would overlap
        ax.set_xticks(np.arange(len(d)), [f"{g}\n({r})" if r in ("riskiest", "safest") and not many else str(g)
                                          for g, r in zip(d["group"], d["role"])], fontsize=7)
        ax.set_xlim(-0.5, len(d) - 0.5)
        ax.axhline(0, color="grey", lw=0.8)
        roles = {r: g for g, r in zip(d["group"], d["role"]) if r in ("riskiest", "safest")}
        ax.set_title(f"{s}, {e}" + (f"\nriskiest {roles.get('riskiest')}, safest {roles.get('safest')}" if many else ""),
                     fontsize=10)
        ax.set_ylabel("change (pp)" if k % n_cols == 0 else "", fontsize=9)
    for k in range(len(keys), n_rows * n_cols):
        axes[k // n_cols, k % n_cols].set_axis_off()
    if title:
        fig.suptitle(title)
    _finish(fig, 0)
    return _tag(fig, ["DP-SGD-S"])


def delta_by_attack(df: pd.DataFrame, y: str = "delta_pp", *, floor: str | None = "null_floor_pp",
                    ylabel: str = "Δ (pp)", title: str = "") -> plt.Figure:
    """One panel per setting × ε: ``y`` per attack (x, short names: CF cross-fitted, IS in-sample, NC
    null-corrected) and algorithm (bars), each with a black tick at its null floor. ``df``: setting, eps_label,
    attack_label, label, y (mean over seeds), floor."""
    short = _attack_tables()["ATTACK_SHORT"]
    d = df.assign(attack_label=df["attack_label"].map(lambda a: short.get(a, a)))
    return _bar_facets(d, "attack_label", y, None, None, ylabel=ylabel, floor=floor, upright=True, w=4.4, h=2.6,
                       title=title)


def delta_vs_epsilon(df: pd.DataFrame, *, title: str = "") -> plt.Figure:
    """Δ (pp, mean over seeds with its 95% interval) against ε (log scale), one line per algorithm, one panel per
    setting; SGD (no DP) as a dashed line. ``df``: setting, label, epsilon (NaN for SGD), delta_pp, lo, hi."""
    settings = list(dict.fromkeys(df["setting"]))
    labels = list(dict.fromkeys(df["label"]))
    n_cols = min(4, len(settings))
    n_rows = int(np.ceil(len(settings) / n_cols))
    fig, axes = _grid(n_rows, n_cols, w=3.9, h=2.9)
    for k, s in enumerate(settings):
        ax = axes[k // n_cols, k % n_cols]
        sub = df[df.setting == s]
        present = [lab for lab in labels if lab in set(sub["label"]) and sub[sub.label == lab]["epsilon"].notna().any()]
        for lab in labels:
            g = sub[sub.label == lab].sort_values("epsilon")
            if not len(g):
                continue
            if g["epsilon"].isna().all():
                v = g.iloc[0]
                ax.axhline(v["delta_pp"], color=_color(lab), ls="--", lw=1.2)
                continue
            g = g[g["epsilon"].notna()]
            err = np.clip([g["delta_pp"] - g["lo"], g["hi"] - g["delta_pp"]], 0, None)
            dodge = 1.03 ** (present.index(lab) - (len(present) - 1) / 2)  # side by side on the log axis
            ax.errorbar(g["epsilon"] * dodge, g["delta_pp"], yerr=err, marker="o", capsize=3, color=_color(lab),
                        lw=1.2, ms=4)
        if "null_floor_pp" in sub and sub["null_floor_pp"].notna().any():
            ax.axhline(sub["null_floor_pp"].mean(), color="black", ls=":", lw=1)
        ax.set_xscale("log")
        eps = sorted(sub["epsilon"].dropna().unique())
        if eps:  # a fixed span (a factor 2 beyond the extreme ε): one ε alone must not zoom the axis onto the dodge
            ax.set_xlim(eps[0] / 2, eps[-1] * 2)
        ax.set_xticks(eps, [f"{e:g}" for e in eps])
        ax.minorticks_off()
        ax.set_title(s, fontsize=10)
        ax.set(xlabel="ε", ylabel="Δ (pp)" if k % n_cols == 0 else "")
    for k in range(len(settings), n_rows * n_cols):
        axes[k // n_cols, k % n_cols].set_axis_off()
    if title:
        fig.suptitle(title)
    _legend_below(fig, labels, names=[lab + (" (no DP, dashed)" if lab == "SGD" else "") for lab in labels],
                  markers=True)
    if "null_floor_pp" in df:
        fig.legend([plt.Line2D([], [], color="black", ls=":", lw=1)], ["null floor (mean over the panel's rows)"],
                   loc="lower right", fontsize=8, frameon=False)
    _finish(fig)
    return _tag(fig, labels)


def pareto(df: pd.DataFrame, *, title: str = "", panel: str = "setting") -> plt.Figure:
    """Δ (pp) against accuracy (%), both with error bars (``acc_err``, ``delta_lo``/``delta_hi``), one marker shape
    per ε, one panel per ``panel``; the Pareto front (lower Δ, higher accuracy) of each panel dashed. ``df``: label,
    eps_label, accuracy_pct, acc_err, delta_pp, delta_lo, delta_hi (and ``panel``)."""
    panels = list(dict.fromkeys(df[panel]))
    labels = list(dict.fromkeys(df["label"]))
    eps_order = (df.assign(_e=df["epsilon"].fillna(-1.0)).sort_values("_e")["eps_label"] if "epsilon" in df
                 else df["eps_label"])
    shapes = dict(zip(dict.fromkeys(eps_order), "osD^v<>"))
    n_cols = min(4, len(panels))
    n_rows = int(np.ceil(len(panels) / n_cols))
    fig, axes = _grid(n_rows, n_cols, w=4.2, h=3.3)
    for k, p in enumerate(panels):
        ax = axes[k // n_cols, k % n_cols]
        sub = df[df[panel] == p]
        for _, r in sub.iterrows():
            yerr = [[max(0.0, r.delta_pp - r.delta_lo)], [max(0.0, r.delta_hi - r.delta_pp)]]
            ax.errorbar(r.accuracy_pct, r.delta_pp, xerr=r.acc_err if np.isfinite(r.acc_err) else None,
                        yerr=yerr, fmt=shapes[r.eps_label], color=_color(r.label), ms=6, capsize=2, lw=0.8)
        pts = sub.sort_values("accuracy_pct", ascending=False)[["accuracy_pct", "delta_pp"]].to_numpy()
        front, best = [], np.inf
        for acc, d in pts:
            if d < best:
                front.append((acc, d))
                best = d
        if len(front) > 1:
            f = np.array(front)
            ax.plot(f[:, 0], f[:, 1], color="black", lw=0.8, ls="--")
        ax.set_title(str(p), fontsize=10)
        ax.set(xlabel="test accuracy (%)", ylabel="Δ (pp)" if k % n_cols == 0 else "")
    for k in range(len(panels), n_rows * n_cols):
        axes[k // n_cols, k % n_cols].set_axis_off()
    if title:
        fig.suptitle(title)
    handles = ([plt.Line2D([], [], color=_color(lab), marker="s", ls="", ms=8) for lab in labels]
               + [plt.Line2D([], [], color="black", marker=m, ls="", ms=6) for m in shapes.values()]
               + [plt.Line2D([], [], color="black", ls="--", lw=0.8)])
    names = labels + list(shapes) + ["Pareto front"]
    fig.legend(handles, names, loc="lower center", ncol=min(len(names), 5), fontsize=9, frameon=False)
    _finish(fig, int(np.ceil(len(names) / 5)))
    return _tag(fig, labels)


def sweep_lines(df: pd.DataFrame, x: str, *, line: str, base: pd.DataFrame | None = None,
                title: str = "") -> plt.Figure:
    """Δ (pp) and accuracy (%) against ``x`` (e.g. τ), mean over seeds with 95% intervals, one line per ``line``
    (e.g. γ) in DP-SGD-S's colour at different dash styles; ``base`` (DP-SGD at the same ε: delta_pp, lo, hi,
    accuracy_pct, acc_lo, acc_hi) as a band. ``df``: x, line, delta_pp, lo, hi, accuracy_pct, acc_lo, acc_hi."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.9))
    styles = dict(zip(dict.fromkeys(df[line]), ["-", "--", ":", "-."]))
    for v, g in df.groupby(line, sort=False):
        g = g.sort_values(x)
        for ax, (y, lo, hi) in zip(axes, (("delta_pp", "lo", "hi"), ("accuracy_pct", "acc_lo", "acc_hi"))):
            ax.errorbar(g[x], g[y], yerr=np.clip([g[y] - g[lo], g[hi] - g[y]], 0, None), marker="o", capsize=3,
                        color=_algorithm_colors()["DP-SGD-S"], ls=styles[v],
                        label=f"DP-SGD-S, {({'tau': 'τ', 'gamma': 'γ'}).get(line, line)} = {v:g}")
    if base is not None and len(base):
        b = base.iloc[0]
        for ax, (y, lo, hi) in zip(axes, (("delta_pp", "lo", "hi"), ("accuracy_pct", "acc_lo", "acc_hi"))):
            ax.axhspan(b[lo], b[hi], color=_algorithm_colors()["DP-SGD"], alpha=0.15)
            ax.axhline(b[y], color=_algorithm_colors()["DP-SGD"], lw=1.2, label="DP-SGD (95% interval shaded)")
    xs = sorted(df[x].unique())
    sym = {"tau": "τ", "gamma": "γ"}
    for ax, yl in zip(axes, ("Δ (pp)", "test accuracy (%)")):
        ax.set_xscale("log")
        ax.set_xticks(xs, [f"{v:g}" for v in xs])
        ax.minorticks_off()
        ax.set(xlabel=sym.get(x, x), ylabel=yl)
    h, lab = axes[0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=len(lab), fontsize=9, frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    _finish(fig)
    return _tag(fig, ["DP-SGD-S"] + (["DP-SGD"] if base is not None and len(base) else []))


FAIRNESS_SHORT = {"accuracy parity": "accuracy\nparity", "demographic parity": "demographic\nparity",
                  "equal opportunity": "equal\nopportunity", "equalized odds": "equalized\nodds"}


def fairness_grid(df: pd.DataFrame, *, title: str = "") -> plt.Figure:
    """Outcome-fairness differences between groups (pp, bootstrap 95% CI) per metric (x) and algorithm (bars), one
    panel per setting × ε. ``df``: setting, eps_label, metric, label, value_pp, lo_pp, hi_pp."""
    d = df.assign(metric=df["metric"].map(lambda m: FAIRNESS_SHORT.get(m, m)))
    return _bar_facets(d, "metric", "value_pp", "lo_pp", "hi_pp", ylabel="difference (pp)", upright=True, w=4.4,
                       h=2.6, title=title)


def estimator_distributions(adv: dict[str, np.ndarray], null: dict[str, np.ndarray], *, title: str = "") -> plt.Figure:
    """Histograms of per-record advantage (pp) for each estimator, observed vs under permuted membership labels."""
    fig, axes = plt.subplots(1, len(adv), figsize=(4 * len(adv), 3.2), sharey=True)
    for ax, (name, a) in zip(np.atleast_1d(axes), adv.items()):
        a, n0 = 100 * np.asarray(a), 100 * np.asarray(null[name])
        bins = np.linspace(min(a.min(), n0.min()), max(a.max(), n0.max()), 25)
        ax.hist(n0, bins=bins, alpha=0.5, label="null (permuted labels)", density=True, color="#999999")
        ax.hist(a, bins=bins, alpha=0.5, label="observed", density=True, color="#0072B2")
        ax.axvline(n0.mean(), color="#555555", ls="--", lw=1)
        ax.axvline(a.mean(), color="#0072B2", ls="--", lw=1)
        ax.set(title=f"{name}: mean {a.mean():.1f} pp (null {n0.mean():.1f})", xlabel="advantage (pp)")
    np.atleast_1d(axes)[0].set_ylabel("density")
    fig.legend(*np.atleast_1d(axes)[0].get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=9,
               frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    _finish(fig)
    return _tag(fig, [])


def looa_vs_alooa(df: pd.DataFrame, *, title: str = "") -> plt.Figure:
    """Record by record: PA-LOOA against PA-ALOOA advantage (cross-fitted, pp), one colour per group; each point
    jittered by up to ±1 pp for display (the advantages are discrete)."""
    fig, ax = plt.subplots(figsize=(5.0, 2.8))
    groups = list(dict.fromkeys(df["group"]))
    jitter = np.random.default_rng(0)  # display only: per-record advantages are discrete and would overlap
    for k, g in enumerate(groups):
        d = df[df.group == g]
        ax.scatter(100 * d["alooa_cross_fit"] + jitter.uniform(-1, 1, len(d)),
                   100 * d["looa_cross_fit"] + jitter.uniform(-1, 1, len(d)), s=18, alpha=0.7,
                   color=GROUP_COLORS[k % len(GROUP_COLORS)], label=str(g))
    x, yv = 100 * df["alooa_cross_fit"].to_numpy(), 100 * df["looa_cross_fit"].to_numpy()
    lo, hi = max(x.min(), yv.min()) - 2, min(x.max(), yv.max()) + 2
    if lo < hi:  # y = x over the range both axes share (it does not stretch either axis)
        ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8, ls="--", label="y = x")
    ax.set(xlabel="PA-ALOOA advantage (pp)", ylabel="PA-LOOA (pp)")
    ax.set_title(title, fontsize=8, loc="left")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    fig.tight_layout()
    return _tag(fig, [])


# ------------------------------------------------------------------------------------ beyond membership -----------


def claims_forest(df: pd.DataFrame, *, rules: dict[str, str], cell_label) -> plt.Figure:
    """The claims campaign at a glance: one panel per rule (``rules``: rule -> panel title), one row per cell
    (``cell_label(dataset, model, epsilon)``), the paired difference Δ(rule) − Δ(DP-SGD) in pp with its Bonferroni
    95% interval under both estimators (in-sample: filled circle; cross-fitted: open square), in the rule's colour.
    Cells that are not like-for-like tests are drawn faint. ``df``: the claims table (reporting.claims.claims_frame)."""
    from .results import ALGORITHM_LABELS

    cells = list(dict.fromkeys((r.dataset, r.model, r.epsilon) for r in df.itertuples()))
    ys = {c: i for i, c in enumerate(cells)}
    present = [r for r in rules if (df.rule == r).any()]
    fig, axes = plt.subplots(1, len(present), figsize=(4.4 * len(present), 0.42 * len(cells) + 1.5), sharey=True,
                             squeeze=False)
    colours = {}
    for ax, rule in zip(axes[0], present):
        lab = ALGORITHM_LABELS[rule]
        colour = colours.setdefault(lab, _color(lab))
        # the x range is the decided cells' (a faint cell of 2 seeds has an interval of hundreds of pp, which would
        # squeeze every other cell onto the zero line): a faint interval beyond it is cut at the panel's edge
        rows = df[df.rule == rule]
        decided = rows[~rows.verdict.isin(["not a like-for-like test", "too few seeds"])]
        basis = decided if len(decided) else rows
        ends = basis[[f"{b}_bonf_{est}" for est in ("in_sample", "cross_fit") for b in ("lo", "hi")]].to_numpy(float)
        ends = ends[np.isfinite(ends)]
        if len(ends):
            lo, hi = min(ends.min(), 0.0), max(ends.max(), 0.0)
            pad = 0.08 * (hi - lo) or 0.1
            ax.set_xlim(lo - pad, hi + pad)
        for r in rows.itertuples():
            faint = r.verdict in ("not a like-for-like test", "too few seeds")
            for off, est, marker in ((-0.15, "in_sample", "o"), (0.15, "cross_fit", "s")):
                x, lo, hi = getattr(r, f"diff_{est}"), getattr(r, f"lo_bonf_{est}"), getattr(r, f"hi_bonf_{est}")
                if not np.isfinite(x):
                    continue
                y = ys[(r.dataset, r.model, r.epsilon)] + off
                ax.plot([lo, hi], [y, y], color=colour, lw=1.8, alpha=0.3 if faint else 1.0)
                ax.plot([x], [y], marker=marker, ms=6, color=colour, alpha=0.3 if faint else 1.0,
                        mfc=colour if est == "in_sample" else "white", mew=1.5)
        ax.axvline(0, color="black", lw=0.8)
        ax.set_title(rules[rule], fontsize=10)
        ax.set_xlabel("Δ(rule) − Δ(DP-SGD), pp")
    axes[0][0].set_yticks(range(len(cells)), [cell_label(*c) for c in cells])
    axes[0][0].set_ylim(len(cells) - 0.5, -0.5)
    handles = [plt.Line2D([], [], color="0.3", marker="o", ls="-", mfc="0.3"),
               plt.Line2D([], [], color="0.3", marker="s", ls="-", mfc="white"),
               plt.Line2D([], [], color="0.3", marker="o", ls="-", alpha=0.3)]
    fig.legend(handles, ["in-sample (the paper's estimator)", "cross-fitted",
                         "faint: not a like-for-like test or too few seeds (interval cut at the edge)"],
               loc="lower center", ncol=3, fontsize=9, frameon=False, bbox_to_anchor=(0.5, 0.0))
    _finish(fig)
    fig.fairdp_colors = colours
    return fig
