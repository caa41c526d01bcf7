"""Per-sample gradient norms, clipped sums and forward passes for a bank of M models with stacked parameters.

Parameters are a dict ``name -> Tensor [M, *shape]`` with the names of the model's ``named_parameters()``.

- :class:`DenseBackend` (LR, MLP: linear layers with tanh between) never materialises per-sample gradients. For a
  linear layer with input a_i and output gradient δ_i, the per-sample weight gradient is the outer product
  δ_i a_iᵀ, so ‖∇W‖² + ‖∇b‖² = ‖δ_i‖² (‖a_i‖² + 1), and the clipped sum Σ f_i δ_i a_iᵀ is one batched matmul
  (Goodfellow 2015, arXiv 1510.01799; PERF_NOTES.md).
- :class:`FuncBackend` (any module, e.g. the CNNs) uses ``torch.func``: ``vmap`` over models of ``vmap`` over
  samples of ``grad`` of the single-sample loss.

The loss is the per-sample cross-entropy; ``per_sample`` returns norms [M, W] and a context from which
``clipped_sum(ctx, factors [M, W])`` returns ``name -> [M, *shape]``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from ..models import MLP, LogisticRegression

__all__ = ["Backend", "DenseBackend", "FuncBackend", "make_backend", "stack_params"]


def stack_params(modules: list[nn.Module]) -> dict[str, torch.Tensor]:
    """``name -> [M, *shape]`` from M modules of one architecture."""
    names = [n for n, _ in modules[0].named_parameters()]
    return {n: torch.stack([dict(m.named_parameters())[n].detach() for m in modules]) for n in names}


class Backend:
    def per_sample(self, params, x, y, x_sq=None):
        """Norms [M, W] of the per-sample gradients of samples x [M, W, ...] with labels y [M, W], and a context.
        ``x_sq`` [M, W], optional: the squared norms of the flattened inputs, when the caller has them cached."""
        raise NotImplementedError

    def clipped_sum(self, ctx, factors):
        raise NotImplementedError

    def batch_grad(self, params, x, y, weights):
        """Non-private: name -> [M, *shape], the weighted sum of the samples' gradients (no per-sample work)."""
        raise NotImplementedError

    def forward(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """Logits [M, N, C] of every model on the same inputs x [N, ...]."""
        raise NotImplementedError


class DenseBackend(Backend):
    """A chain of linear layers ``layers`` (parameter-name prefixes) with tanh between them."""

    def __init__(self, layers: list[str]) -> None:
        self.layers = layers

    def _forward(self, params, x):
        a = x.flatten(2) if x.dim() > 2 else x
        acts, pre = [a], []
        for i, name in enumerate(self.layers):
            W, b = params[f"{name}.weight"], params[f"{name}.bias"]
            z = torch.baddbmm(b.unsqueeze(1), a, W.transpose(1, 2))  # [M, W, out]
            pre.append(z)
            if i < len(self.layers) - 1:
                a = torch.tanh(z)
                acts.append(a)
        return acts, pre[-1]

    def forward(self, params, x):
        M = next(iter(params.values())).shape[0]
        return self._forward(params, x.flatten(1).unsqueeze(0).expand(M, -1, -1))[1]

    def _deltas(self, params, x, y):
        """Layer inputs a_l and output gradients δ_l of the per-sample losses, each [M, W, width]."""
        acts, logits = self._forward(params, x)
        delta = torch.softmax(logits, dim=-1)
        delta.scatter_add_(-1, y.unsqueeze(-1), -torch.ones_like(y, dtype=delta.dtype).unsqueeze(-1))
        deltas = [delta]
        for i in range(len(self.layers) - 1, 0, -1):  # backpropagate δ through tanh layers
            W = params[f"{self.layers[i]}.weight"]
            delta = torch.bmm(delta, W) * (1 - acts[i] ** 2)
            deltas.append(delta)
        deltas.reverse()
        return acts, deltas

    def per_sample(self, params, x, y, x_sq=None):
        acts, deltas = self._deltas(params, x, y)
        a_sq = [x_sq if x_sq is not None else (acts[0] * acts[0]).sum(-1)] + [(a * a).sum(-1) for a in acts[1:]]
        sq = sum((d * d).sum(-1) * (s + 1) for d, s in zip(deltas, a_sq))
        return sq.sqrt(), (acts, deltas)

    def batch_grad(self, params, x, y, weights):
        return self.clipped_sum(self._deltas(params, x, y), weights)

    def clipped_sum(self, ctx, factors):
        acts, deltas = ctx
        out = {}
        for name, a, d in zip(self.layers, acts, deltas):
            fd = d * factors.unsqueeze(-1)
            out[f"{name}.weight"] = torch.bmm(fd.transpose(1, 2), a)
            out[f"{name}.bias"] = fd.sum(1)
        return out


class FuncBackend(Backend):
    """Any module, through torch.func (per-sample gradients are materialised: [M, W, *shape] each)."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

        def loss_one(p, x, y):
            logits = functional_call(self.module, p, (x.unsqueeze(0),))
            return nn.functional.cross_entropy(logits, y.unsqueeze(0), reduction="sum")

        self._grads = vmap(vmap(grad(loss_one), in_dims=(None, 0, 0)), in_dims=(0, 0, 0))
        self._fwd = vmap(lambda p, x: functional_call(self.module, p, (x,)), in_dims=(0, None))

        def loss_batch(p, x, y, w):
            logits = functional_call(self.module, p, (x,))
            return (nn.functional.cross_entropy(logits, y, reduction="none") * w).sum()

        self._batch_grad = vmap(grad(loss_batch), in_dims=(0, 0, 0, 0))

    def forward(self, params, x):
        return self._fwd(params, x)

    def batch_grad(self, params, x, y, weights):
        return self._batch_grad(params, x, y, weights)

    def per_sample(self, params, x, y, x_sq=None):
        g = self._grads(params, x, y)
        sq = sum(v.flatten(2).pow(2).sum(-1) for v in g.values())
        return sq.sqrt(), g

    def clipped_sum(self, ctx, factors):
        return {n: torch.einsum("mw,mw...->m...", factors, v) for n, v in ctx.items()}


def make_backend(module: nn.Module) -> Backend:
    """The fastest exact backend for ``module``: dense for LR/MLP, torch.func otherwise."""
    if isinstance(module, LogisticRegression):
        return DenseBackend(["fc"])
    if isinstance(module, MLP):
        return DenseBackend(["fc1", "fc2"])
    return FuncBackend(module)
