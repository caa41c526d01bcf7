"""DP synthetic data (docs/study.md, 'Synthetic data'): DPDSyn, a task-oriented generator trained only from
DP-released gradients (:mod:`.dpdsyn`), the prepared feature space it writes into (:mod:`.layout`), and train-on-synthetic /
test-on-real utility and fidelity (:mod:`.evaluate`). The smartnoise baselines run in their own environment
(:mod:`.smartnoise_run`). Submodules load on first use."""

from __future__ import annotations

import importlib

_NAMES = {"DPDSynSpec": "dpdsyn", "Generator": "dpdsyn", "SynthResult": "dpdsyn", "calibrate_dpdsyn": "dpdsyn",
          "dpdsyn_epsilon": "dpdsyn", "noisy_label_marginal": "dpdsyn", "private_gradient": "dpdsyn",
          "sample_table": "dpdsyn", "train_dpdsyn": "dpdsyn", "Layout": "layout", "discretise": "layout",
          "fidelity": "evaluate", "utility": "evaluate", "fit_classifier": "evaluate"}

__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:
        return getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
