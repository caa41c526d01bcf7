"""The versions of the packages that made an output (recorded in summaries and on the report pages)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["package_versions"]


def package_versions() -> dict[str, str]:
    """torch, opacus, numpy and fairdp_core, as installed (read from the package metadata, importing nothing)."""
    out = {}
    for name, dist in (("torch", "torch"), ("opacus", "opacus"), ("numpy", "numpy"), ("fairdp", "fairdp_core")):
        try:
            out[name] = version(dist)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out
