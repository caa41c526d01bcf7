"""fairdp_core: measuring and mitigating the disparity of group privacy risks in DP machine learning.

Submodules and the names below load on first use (PEP 562), so that each pipeline stage imports only the code it
needs and dvc.yaml can declare exactly that code as the stage's dependencies.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_SUBMODULES = ("audit", "config", "data", "engine", "fairness", "models", "opacus_compat", "plots", "reporting",
               "results", "seeding", "stages")
_NAMES = {"ConfigError": "config", "Params": "config", "load_params": "config", "TrainSpec": "engine",
          "TrainedBank": "engine", "train_bank": "engine"}

__all__ = ["ConfigError", "Params", "TrainSpec", "TrainedBank", "__version__", "config", "data", "engine",
           "load_params", "models", "train_bank"]


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _NAMES:
        return getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_SUBMODULES, *_NAMES})
