"""fairdp_core: measuring and mitigating the disparity of group privacy risks in DP machine learning.

Every submodule (``fairdp_core.audit.custom``, ``fairdp_core.synth``, ...) and the names below load on first use (PEP 562),
so that each pipeline stage imports only the code it needs and dvc.yaml can declare exactly that code as the stage's
dependencies.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

__version__ = "0.1.0"

# The front door: what a user calls. Audit a bank of per-record losses you already have (audit_bank), a model
# trained here by a recipe (audit_model, audit_csv: the recipe and the reading in one AuditSettings), or one released
# model against its population (audit_one): each returns the one result type, CustomAudit. Train a bank with any
# registered rule (train_bank, TrainSpec; the registry is RULES), or DP-SGD-S inside your own Opacus loop
# (make_private_dpsgd_s).
_FROM = {
    "audit.custom": ("AuditSettings", "audit_bank", "audit_model"),
    "audit.custom_csv": ("audit_csv",),
    "audit.custom_result": ("CustomAudit",),
    "audit.one": ("audit_one",),
    "config": ("ConfigError", "Params", "load_params"),
    "engine": ("TrainSpec", "TrainedBank", "train_bank"),
    "opacus_compat": ("make_private_dpsgd_s",),
    "rules": ("RULES",),
}

__all__ = ["RULES", "AuditSettings", "ConfigError", "CustomAudit", "Params", "TrainSpec", "TrainedBank",
           "__version__", "audit_bank", "audit_csv", "audit_model", "audit_one", "config", "data", "engine",
           "load_params", "make_private_dpsgd_s", "models", "rules", "train_bank"]


def _lazy_exports(package: str, path: list[str], names_from: dict[str, tuple[str, ...]]):
    """PEP 562 for a package of this library: every submodule (found in ``path``) and every name of ``names_from``
    (submodule -> the names it exports) load on first access. Returns (the exported names, ``__getattr__``,
    ``__dir__``)."""
    names = {name: mod for mod, exported in names_from.items() for name in exported}
    submodules = {m.name for m in pkgutil.iter_modules(path)}

    def __getattr__(name: str):
        if name in names:
            return getattr(importlib.import_module(f".{names[name]}", package), name)
        if name in submodules:
            return importlib.import_module(f".{name}", package)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names, *submodules})

    return sorted(names), __getattr__, __dir__


_, __getattr__, __dir__ = _lazy_exports(__name__, __path__, _FROM)
