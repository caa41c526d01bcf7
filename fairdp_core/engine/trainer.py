"""Train a bank of M models at once: SGD, DP-SGD, DP-SGD-S, DP-SGD-S with the paper code's rule (DP-correct and
as the code has it), DP-SGD-S as first described, and the rival clipping rules DPSGD-F (Xu et al. 2021),
DPSGD-Global-Adapt (Esipova et al. 2023) and AdaClip (Andrew et al. 2021), their statistics noised and accounted.

Each model m trains on its own subset of the training pool (row m of a boolean membership matrix [M, n]) with
its own random streams (initialisation, Poisson sampling, gradient noise, count noise), derived from one seed:
model m's result does not depend on which models train beside it. Initialisation and Poisson batches depend on
(seed, m) only, so banks of different algorithms are paired; the noise streams also depend on the release (every
hyperparameter of the TrainSpec, :func:`release_key`), so two releases never share noise: two models that differ
only in ε, τ, γ or algorithm cannot be combined to cancel their step noise. ε is per model and per release.

One step, for every model (docs/study.md, 'Training algorithms'): Poisson batch with rate q_m = B / n_m; per-sample
gradients; the policy's release before clipping, if any (DPSGD-F: noised counts that set this batch's bounds); factors
from the policy's bounds (:func:`~fairdp_core.rules.policy.clip_factors`, or the policy's own ``factors``:
Global-Adapt's strict scaling); clipped sum + N(0, (σ_g·max_k C_k)²); divided by the expected batch size B (never the
realised one; an empty batch still gets noise and counts as a step); SGD update; then the policy updates its bounds
(DP-SGD-S, Global-Adapt, AdaClip: from noised counts; the paper rule: from noised per-group gradient sums and counts). A
diagnostic outside ε, never used in training: per model and group, how many per-sample gradients were clipped
(``TrainedBank.clip_stats``).
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from ..atomic import atomic_path
from ..models import build_model
from ..rules import ALGORITHMS, COMMON_ASSUMPTIONS, Sigmas
from ..rules import get as get_rule
from ..rules.policy import NoClip
from .accounting import Accounting, calibrate_sigma, epsilon
from .backends import Backend, make_backend, stack_params
from .sampling import PoissonBank, batch_sizes
from .spec import TrainSpec, release_key, spec_fields

__all__ = ["ALGORITHMS", "EpochView", "TrainedBank", "bank_widths", "model_generators", "train_bank"]


def model_generators(seed: int, M: int, *, release: int = 0, device: torch.device | str = "cpu",
                     stream_ids: np.ndarray | None = None) -> list[dict[str, torch.Generator]]:
    """Per model: independent generators ``init``, ``sample`` (CPU), ``noise``, ``count`` (on ``device``).

    ``init`` and ``sample`` come from SeedSequence(seed, spawn_key=(i,)): shared by every release of the bank, for
    pairing. ``noise`` and ``count`` come from SeedSequence(seed, spawn_key=(i, release)): a different
    ``release`` (:func:`release_key`) gives independent noise. Model m uses stream ``stream_ids[m]`` (default m):
    models given the same id get identical, separate generators (PA-LOOA's coupled IN/OUT pairs)."""
    ids = np.arange(M) if stream_ids is None else np.asarray(stream_ids)
    out = []

    def gen(ss: np.random.SeedSequence, dev) -> torch.Generator:
        g = torch.Generator(device=dev)
        g.manual_seed(int(ss.generate_state(1, np.uint64)[0] % (2**63 - 1)))
        return g

    for i in ids:  # a fresh SeedSequence per model: spawn() on a shared one would advance its child counter
        init, sample = np.random.SeedSequence(seed, spawn_key=(int(i),)).spawn(2)
        noise, count = np.random.SeedSequence(seed, spawn_key=(int(i), int(release))).spawn(2)
        out.append({"init": gen(init, "cpu"), "sample": gen(sample, "cpu"), "noise": gen(noise, device),
                    "count": gen(count, device)})
    return out


def _init_module(module: nn.Module, g: torch.Generator) -> nn.Module:
    """PyTorch's default init, U(−1/√fan_in, 1/√fan_in) for Linear/Conv2d weights and biases, drawn from ``g``;
    any other layer with parameters is reset by its own ``reset_parameters`` under a seed drawn from ``g``."""
    for layer in module.modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            fan_in = layer.weight[0].numel()
            bound = 1.0 / math.sqrt(fan_in)
            with torch.no_grad():
                nn.init.uniform_(layer.weight, -bound, bound, generator=g)
                if layer.bias is not None:
                    nn.init.uniform_(layer.bias, -bound, bound, generator=g)
        elif any(True for _ in layer.parameters(recurse=False)) and hasattr(layer, "reset_parameters"):
            seed = int(torch.randint(0, 2**62, (1,), generator=g, device=g.device))
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                layer.reset_parameters()
    return module


class _Adam:
    """torch.optim.Adam's update (its single-tensor path, defaults β = (0.9, 0.999), ε = 1e-8, no weight decay)
    on a bank's stacked parameters: every entry is its own coordinate, so each model of the bank steps on its own
    gradient alone. ``step(params, grads, scale)`` applies it to g = scale·grads, in place."""

    def __init__(self, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.lr, self.betas, self.eps, self.t = lr, betas, eps, 0
        self.m: dict[str, torch.Tensor] = {}
        self.v: dict[str, torch.Tensor] = {}

    def step(self, params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], scale: float) -> None:
        b1, b2 = self.betas
        self.t += 1
        c1, c2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        for n, p in params.items():
            g = grads[n] * scale
            if n not in self.m:
                self.m[n], self.v[n] = torch.zeros_like(p), torch.zeros_like(p)
            self.m[n].lerp_(g, 1 - b1)
            self.v[n].mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (self.v[n].sqrt() / math.sqrt(c2)).add_(self.eps)
            p.addcdiv_(self.m[n], denom, value=-self.lr / c1)


@functools.cache
def _noise_pool(threads: int) -> ThreadPoolExecutor:
    """One pool per process and thread count, shared by every bank it trains (the engine's worker processes are
    started by loky or Ray, never forked from a process holding one)."""
    return ThreadPoolExecutor(threads, thread_name_prefix="fairdp-noise")


class _NoiseBank:
    """Standard normal draws [M, P] per step, each model from its own generator, pre-drawn in blocks.

    A generator draws on one thread, so on a CPU the models' draws are shared out over ``torch.get_num_threads()``
    Python threads (torch releases the GIL): each generator still draws its own sequence, so the bits are those of
    drawing the models one after the other."""

    def __init__(self, gens: list[torch.Generator], P: int, device) -> None:
        self.gens, self.P, self.device = gens, P, device
        self.block = int(min(64, max(1, 2**16 // max(P, 1))))  # depends on P only, never on M
        self._buf, self._t = None, self.block
        threads = min(torch.get_num_threads(), len(gens))
        # threads only where each task is large (32 k normals or more: the MLPs and CNNs); an LR's small blocks draw
        # faster one after the other than the pool hands them out
        self._pool = (_noise_pool(threads) if torch.device(device).type == "cpu" and threads > 1
                      and self.block * P >= 2**15 else None)

    def _draw(self, g: torch.Generator) -> torch.Tensor:
        return torch.randn(self.block, self.P, generator=g, device=self.device)

    def next(self) -> torch.Tensor:
        if self._t >= self.block:
            draws = list(self._pool.map(self._draw, self.gens)) if self._pool else [self._draw(g) for g in self.gens]
            self._buf = torch.stack(draws, dim=1)  # [block, M, P]
            self._t = 0
        out = self._buf[self._t]
        self._t += 1
        return out


@dataclass
class TrainedBank:
    """M trained models: stacked parameters, accounting per model, final clipping state, timings."""

    spec: TrainSpec
    input_shape: tuple[int, ...]
    n_classes: int
    params: dict[str, torch.Tensor]
    accounting: list[Accounting]
    membership: np.ndarray
    policy_state: dict[str, torch.Tensor] = field(default_factory=dict)
    clip_stats: dict[str, torch.Tensor] = field(default_factory=dict)  # diagnostic outside ε: clipped / seen [M, K]
    steps: int = 0
    seconds: float = 0.0
    seed: int = 0
    factory: Callable[[], nn.Module] | None = field(default=None, compare=False, repr=False)  # a custom model's

    @property
    def n_models(self) -> int:
        return next(iter(self.params.values())).shape[0]

    def module(self) -> nn.Module:
        if self.factory is not None:
            return self.factory()
        return build_model(self.spec.model, self.input_shape, self.n_classes, hidden=self.spec.hidden)

    def backend(self) -> Backend:
        return make_backend(self.module())

    @torch.no_grad()
    def evaluate(self, X: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor, *, batch_size: int = 2048,
                 models: slice | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per model and record: (loss [M, N] float32 cross-entropy, logits [M, N, C] float32), in batches."""
        X = torch.as_tensor(X)
        y = torch.as_tensor(y)
        be = self.backend()
        params = {k: v[models] if models is not None else v for k, v in self.params.items()}
        losses, logits = [], []
        for s in range(0, len(y), batch_size):
            z = be.forward(params, X[s:s + batch_size])  # [M, b, C]
            yy = y[s:s + batch_size].expand(z.shape[0], -1)
            losses.append(nn.functional.cross_entropy(z.transpose(1, 2), yy, reduction="none"))
            logits.append(z)
        return torch.cat(losses, 1).numpy(), torch.cat(logits, 1).numpy()

    def accuracy(self, X, y) -> np.ndarray:
        """[M] accuracy of each model on (X, y)."""
        _, logits = self.evaluate(X, y)
        return (logits.argmax(-1) == np.asarray(y)[None]).mean(1)

    def save(self, path: str | os.PathLike) -> None:
        """torch.save to a temp file, then rename (a killed write never leaves a plausible file). The wall time
        (``seconds``) is not saved, so the same training writes the same bytes."""
        # through a file object: torch.save to a path names the archive's root after the (random) temporary's name
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            torch.save({"spec": spec_fields(self.spec), "input_shape": self.input_shape, "n_classes": self.n_classes,
                        "params": self.params, "accounting": [a.as_dict() for a in self.accounting],
                        "membership": self.membership, "policy_state": self.policy_state,
                        # no timing: reruns are byte-identical
                        "clip_stats": self.clip_stats, "steps": self.steps, "seed": self.seed}, f)

    @classmethod
    def load(cls, path: str | os.PathLike) -> TrainedBank:
        d = torch.load(path, weights_only=False)
        return cls(spec=TrainSpec(**d["spec"]), input_shape=tuple(d["input_shape"]), n_classes=d["n_classes"],
                   params=d["params"], accounting=[Accounting(**a) for a in d["accounting"]],
                   membership=d["membership"], policy_state=d["policy_state"], clip_stats=d.get("clip_stats", {}),
                   steps=d["steps"],
                   seconds=d.get("seconds", 0.0), seed=d["seed"])


def _sigmas(spec: TrainSpec, q: float, steps: int) -> Sigmas:
    """(σ_g, σ_b, σ_s, σ_eff) for the spec, calibrated at sampling rate q over ``steps``; the rule splits σ_eff."""
    rule = get_rule(spec.algorithm)
    if not rule.private:
        return rule.sigmas(rule.view(spec), 0.0)
    sigma_eff = spec.noise_multiplier if spec.noise_multiplier is not None else calibrate_sigma(
        spec.target_epsilon, sample_rate=q, steps=steps, delta=spec.delta, accountant=spec.accountant)
    return rule.sigmas(rule.view(spec), sigma_eff)


def _public_assumptions(spec: TrainSpec) -> tuple[str, ...]:
    """What the accounting treats as public: the inputs of q, T and σ that are not noised."""
    rule = get_rule(spec.algorithm)
    return (*COMMON_ASSUMPTIONS, *rule.public_assumptions(rule.view(spec))) if rule.private else ()


def _schedule(sample_over: np.ndarray, spec: TrainSpec) -> tuple[list[torch.Tensor], np.ndarray, np.ndarray, int]:
    """(pools: each model's record indices, n_m [M], q_m = B / n_m [M], T = round(E·mean(n_m) / B)) of a bank."""
    pools = [torch.as_tensor(np.flatnonzero(r)) for r in sample_over]
    n_m = np.array([len(p) for p in pools], dtype=np.float64)
    if (n_m < spec.batch_size).any():
        raise ValueError(f"every model needs at least batch_size={spec.batch_size} records; smallest has {n_m.min():.0f}")
    return pools, n_m, spec.batch_size / n_m, int(round(spec.epochs * n_m.mean() / spec.batch_size))


def bank_widths(membership: np.ndarray, spec: TrainSpec, *, seed: int, stream_ids: np.ndarray | None = None,
                sample_over: np.ndarray | None = None, models: np.ndarray | None = None) -> np.ndarray:
    """[T] int64: per step, the largest Poisson batch among the rows ``models`` (default all) of the bank that
    ``train_bank`` would train with these arguments: its padded batch width. The max over a bank's shards is the
    whole bank's width, which ``train_bank(models=..., widths=...)`` pads to."""
    membership = np.asarray(membership, dtype=bool)
    sample_over = membership if sample_over is None else np.asarray(sample_over, dtype=bool)
    _, n_m, q, steps = _schedule(sample_over, spec)
    rows = np.arange(len(n_m)) if models is None else np.asarray(models, dtype=np.int64)
    ids = rows if stream_ids is None else np.asarray(stream_ids)[rows]
    gens = [g["sample"] for g in model_generators(seed, len(rows), stream_ids=ids)]
    sizes = batch_sizes([int(n_m[i]) for i in rows], [float(q[i]) for i in rows], gens, steps)
    return sizes.amax(0).numpy()


@dataclass(frozen=True)
class EpochView:
    """What an ``on_epoch`` observer of :func:`train_bank` sees: the epoch (1-based) and step just finished, the
    bank's live parameters (``name -> [M, *shape]``: read, never modify), and the per-model, per-group counts of
    per-sample gradients seen and clipped so far ([M, K], cumulative; zeros without clipping)."""

    epoch: int
    step: int
    params: dict[str, torch.Tensor]
    backend: Backend
    clipped: torch.Tensor
    seen: torch.Tensor

    @torch.no_grad()
    def losses(self, X, y, *, batch_size: int = 2048) -> np.ndarray:
        """[M, N] per-record cross-entropy of every model of the bank on (X, y), now."""
        ref = next(iter(self.params.values()))
        X, y = torch.as_tensor(np.asarray(X)).to(ref.dtype), torch.as_tensor(np.asarray(y)).long()
        out = []
        for s in range(0, len(y), batch_size):
            z = self.backend.forward(self.params, X[s:s + batch_size].to(ref.device))
            out.append(nn.functional.cross_entropy(z.transpose(1, 2), y[s:s + batch_size].to(z.device).expand(
                z.shape[0], -1), reduction="none").cpu())
        return torch.cat(out, 1).numpy()


def train_bank(X: np.ndarray, y: np.ndarray, group: np.ndarray, membership: np.ndarray, spec: TrainSpec, *,
               n_classes: int, n_groups: int, seed: int, device: str | None = None,
               progress: bool = True, desc: str | None = None, stream_ids: np.ndarray | None = None,
               sample_over: np.ndarray | None = None,
               module_factory: Callable[[], nn.Module] | None = None,
               models: np.ndarray | None = None, widths: np.ndarray | None = None,
               on_epoch: Callable[[EpochView], None] | None = None) -> TrainedBank:
    """Train M = membership.shape[0] models; model m on the records where ``membership[m]`` is True.

    X [n, ...] float32, y [n] int64, group [n] int64, membership [M, n] bool. Returns a :class:`TrainedBank`
    whose ``accounting[m]`` records σ_g, σ_b, σ_eff, q_m, T, δ, the accountant and ε spent by model m.

    Coupled models (PA-LOOA): ``stream_ids`` [M] gives models the same random streams, and ``sample_over``
    [M, n] ⊇ membership the set each model's Poisson sampler runs over (rate q_m = B / |sample_over_m|); records
    drawn outside the membership are dropped. Dropping is Poisson sampling of the members at the same rate, so
    a model trained on D∖{z} sees exactly the batches of its partner on D, minus z.

    ``module_factory``: a custom model (a callable returning a fresh ``nn.Module`` of one architecture) instead of
    ``spec.model``; its layers must be the engine's (:func:`~fairdp_core.engine.backends.check_module` raises
    :class:`~fairdp_core.engine.backends.UnsupportedModule` otherwise, naming them).

    ``models`` (int [M']): train only these rows of the bank, a shard (:mod:`~fairdp_core.engine.shard`). T and σ
    are still the whole bank's (T from the mean pool size over every row, σ calibrated at the largest q of every
    row), row m keeps stream ``stream_ids[m]`` (default m), and each step's batch is padded to the whole bank's
    width (``widths`` [T] from :func:`bank_widths`; None: computed here, from every row's sampling stream), so the
    matmuls have the whole bank's shapes and each row trains, bit for bit, as it does in the whole bank.

    ``on_epoch``: called with an :class:`EpochView` after each epoch's worth of steps (and after the last step); it
    observes the bank (e.g. :class:`~fairdp_core.audit.proxy.BankGroupProxy`) and draws no random numbers, so the
    bank trains to the same bits with or without it.
    """
    membership = np.asarray(membership, dtype=bool)
    if membership.ndim != 2 or membership.shape[1] != len(y):
        raise ValueError(f"membership must be [M, n={len(y)}], got {membership.shape}")
    masked = sample_over is not None
    sample_over = membership if sample_over is None else np.asarray(sample_over, dtype=bool)
    if sample_over.shape != membership.shape or (membership & ~sample_over).any():
        raise ValueError("sample_over must have the membership's shape and contain every member")
    dev = torch.device(device or "cpu")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but CUDA is not available")
    M = membership.shape[0]
    K = int(n_groups)  # public: never from the data (the noise scale is the max over ALL K groups' bounds)
    if len(group) and (group.min() < 0 or group.max() >= K):
        raise ValueError(f"group labels must lie in 0..{K - 1} (n_groups={K})")
    Xt, yt, gt = (torch.as_tensor(np.require(a, requirements="W")).to(dev) for a in (X, y, group))
    pools, n_m, q, steps = _schedule(sample_over, spec)  # q [M]
    sigma_g, sigma_b, sigma_s, sigma_eff = _sigmas(spec, float(q.max()), steps)  # calibrated at the largest q: safe for all
    if models is not None:  # a shard: T and σ above are the whole bank's; each row keeps its own stream id
        rows = np.asarray(models, dtype=np.int64)
        if rows.ndim != 1 or len(rows) == 0 or rows.min() < 0 or rows.max() >= M:
            raise ValueError(f"models must be a non-empty list of rows in 0..{M - 1}")
        if widths is None:
            widths = bank_widths(membership, spec, seed=seed, stream_ids=stream_ids, sample_over=sample_over)
        widths = torch.tensor(np.asarray(widths, dtype=np.int64))  # a copy: Ray hands workers read-only arrays
        if widths.shape != (steps,):
            raise ValueError(f"widths must be [T={steps}], got {tuple(widths.shape)}")
        stream_ids = rows if stream_ids is None else np.asarray(stream_ids)[rows]
        membership, sample_over = membership[rows], sample_over[rows]
        pools, n_m, q, M = [pools[i] for i in rows], n_m[rows], q[rows], len(rows)

    gens = model_generators(seed, M, release=release_key(spec), device=dev, stream_ids=stream_ids)
    member_t = torch.as_tensor(membership).to(dev) if masked else None
    input_shape = tuple(X.shape[1:])
    def fresh() -> nn.Module:
        if module_factory is not None:
            return module_factory()
        return build_model(spec.model, input_shape, n_classes, hidden=spec.hidden)

    modules = [_init_module(fresh(), g["init"]) for g in gens]
    params = {k: v.to(dev) for k, v in stack_params(modules).items()}
    backend = make_backend(modules[0].to(dev))
    rule = get_rule(spec.algorithm)
    policy = rule.policy(rule.view(spec), M, K, Sigmas(sigma_g, sigma_b, sigma_s, sigma_eff), gens, dev)
    sampler = PoissonBank(pools, q.tolist(), [g["sample"] for g in gens], widths=widths if models is not None else None)
    names = list(params)
    sizes = [params[n][0].numel() for n in names]
    noise_bank = _NoiseBank([g["noise"] for g in gens], sum(sizes), dev) if rule.private else None

    adam = _Adam(spec.lr) if spec.optimizer == "adam" else None
    private = not isinstance(policy, NoClip)
    clipped = torch.zeros(M, K, dtype=torch.float64, device=dev)
    seen = torch.zeros(M, K, dtype=torch.float64, device=dev)

    gram = policy.group_sums is not None and backend.reads_gram(K)
    cached = gram and backend.cache_inputs(Xt)

    def observe_group_sums(ctx, norms, gb, w, rows) -> None:
        """Per group, the sum of its per-sample gradients weighted by the policy's ``sum_factors``, to the policy:
        the sums [M, K, P], or their Gram matrix [M, K, K] where the backend reads that instead (``rows`` [M, W]:
        the batch's rows of X, for the inputs the backend cached)."""
        f = policy.sum_factors(norms) * w
        if gram:
            policy.observe_gram(backend.group_gram(ctx, f, gb, K, rows=rows if cached else None), gb, w,
                                dim=sum(sizes))
            return
        sums = backend.group_sums(ctx, f, gb, K)
        policy.observe_sums(torch.cat([sums[n].flatten(2) for n in names], 2), gb, w)
    x_sq_all = (Xt.flatten(1) ** 2).sum(1)  # ‖x‖² of every record, for the first layer's closed-form norms
    t0 = time.perf_counter()
    for t in tqdm(range(steps), desc=desc or f"{spec.algorithm} x{M}", disable=not progress, mininterval=1.0):
        idx, w = sampler.next()
        batch_rows = idx.to(dev)
        flat = batch_rows.flatten()
        w = w.to(dev)
        if member_t is not None:
            w = w * member_t.gather(1, idx.to(dev))
        xb = Xt.index_select(0, flat).view(*idx.shape, *Xt.shape[1:])
        yb, gb = yt.index_select(0, flat).view(idx.shape), gt.index_select(0, flat).view(idx.shape)
        with torch.no_grad():
            if private:
                norms, ctx = backend.per_sample(params, xb, yb, x_sq=x_sq_all.index_select(0, flat).view(idx.shape))
                if policy.group_sums == "before":
                    observe_group_sums(ctx, norms, gb, w, batch_rows)
                policy.before_step(norms, gb, w)
                bounds = policy.bounds()
                factors = policy.factors(norms, gb, bounds) * w
                seen.scatter_add_(1, gb, w.double())
                clipped.scatter_add_(1, gb, ((norms > bounds.gather(1, gb)) * w).double())
                grads = backend.clipped_sum(ctx, factors)
                std = policy.noise_std()  # [M], bounds before this step's update
                noise = noise_bank.next() * std[:, None]
                for n, chunk in zip(names, torch.split(noise, sizes, dim=1)):
                    grads[n] += chunk.view_as(grads[n])
                policy.update(norms, gb, w)
                if policy.group_sums == "after":
                    observe_group_sums(ctx, norms, gb, w, batch_rows)
            else:
                grads = backend.batch_grad(params, xb, yb, w)
            if adam is None:
                for n in names:
                    params[n].sub_(grads[n], alpha=spec.lr / spec.batch_size)
            else:
                adam.step(params, grads, 1.0 / spec.batch_size)
        if on_epoch is not None and (int((t + 1) * spec.epochs / steps) > int(t * spec.epochs / steps)
                                     or t == steps - 1):
            last = math.ceil(spec.epochs - 1e-9)  # a final partial epoch (epochs = 2.5) is epoch 3
            epoch = last if t == steps - 1 else max(1, int((t + 1) * spec.epochs / steps))
            on_epoch(EpochView(epoch=epoch, step=t + 1, params=params, backend=backend, clipped=clipped, seen=seen))
    seconds = time.perf_counter() - t0

    spent = {qm: epsilon(sigma_eff, sample_rate=qm, steps=steps, delta=spec.delta, accountant=spec.accountant,
                         target_epsilon=spec.target_epsilon)
             for qm in set(q.tolist())}  # σ_eff = 0 (SGD) gives ε = ∞
    accounting = [Accounting(
        algorithm=spec.algorithm, sigma_g=sigma_g, sigma_b=sigma_b, sigma_s=sigma_s, sigma_eff=sigma_eff,
        sample_rate=float(q[m]),
        steps=steps, delta=spec.delta, accountant=spec.accountant, epsilon=spent[float(q[m])],
        target_epsilon=spec.target_epsilon, guaranteed=policy.guaranteed and rule.private,
        public_assumptions=_public_assumptions(spec),
    ) for m in range(M)]
    return TrainedBank(spec=spec, input_shape=input_shape, n_classes=n_classes,
                       params={k: v.cpu() for k, v in params.items()}, accounting=accounting,
                       membership=membership, policy_state={k: v.cpu() for k, v in policy.state().items()},
                       clip_stats={"clipped": clipped.cpu(), "seen": seen.cpu()} if private else {}, steps=steps,
                       seconds=seconds, seed=seed, factory=module_factory)

