"""The membership-inference attacks, one module each: a module defines ``ATTACK`` (a
:class:`fairdp_core.audit.bank.Attack`: how it scores the bank, its label, colour and tick, where it runs in the
order, the smallest bank it needs and what it reports). The registry (:data:`fairdp_core.audit.run.REGISTRY`) finds
every module here, so adding an attack is adding a module."""

from __future__ import annotations

import importlib
import pkgutil
import sys

from ..bank import Attack

__all__ = ["discover"]


def discover(package=None) -> dict[str, Attack]:
    """Every ``ATTACK`` of ``package``'s modules (default this package; modules named ``_*`` are skipped), by name,
    in their ``order``."""
    package = package or sys.modules[__name__]
    found: list[Attack] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        attack = getattr(module, "ATTACK", None)
        if not isinstance(attack, Attack):
            raise TypeError(f"attack module {module.__name__} defines no ATTACK (an Attack)")
        if attack.name != info.name:
            raise ValueError(f"attack module {module.__name__} declares the attack {attack.name!r}: a module is named "
                             "after its attack")
        if (attack.contributions is None) == (attack.advantage is None):
            raise ValueError(f"attack module {module.__name__}: give exactly one of contributions and advantage")
        if (attack.first or attack.low_fpr or attack.roc) and attack.scores is None:
            raise ValueError(f"attack module {module.__name__}: first, low_fpr and roc need its scores")
        if (attack.first or attack.low_fpr) and attack.min_models > 2:
            raise ValueError(f"attack module {module.__name__}: first and low_fpr run on every bank, so min_models "
                             f"{attack.min_models} cannot hold (at most 2)")
        found.append(attack)
    orders = [a.order for a in found]
    if len(set(orders)) != len(orders):
        raise ValueError(f"attack modules share an order: {sorted((a.order, a.name) for a in found)}")
    if sum(a.low_fpr for a in found) != 1:
        raise ValueError(f"exactly one attack feeds the low-FPR view, not {[a.name for a in found if a.low_fpr]}")
    return {a.name: a for a in sorted(found, key=lambda a: a.order)}
