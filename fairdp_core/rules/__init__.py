"""The clipping rules, one module each, and their registry.

Every module of this package but ``base`` (what a rule declares) and ``policy`` (the per-step seam every rule's
policy subclasses) defines one :class:`~fairdp_core.rules.base.Rule` as ``RULE`` and is
named as the rule; the registry discovers them and orders them by ``Rule.order``. The trainer, the plan, the params
schema's list of algorithms and its ``train`` sections (each rule's ``settings``), the report labels and the figure
colours all derive from it, so a new rule is one module here and its test. docs/rules.md.
"""

from __future__ import annotations

import os
import pkgutil
from importlib import import_module

from ..config import RULE_SUPPORT_MODULES, ConfigError
from .base import COMMON_ASSUMPTIONS, Rule, Sigmas

__all__ = ["ALGORITHMS", "COLORS", "COMMON_ASSUMPTIONS", "LABELS", "RULES", "Rule", "Sigmas", "check_settings", "get",
           "load_checked"]


def _discover() -> dict[str, Rule]:
    """Every module of this package but ``base`` and ``policy`` (config.RULE_SUPPORT_MODULES) defines one rule as
    ``RULE``; ordered by ``Rule.order``."""
    modules = [import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)
               if m.name not in RULE_SUPPORT_MODULES]
    for mod in modules:
        if not isinstance(getattr(mod, "RULE", None), Rule):
            raise RuntimeError(f"{mod.__name__} defines no RULE (a Rule instance); a module of fairdp_core/rules/ that "
                               f"defines no rule must be named in fairdp_core.config.RULE_SUPPORT_MODULES")
    rules = [mod.RULE for mod in modules]
    names = [r.name for r in rules]
    if len(set(names)) != len(names) or len({r.order for r in rules}) != len(rules):
        raise RuntimeError(f"two rules share a name or an order: {sorted(names)}")
    for r in rules:
        if r.__module__ != f"{__name__}.{r.name}":
            raise RuntimeError(f"rule {r.name!r} is defined in {r.__module__}, not in {__name__}.{r.name}")
    for r in rules:
        _check_declaration(r)
    owners = {r.config: r for r in rules if r.config == r.name}
    for r in rules:
        if r.config is not None and (r.config not in owners or owners[r.config].settings is not r.settings):
            raise RuntimeError(f"rule {r.name!r} reads train.{r.config}: the section of the rule of that name, with "
                               "its Settings (a rule's own section is named as the rule)")
    return {r.name: r for r in sorted(rules, key=lambda r: r.order)}


def _check_declaration(r: Rule) -> None:
    """What a rule declares about its settings is consistent: a Strict schema (unknown keys refused) under a
    section, and its fields stored in fields of rules (:data:`~.base.RULE_FIELDS`) one to one."""
    from ..schema import Strict
    from .base import RULE_FIELDS

    if r.settings is not None and not (isinstance(r.settings, type) and issubclass(r.settings, Strict)):
        raise RuntimeError(f"rule {r.name!r}: settings must subclass fairdp_core.schema.Strict (unknown keys refused)")
    if (r.settings is None) != (r.config is None):
        raise RuntimeError(f"rule {r.name!r}: config and settings go together (the section and its schema)")
    targets = [r.stored_as.get(f, f) for f in r.fields]
    if not set(r.stored_as) <= set(r.fields) or not set(r.stored_as.values()) <= set(RULE_FIELDS) or \
            len(set(targets)) != len(targets):
        raise RuntimeError(f"rule {r.name!r}: stored_as must map some of its fields, one to one, onto RULE_FIELDS")


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


def check_settings(train, file: str | os.PathLike = "params.yaml") -> None:
    """Every rule section params.yaml sets (``train.<rule>``) against that rule's ``Settings``: a ConfigError naming
    the file and ``train.<rule>.<key>`` on the first problem (unknown key, wrong type, out of range). The params
    schema (fairdp_core.config) checks only that the section names a rule; this is the rest, where rules load."""
    try:
        for key in train.model_extra or {}:
            rule = get(key)
            if rule.config != key:
                raise ConfigError(f"train.{key}: {key} has no settings of its own"
                                  + (f" (it reads train.{rule.config})" if rule.config else ""))
            rule.settings_of(train)
    except ConfigError as e:
        raise ConfigError(f"{file}: {e}") from None


def load_checked(path: str | os.PathLike = "params.yaml"):
    """:func:`fairdp_core.config.load_params` and :func:`check_settings`: params.yaml checked whole."""
    from ..config import load_params

    params = load_params(path)
    check_settings(params.train, path)
    return params
