"""The colours and the theme of every figure fairdp draws: the user's audit (its ROC curves) and the reports
(:mod:`fairdp_core.reporting.plots`) read them here, so the audit draws without importing the reporting layer."""

from __future__ import annotations

import contextlib

__all__ = ["GROUP_COLORS", "theme"]

# groups (not algorithms): Tol's muted palette, ordered so that the first two contrast
GROUP_COLORS = ["#332288", "#DDAA33", "#44AA99", "#CC6677", "#88CCEE", "#882255", "#117733", "#999933", "#AA4499",
                "#661100"]

# seaborn's theme of every figure (sns.set_theme's arguments)
THEME = {"style": "whitegrid", "context": "notebook"}


def theme() -> contextlib.AbstractContextManager:
    """The reports' theme for the figures drawn inside the block only, leaving the caller's rcParams as they were."""
    import matplotlib
    import seaborn as sns

    rc = {**sns.axes_style(THEME["style"]), **sns.plotting_context(THEME["context"])}
    return matplotlib.rc_context(rc)
