"""Model inversion (Fredrikson et al. 2015), per class, scored by an independent evaluator.

For each attacked model and class c, an input x in [0, 1]^d is found by gradient ascent (Adam) on

    log softmax(f(x))_c − λ_tv · TV(x) − λ_2 · mean(x²),

projected onto [0, 1] after every step, from ``restarts`` starting points (small uniform noise around the public
constant 0). The total-variation term is the usual image prior; λ_2 keeps the background dark. A reconstruction
"succeeds" when an evaluator (a classifier trained without privacy on data disjoint from the attacked models')
assigns it class c; its distance to the class mean (root mean square over pixels, against the mean image of class c
in the attacked models' training pool) says how much it looks like the class's records.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

__all__ = ["InversionResult", "invert_classes", "total_variation"]


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """[n]: the anisotropic total variation of images x [n, C, H, W] (mean absolute neighbour difference)."""
    return ((x[..., 1:, :] - x[..., :-1, :]).abs().flatten(1).mean(1)
            + (x[..., :, 1:] - x[..., :, :-1]).abs().flatten(1).mean(1))


@dataclass
class InversionResult:
    """``images`` [M, C, restarts, *shape] reconstructions per model and class; ``confidence`` [M, C, restarts] the
    attacked model's softmax probability of the class at the end."""

    images: np.ndarray
    confidence: np.ndarray


def invert_classes(module: nn.Module, params: dict[str, torch.Tensor], input_shape: tuple[int, ...], n_classes: int,
                   *, steps: int = 300, lr: float = 0.05, tv: float = 0.05, l2: float = 0.01, restarts: int = 2,
                   seed: int = 0, models: list[int] | None = None) -> InversionResult:
    """Reconstruct every class of each model of a bank.

    ``module``: the architecture (parameters are replaced by ``params``, name -> [M, *shape], via
    ``torch.func.functional_call``); ``models``: which of the M models (default: all). Deterministic given
    ``seed``: model m's starting points come from its own generator.
    """
    M = next(iter(params.values())).shape[0]
    models = list(range(M)) if models is None else list(models)
    targets = torch.arange(n_classes).repeat_interleave(restarts)
    imgs, confs = [], []
    module = module.eval()
    for m in models:
        p = {k: v[m].detach() for k, v in params.items()}
        g = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, m]).generate_state(1, np.uint64)[0] >> 1))
        x = (0.1 * torch.rand((len(targets), *input_shape), generator=g)).requires_grad_(True)
        opt = torch.optim.Adam([x], lr=lr)
        for _ in range(steps):
            opt.zero_grad()
            logp = torch.log_softmax(functional_call(module, p, (x,)), -1)
            obj = logp[torch.arange(len(targets)), targets] - tv * total_variation(x) - l2 * x.pow(2).flatten(1).mean(1)
            (-obj.sum()).backward()
            opt.step()
            with torch.no_grad():
                x.clamp_(0.0, 1.0)
        with torch.no_grad():
            prob = torch.softmax(functional_call(module, p, (x,)), -1)[torch.arange(len(targets)), targets]
        imgs.append(x.detach().reshape(n_classes, restarts, *input_shape).numpy())
        confs.append(prob.reshape(n_classes, restarts).numpy())
    return InversionResult(np.stack(imgs), np.stack(confs))
