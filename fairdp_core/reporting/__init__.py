"""Everything a reader sees: the page registry and notebook runs (``pages``), the front page (``index``), figures
(``plots``, ``plots_beyond``), the labels and tables read from results (``results``), the claims and frontier
sections (``claims``, ``claims_page``, ``frontier``), the notebooks' helpers (``helpers``) and the checks every
rendered page must pass (``checks``). Each module loads on first use."""

from __future__ import annotations

from .. import _lazy_exports

__all__, __getattr__, __dir__ = _lazy_exports(__name__, __path__, {})
