"""The clipping rules, one module each, and their registry.

Every module of this package but ``base`` (what a rule declares) and ``policy`` (the per-step seam every rule's
policy subclasses) defines one :class:`~fairdp_core.rules.base.Rule` as ``RULE`` and is
named as the rule; the registry discovers them and orders them by ``Rule.order``. The trainer, the plan, the params
schema's list of algorithms and its ``train`` sections (each rule's ``settings``), the report labels and the figure
colours all derive from it, so a new rule is one module here and its test. docs/rules.md.
"""

from __future__ import annotations

import pkgutil
from importlib import import_module

from .base import COMMON_ASSUMPTIONS, Rule, Sigmas

__all__ = ["ALGORITHMS", "COLORS", "COMMON_ASSUMPTIONS", "LABELS", "RULES", "RULE_SUPPORT_MODULES", "Rule", "Sigmas",
           "get"]

RULE_SUPPORT_MODULES = ("base", "policy")  # the modules of this package that define no rule


def _discover() -> dict[str, Rule]:
    """Every module of this package but ``base`` and ``policy`` (:data:`RULE_SUPPORT_MODULES`) defines one rule as
    ``RULE``; ordered by ``Rule.order``."""
    modules = [import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)
               if m.name not in RULE_SUPPORT_MODULES]
    for mod in modules:
        if not isinstance(getattr(mod, "RULE", None), Rule):
            raise RuntimeError(f"{mod.__name__} defines no RULE (a Rule instance); a module of fairdp_core/rules/ that "
                               f"defines no rule must be named in fairdp_core.rules.RULE_SUPPORT_MODULES")
    rules = [mod.RULE for mod in modules]
    names = [r.name for r in rules]
    if len(set(names)) != len(names) or len({r.order for r in rules}) != len(rules):
        raise RuntimeError(f"two rules share a name or an order: {sorted(names)}")
    for r in rules:
        if r.__module__ != f"{__name__}.{r.name}":
            raise RuntimeError(f"rule {r.name!r} is defined in {r.__module__}, not in {__name__}.{r.name}")
    declared = [r.config for r in rules if r.settings is not None]
    if len(set(declared)) != len(declared):
        raise RuntimeError(f"two rules declare the settings of one train section: {sorted(declared)}")
    for r in rules:
        if r.config is not None and r.config not in declared:
            raise RuntimeError(f"rule {r.name!r} reads train.{r.config}, which no rule declares (Rule.settings)")
    return {r.name: r for r in sorted(rules, key=lambda r: r.order)}


RULES: dict[str, Rule] = _discover()
ALGORITHMS: tuple[str, ...] = tuple(RULES)
LABELS: dict[str, str] = {k: r.label for k, r in RULES.items()}
COLORS: dict[str, str] = {r.label: r.color for r in RULES.values()}


def get(name: str) -> Rule:
    """The rule registered as ``name``; a clear error naming the known ones otherwise."""
    try:
        return RULES[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}") from None
