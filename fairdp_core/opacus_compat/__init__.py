"""DP-SGD-S, and its rival clipping rules, for people with their own Opacus training loop.

One module per rule with an Opacus route, named after the rule (``opacus_compat/<rule>.py``), each the rule's
optimizer and its ``make_private_<rule>``; the rule's module in :mod:`fairdp_core.rules` names that entry point
(``Rule.make_private``), and this package finds the routes through the rules registry, so a rule with an Opacus
route adds its two modules and edits nothing else. Each optimizer reuses the engine's rule (its policy class, one
implementation) and is charged σ_eff by the accountant hook:

- DP-SGD-S: :class:`~.dpsgd_s.DPSGDSOptimizer`, :func:`~.dpsgd_s.make_private_dpsgd_s`;
- the paper's rule made DP: :class:`~.dpsgd_s_paper.DPSGDSPaperOptimizer`,
  :func:`~.dpsgd_s_paper.make_private_dpsgd_s_paper` (groups via ``set_groups``; it releases the noised per-group
  sums of the gradients clipped at C0 and the noised counts, from which the next step's bounds are set);
- DPSGD-F (Xu et al. 2021): :class:`~.dpsgd_f.DPSGDFOptimizer`, :func:`~.dpsgd_f.make_private_dpsgd_f` (groups via
  ``set_groups``; no virtual steps: its bounds are set from the noised counts of the whole batch they clip);
- DPSGD-Global-Adapt (Esipova et al. 2023): :class:`~.global_adapt.GlobalAdaptOptimizer`,
  :func:`~.global_adapt.make_private_global_adapt`;
- AdaClip (Andrew et al. 2021): Opacus's own ``AdaClipDPOptimizer`` with its bound update taken from the engine's
  rule (public batch size in the quantile estimate; counts kept over virtual steps):
  :class:`~.adaclip.AdaClipOptimizer`, :func:`~.adaclip.make_private_adaclip`.

Every name a route module exports is an attribute of this package (``from fairdp_core.opacus_compat import
make_private_dpsgd_s``), and :func:`route` gives a rule's entry point by the rule's name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from ..rules import RULES

__all__ = ["route"]


def _routes() -> dict[str, object]:
    """Each registered rule's Opacus module (``.<rule name>``), checked to define the entry point its rule names."""
    modules = {}
    for name, rule in RULES.items():
        if rule.make_private is None:
            continue
        try:
            module = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise RuntimeError(f"rule {name!r} names its Opacus entry point {rule.make_private!r}, but "
                               f"{__name__}.{name} does not exist") from None
        if not callable(getattr(module, rule.make_private, None)) or \
                rule.make_private not in getattr(module, "__all__", ()):
            raise RuntimeError(f"{module.__name__} does not export {rule.make_private!r}, the entry point rule "
                               f"{name!r} names")
        modules[name] = module
    return modules


_MODULES = _routes()
for _module in _MODULES.values():
    if set(_module.__all__) & set(__all__):
        raise RuntimeError(f"{_module.__name__} exports {sorted(set(_module.__all__) & set(__all__))}, which another "
                           f"route of {__name__} exports too")
    globals().update({k: getattr(_module, k) for k in _module.__all__})
    __all__ += list(_module.__all__)
del _module


def route(rule: str) -> Callable:
    """The ``make_private_<rule>`` of a registered rule (``PrivacyEngine.make_private`` with the rule's optimizer);
    a ValueError naming the rules that have one where ``rule`` has none."""
    if rule not in _MODULES:
        raise ValueError(f"rule {rule!r} has no Opacus route; the rules with one: {', '.join(_MODULES)}")
    return getattr(_MODULES[rule], RULES[rule].make_private)
