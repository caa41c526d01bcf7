"""Per-sample gradient norms, clipped sums and forward passes for a bank of M models with stacked parameters.

Parameters are a dict ``name -> Tensor [M, *shape]`` with the names of the model's ``named_parameters()``.

- :class:`DenseBackend` (LR, MLP: linear layers with tanh between) never materialises per-sample gradients. For a
  linear layer with input a_i and output gradient δ_i, the per-sample weight gradient is the outer product
  δ_i a_iᵀ, so ‖∇W‖² + ‖∇b‖² = ‖δ_i‖² (‖a_i‖² + 1), and the clipped sum Σ f_i δ_i a_iᵀ is one batched matmul
  (Goodfellow 2015, arXiv 1510.01799; docs/performance.md).
- :class:`FuncBackend` (any module, e.g. the CNNs) uses ``torch.func``: ``vmap`` over models of ``vmap`` over
  samples of ``grad`` of the single-sample loss.

The loss is the per-sample cross-entropy; ``per_sample`` returns norms [M, W] and a context from which
``clipped_sum(ctx, factors [M, W])`` returns ``name -> [M, *shape]``.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from ..models import MLP, LogisticRegression, MnistCNN, MnistReLUCNN, UTKFaceCNN

__all__ = ["ENGINE_LAYERS", "Backend", "DenseBackend", "FuncBackend", "LayerBackend", "UnsupportedModule", "check_module",
           "make_backend", "stack_params"]


def stack_params(modules: list[nn.Module]) -> dict[str, torch.Tensor]:
    """``name -> [M, *shape]`` from M modules of one architecture."""
    names = [n for n, _ in modules[0].named_parameters()]
    return {n: torch.stack([dict(m.named_parameters())[n].detach() for m in modules]) for n in names}


def _row_sq(x: torch.Tensor, chunk_elems: int = 1 << 18) -> torch.Tensor:
    """``(x * x).sum(-1)``, the same bits, over slices of the leading dimension small enough (``chunk_elems``
    numbers, 1 MiB in float32) that the squares stay in cache instead of a full-size temporary going through memory
    (3x faster for an [M = 128, 256, 256] bank on one thread). A slice is only taken while it still holds at least
    64 output rows and as many as torch has threads: torch then splits the work over output rows, each summed whole
    as in the full call; with fewer rows it would split single rows across threads, in another order."""
    if x.dim() < 2 or not x.shape[0]:
        return (x * x).sum(-1)
    per_row = x[0].numel()
    outputs_per_row = per_row // max(1, x.shape[-1])
    rows = max(1, chunk_elems // max(1, per_row))
    if rows >= x.shape[0] or rows * outputs_per_row < max(64, torch.get_num_threads()):
        return (x * x).sum(-1)
    out = x.new_empty(x.shape[:-1])
    for s in range(0, x.shape[0], rows):
        part = x[s:s + rows]
        torch.sum(part * part, -1, out=out[s:s + rows])
    return out


@functools.cache
def _blas() -> object:
    """numpy's BLAS libraries (threadpoolctl), for :func:`_f64_bmm`'s thread limit."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController().select(user_api="blas")


