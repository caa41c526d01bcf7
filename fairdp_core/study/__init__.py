"""The study's campaigns: the claims and frontier runner (``claims``), the tuning grids (``tuning``), the clip-bound
study and its DP tuner (``clip_study``, ``clip_tuning``), the check of committed summaries (``verify``), the
parameter files they write (``params_files``: profiles, runs.yaml) and the DVC plumbing they share
(``profile_dir``, ``lockfile``). Each module loads on first use."""

from __future__ import annotations

from .. import _lazy_exports

__all__, __getattr__, __dir__ = _lazy_exports(__name__, __path__, {})