def _f64_bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.bmm(a, b)`` of float64 stacks. On a CPU through numpy's BLAS (OpenBLAS) at torch's thread count: under
    the stages' ``MKL_CBWR=COMPATIBLE`` torch's MKL runs its float64 GEMM on a generic code path, 6x slower here for
    the MLP's [W, 256] x [256, W] pairs (docs/performance.md, "Reproducibility costs"). The two round differently in
    the last bits (about 1e-15 relative); what reads the Gram matrix rounds it to float32 bounds."""
    if a.device.type != "cpu":
        return torch.bmm(a, b)
    with _blas().limit(limits=torch.get_num_threads()):
        return torch.from_numpy(np.matmul(a.detach().numpy(), b.detach().numpy()))


class Backend:
    def per_sample(self, params, x, y, x_sq=None):
        """Norms [M, W] of the per-sample gradients of samples x [M, W, ...] with labels y [M, W], and a context.
        ``x_sq`` [M, W], optional: the squared norms of the flattened inputs, when the caller has them cached."""
        raise NotImplementedError

    def clipped_sum(self, ctx, factors):
        raise NotImplementedError

    def group_sums(self, ctx, factors: torch.Tensor, groups: torch.Tensor, K: int) -> dict[str, torch.Tensor]:
        """name -> [M, K, *shape]: per group k, the clipped sum with ``factors · [groups == k]``. Here K passes of
        :meth:`clipped_sum`; the engine's own backends override it with one pass over the batch."""
        parts = [self.clipped_sum(ctx, factors * (groups == k)) for k in range(K)]
        return {n: torch.stack([p[n] for p in parts], 1) for n in parts[0]}

    def reads_gram(self, K: int) -> bool:
        """Whether a rule that reads per-group sums gets their Gram matrix (:meth:`group_gram`) instead."""
        return False

    def group_gram(self, ctx, factors: torch.Tensor, groups: torch.Tensor, K: int,
                   rows: torch.Tensor | None = None) -> torch.Tensor:
        """[M, K, K] float64: the Gram matrix of the K sums of :meth:`group_sums` (over all parameters). ``rows``
        [M, W]: the batch's rows of the training inputs, where :meth:`cache_inputs` was given them."""
        raise NotImplementedError

    def cache_inputs(self, X: torch.Tensor) -> bool:
        """Keep what :meth:`group_gram` can reuse across steps from the training inputs X [n, ...]; whether it did."""
        return False

    def batch_grad(self, params, x, y, weights):
        """Non-private: name -> [M, *shape], the weighted sum of the samples' gradients (no per-sample work)."""
        raise NotImplementedError

    def forward(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """Logits [M, N, C] of every model on the same inputs x [N, ...]."""
        raise NotImplementedError


class DenseBackend(Backend):
    """A chain of linear layers ``layers`` (parameter-name prefixes) with tanh between them."""

    # The largest n for which :meth:`cache_inputs` keeps the n × n input pairs (float64: 2 GiB at this n).
    INPUT_PAIRS_MAX_N = 16_384

    def __init__(self, layers: list[str]) -> None:
        self.layers = layers
        self._input_pairs: torch.Tensor | None = None

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
            dtanh = (acts[i] ** 2).neg_().add_(1)  # 1 − a², in place: (−a²) + 1 rounds as 1 − a² does
            delta = torch.bmm(delta, W).mul_(dtanh)
            deltas.append(delta)
        deltas.reverse()
        return acts, deltas

    def per_sample(self, params, x, y, x_sq=None):
        acts, deltas = self._deltas(params, x, y)
        a_sq = [x_sq if x_sq is not None else _row_sq(acts[0])] + [_row_sq(a) for a in acts[1:]]
        sq = sum(_row_sq(d) * (s + 1) for d, s in zip(deltas, a_sq))
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

    def reads_gram(self, K: int) -> bool:
        """With more than two groups the paper rules read their sums' Gram matrix (numerics version 3); with two,
        K passes of the clipped sum, the bits of numerics 1."""
        return K > 2

    def cache_inputs(self, X):
        """The first layer's pairs a_i·a_j + 1 of every two training inputs, [n, n] in float64, computed once: the
        inputs are the data, the same every step, so :meth:`group_gram` gathers the batch's [W, W] block instead of
        forming it (W²·in multiply-adds a step, the MLP's 785-wide input). Only where n ≤ ``INPUT_PAIRS_MAX_N``."""
        n = X.shape[0]
        if n > self.INPUT_PAIRS_MAX_N:
            self._input_pairs = None
            return False
        x = X.reshape(n, -1).double()
        self._input_pairs = _f64_bmm(x.unsqueeze(0), x.T.unsqueeze(0))[0].add_(1.0)
        return True

    def group_gram(self, ctx, factors, groups, K, rows=None):
        """The Gram matrix of the K group sums without forming them, layer by layer, by the cheaper of two exact
        routes. Per sample the weight-and-bias gradient is g_i = δ_i [a_i, 1]ᵀ, so g_i·g_j = (δ_i·δ_j)(a_i·a_j + 1)
        and G_kl = Σ_{i in k, j in l} f_i f_j (δ_i·δ_j)(a_i·a_j + 1): one [W, W] matrix of pairs, about W²·(in + out)
        multiply-adds, summed by group with the one-hot [W, K] matrix H (the MLP's wide first layer). Or the K sums
        themselves, as one matmul of (H ⊗ f·δ) with [a, 1], about K·W·(in + 1)·out, and their inner products in
        float64 (the narrow layers: LR's, the MLP's output layer). The pairs are formed in float64: in float32 a
        group of nearly cancelling clipped gradients got a Gram entry wrong by about 1e-6·C0², which the release's
        square root turns into 1e-3·C0 in the sum's norm (the float32 sums' own error is about 1e-7·C0).

        With ``rows`` [M, W] and the inputs cached (:meth:`cache_inputs`), the first layer's a_i·a_j + 1 are gathered
        from the cache (numerics version 4 of the paper rules), leaving the layer W²·out multiply-adds."""
        acts, deltas = ctx
        M, W = groups.shape
        H = torch.nn.functional.one_hot(groups, K).to(factors.dtype)  # [M, W, K]
        Hd = H.double()
        gram = torch.zeros(M, K, K, dtype=torch.float64, device=factors.device)
        cached = self._input_pairs is not None and rows is not None
        for layer, (a, d) in enumerate(zip(acts, deltas)):
            fd = d * factors.unsqueeze(-1)
            n_in, n_out = a.shape[-1] + 1, d.shape[-1]
            if layer == 0 and cached:
                fd64 = fd.double()
                n = self._input_pairs.shape[0]
                at = (rows.unsqueeze(-1) * n + rows.unsqueeze(-2)).view(-1)  # [M, W, W]: (i, j) in the cache
                a_pairs = self._input_pairs.view(-1).index_select(0, at).view(M, W, W)
                pairs = _f64_bmm(fd64, fd64.transpose(1, 2)).mul_(a_pairs)
                gram += _f64_bmm(Hd.transpose(1, 2), _f64_bmm(pairs, Hd))
                continue
            a1 = torch.cat([a, a.new_ones(M, W, 1)], -1)
            if W * (n_in + n_out) < K * n_in * n_out:
                # in float64: the group sums of nearly cancelling pairs are small differences of large terms, and
                # the release's square root of the Gram matrix would turn a float32 error E into about √E
                fd64, a64 = fd.double(), a1.double()
                pairs = _f64_bmm(fd64, fd64.transpose(1, 2)).mul_(_f64_bmm(a64, a64.transpose(1, 2)))
                gram += _f64_bmm(Hd.transpose(1, 2), _f64_bmm(pairs, Hd))
            else:
                hfd = (H.unsqueeze(-1) * fd.unsqueeze(2)).flatten(2)  # [M, W, K·out]: sample i's δ in its group's slot
                sums = torch.bmm(hfd.transpose(1, 2), a1).view(M, K, n_out * n_in).double()
                gram += _f64_bmm(sums, sums.transpose(1, 2))
        return gram


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


class LayerBackend(Backend):
    """Models of Conv2d and Linear layers with any parameter-free ops between (the CNNs), one model at a time.

    One ordinary batched forward and one backward to the layer OUTPUTS give every sample's output gradient
    δ_i (samples do not interact); per-sample parameter gradients then follow in closed form: for a linear layer
    δ_i a_iᵀ (norm ‖δ_i‖·sqrt(‖a_i‖² + 1), never materialised), for a convolution δ_i · patches(a_i), a
    [out, k·k·in] matrix per sample (Goodfellow 2015, arXiv 1510.01799; Rochette et al. 2019, arXiv 1912.06015).
    Models are looped over: batching CNNs over models does not pay on a CPU (docs/performance.md).
    """

    def __init__(self, module: nn.Module) -> None:
        # A private copy: its hooks switch conv outputs to channels_last, which must never leak into a module
        # that Opacus later wraps (Opacus 1.6 computes wrong per-sample conv gradients in that layout).
        self.module = copy.deepcopy(module)
        self.layers = [(n, m) for n, m in self.module.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
        if not self.layers or any(m.bias is None for _, m in self.layers):
            raise ValueError("LayerBackend needs Conv2d/Linear layers with biases")
        odd = [n for n, m in self.layers if isinstance(m, nn.Conv2d) and (
            m.groups != 1 or m.padding_mode != "zeros" or isinstance(m.padding, str))]
        if odd:
            raise ValueError(f"LayerBackend's convolutions are ungrouped with numeric zero padding: {', '.join(odd)}")
        self._captured: list[tuple[torch.Tensor, torch.Tensor]] = []
        for _, m in self.layers:
            m.register_forward_hook(self._hook)

    def _hook(self, mod, inp, out):
        self._captured.append((inp[0], out))
        if out.dim() == 4:  # what follows (tanh, max-pool) runs several times faster in channels_last
            return out.contiguous(memory_format=torch.channels_last)
        return None

    def _one(self, p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor):
        """Per layer (input a, output gradient δ) of model parameters p on samples x [W, ...]."""
        self._captured = []
        with torch.enable_grad():
            p = {k: v.detach().requires_grad_(True) for k, v in p.items()}
            logits = functional_call(self.module, p, (self._layout(x),))
            outs = [o for _, o in self._captured]
            deltas = torch.autograd.grad(nn.functional.cross_entropy(logits, y, reduction="sum"), outs)
        return [(a.detach(), d) for (a, _), d in zip(self._captured, deltas)]

    @staticmethod
    def _layout(x: torch.Tensor) -> torch.Tensor:
        """channels_last: max-pooling in the default layout is several times slower on CPU (docs/performance.md)."""
        return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x

    @staticmethod
    def _patches(layer: nn.Conv2d, a: torch.Tensor) -> torch.Tensor:
        """[W, L, kh·kw·in]: each output position's input patch, in (kh, kw, in) order, from a channels-last view.

        One strided copy of a zero-padded channels-last input. ``nn.functional.unfold`` builds the same numbers in
        (in, kh, kw) order from the default layout, several times slower here (benchmarks/conv_patches.md:
        ``python benchmarks/run.py --conv-patches``)."""
        (kh, kw), (sh, sw), (dh, dw) = layer.kernel_size, layer.stride, layer.dilation
        ph, pw = layer.padding
        if ph or pw:
            a = nn.functional.pad(a, (pw, pw, ph, ph))
        a = a.contiguous(memory_format=torch.channels_last)
        W, C, H, Wd = a.shape
        Lh, Lw = (H - dh * (kh - 1) - 1) // sh + 1, (Wd - dw * (kw - 1) - 1) // sw + 1
        sN, sC, sH, sW = a.stride()
        view = a.as_strided((W, Lh, Lw, kh, kw, C), (sN, sH * sh, sW * sw, sH * dh, sW * dw, sC), a.storage_offset())
        return view.reshape(W, Lh * Lw, kh * kw * C)

    def _per_sample_conv(self, layer: nn.Conv2d, a: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        """[W, out, kh·kw·in] per-sample weight gradients of a convolution (columns in (kh, kw, in) order:
        :meth:`_conv_weight` turns a sum of them into the weight's [out, in, kh, kw])."""
        return torch.bmm(d.flatten(2), self._patches(layer, a))

    @staticmethod
    def _conv_weight(layer: nn.Conv2d, g: torch.Tensor) -> torch.Tensor:
        """[out, kh·kw·in] -> the weight's [out, in, kh, kw]."""
        out, inp, kh, kw = layer.weight.shape
        return g.view(out, kh, kw, inp).permute(0, 3, 1, 2).contiguous()

    def per_sample(self, params, x, y, x_sq=None):
        M = x.shape[0]
        norms, ctx = [], []
        for m in range(M):
            pairs = self._one({k: v[m] for k, v in params.items()}, x[m], y[m])
            sq = torch.zeros(x.shape[1], dtype=x.dtype, device=x.device)
            per_model = []
            for (name, layer), (a, d) in zip(self.layers, pairs):
                if isinstance(layer, nn.Conv2d):
                    g = self._per_sample_conv(layer, a, d)
                    gb = d.sum((2, 3))
                    sq += g.flatten(1).pow(2).sum(1) + gb.pow(2).sum(1)
                    per_model.append((name, "conv", g, gb))
                else:
                    sq += d.pow(2).sum(1) * (a.pow(2).sum(1) + 1)
                    per_model.append((name, "linear", a, d))
            norms.append(sq.sqrt())
            ctx.append(per_model)
        return torch.stack(norms), ctx

    def clipped_sum(self, ctx, factors):
        out: dict[str, list[torch.Tensor]] = {}
        for m, per_model in enumerate(ctx):
            f = factors[m]
            for name, kind, u, v in per_model:
                if kind == "conv":
                    w = self._conv_weight(self.module.get_submodule(name), torch.einsum("w,w...->...", f, u))
                    b = f @ v
                else:
                    fd = v * f[:, None]
                    w, b = fd.T @ u, fd.sum(0)
                out.setdefault(f"{name}.weight", []).append(w)
                out.setdefault(f"{name}.bias", []).append(b)
        return {k: torch.stack(v) for k, v in out.items()}

    def group_sums(self, ctx, factors, groups, K):
        """One read of each model's per-sample gradients: the K sums of a layer as one matmul with the [W, K] matrix
        of factors · one-hot(group)."""
        out: dict[str, list[torch.Tensor]] = {}
        for m, per_model in enumerate(ctx):
            G = torch.nn.functional.one_hot(groups[m], K).to(factors.dtype) * factors[m].unsqueeze(-1)  # [W, K]
            for name, kind, u, v in per_model:
                if kind == "conv":
                    layer = self.module.get_submodule(name)
                    out_c, inp, kh, kw = layer.weight.shape
                    g = (G.T @ u.flatten(1)).view(K, out_c, kh, kw, inp)
                    w, b = g.permute(0, 1, 4, 2, 3).contiguous(), G.T @ v
                else:
                    w = torch.stack([(v * G[:, k:k + 1]).T @ u for k in range(K)])
                    b = G.T @ v
                out.setdefault(f"{name}.weight", []).append(w)
                out.setdefault(f"{name}.bias", []).append(b)
        return {k: torch.stack(v) for k, v in out.items()}

    def batch_grad(self, params, x, y, weights):
        out: dict[str, list[torch.Tensor]] = {}
        for m in range(x.shape[0]):
            with torch.enable_grad():
                p = {k: v[m].detach().requires_grad_(True) for k, v in params.items()}
                self._captured = []
                logits = functional_call(self.module, p, (self._layout(x[m]),))
                loss = (nn.functional.cross_entropy(logits, y[m], reduction="none") * weights[m]).sum()
                g = torch.autograd.grad(loss, list(p.values()))
            for k, gk in zip(p, g):
                out.setdefault(k, []).append(gk)
        return {k: torch.stack(v) for k, v in out.items()}

    def forward(self, params, x):
        with torch.no_grad():
            outs = []
            for m in range(next(iter(params.values())).shape[0]):
                self._captured = []
                outs.append(functional_call(self.module, {k: v[m] for k, v in params.items()}, (self._layout(x),)))
        self._captured = []
        return torch.stack(outs)


class UnsupportedModule(ValueError):
    """A module the engine cannot train exactly. ``layers``: (name, type) of the offending layers; ``mixes_samples``:
    True when one of them mixes samples within a batch (BatchNorm), which no DP-SGD implementation can train."""

    def __init__(self, message: str, layers: list[tuple[str, str]], *, mixes_samples: bool) -> None:
        super().__init__(message)
        self.layers = layers
        self.mixes_samples = mixes_samples


# Layers with parameters whose per-sample gradients the engine computes exactly (Linear and Conv2d in closed form;
# GroupNorm and LayerNorm, which act on one sample at a time, through torch.func). Parameter-free layers
# (activations, pooling, Flatten) may sit anywhere between them; random or recurrent ones may not.
ENGINE_LAYERS = (nn.Linear, nn.Conv2d, nn.GroupNorm, nn.LayerNorm)
_RANDOM_OR_STATEFUL = (nn.modules.dropout._DropoutNd, nn.RNNBase)


def check_module(module: nn.Module) -> None:
    """Raise :class:`UnsupportedModule`, naming the layers, unless the engine can train ``module`` exactly."""
    mixing = [(n, type(m).__name__) for n, m in module.named_modules()
              if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm))
              and (getattr(m, "track_running_stats", False) or isinstance(m, nn.modules.batchnorm._BatchNorm))]
    if mixing:
        raise UnsupportedModule(
            f"{', '.join(f'{n} ({t})' for n, t in mixing)}: batch statistics mix the samples of a batch, so per-sample "
            "gradients (and DP-SGD) are undefined; use GroupNorm instead (opacus.validators.ModuleValidator.fix "
            "does this)", mixing, mixes_samples=True)
    other = [(n, type(m).__name__) for n, m in module.named_modules()
             if n and (isinstance(m, _RANDOM_OR_STATEFUL)
                       or (any(True for _ in m.parameters(recurse=False)) and not isinstance(m, ENGINE_LAYERS)))]
    if other:
        raise UnsupportedModule(
            f"{', '.join(f'{n} ({t})' for n, t in other)}: not among the engine's layers (Linear, Conv2d, GroupNorm, "
            "LayerNorm, with parameter-free activations and pooling between); no random or recurrent layers",
            other, mixes_samples=False)


def make_backend(module: nn.Module) -> Backend:
    """The fastest exact backend for ``module``: dense for the study's LR/MLP, per-layer closed forms for its CNNs
    (whose forward is known), torch.func for any other model whose layers pass :func:`check_module` (exact whatever
    its forward does: layers called out of registration order, tied weights, reflect padding), in eval mode (so a
    functional dropout in forward is off). Anything else raises :class:`UnsupportedModule`."""
    if isinstance(module, LogisticRegression):
        return DenseBackend(["fc"])
    if isinstance(module, MLP):
        return DenseBackend(["fc1", "fc2"])
    if isinstance(module, (MnistCNN, MnistReLUCNN, UTKFaceCNN)):
        return LayerBackend(module)
    check_module(module)
    return FuncBackend(module.eval())
