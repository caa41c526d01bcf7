"""A bank split into shards of rows, trained in parallel: worker processes here (joblib/loky) or Ray tasks.

Model m's result depends only on its own streams (seed, stream id m), on the bank's T and σ, which every shard
computes from the whole membership, and on the padded width of each step's batches (the largest Poisson batch
among the models trained together), which sets how the matmuls block their reductions and so the last float bit.
Two rounds: each shard counts its rows' batch sizes (:func:`~fairdp_core.engine.trainer.bank_widths`), the max
over shards is the whole bank's widths, then each shard trains its rows padded to them
(``train_bank(models=rows, widths=...)``). The shards, concatenated in row order, are then the bank a single
process trains, bit for bit (tests/test_shard.py). Shards are contiguous row ranges, one per worker; each worker
runs ``threads`` torch threads (docs/performance.md: two processes of one thread beat one process of two).

Executors: ``serial`` (this process, no shards), ``loky`` (joblib's reusable process pool: large arrays reach the
workers memory-mapped), ``ray`` (one Ray task per shard, the data put in Ray's object store once; ``ray_address``
``None`` or ``"local"`` starts a local Ray sized to the shards, ``"auto"`` or ``host:port`` joins a running cluster).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Literal

import numpy as np
import torch

from .spec import TrainSpec
from .trainer import TrainedBank, bank_widths, train_bank

__all__ = ["Executor", "ShardError", "concat_banks", "shard_rows", "train_bank_sharded"]

Executor = Literal["serial", "loky", "ray"]


class ShardError(RuntimeError):
    """The executor cannot run: Ray missing or unreachable, or a worker failed (the cause is chained)."""


def shard_rows(M: int, shards: int) -> list[np.ndarray]:
    """Contiguous row ranges [M] -> ``min(shards, M)`` int64 arrays whose sizes differ by at most one."""
    if M <= 0 or shards <= 0:
        raise ValueError(f"need M > 0 and shards > 0, got M={M}, shards={shards}")
    return [r.astype(np.int64) for r in np.array_split(np.arange(M), min(shards, M))]


def concat_banks(parts: list[TrainedBank], *, spec: TrainSpec | None = None) -> TrainedBank:
    """The shards of one bank, in row order, as one :class:`TrainedBank` (parameters, accounting, membership,
    policy state and clipping diagnostics are all per model: concatenated along the model axis). ``spec``: the
    caller's own TrainSpec object (equal to the shards'), kept as the bank's, so that the merged bank saves to the
    bytes the single-process bank saves to (pickle writes a string once per object: which strings are one object
    is part of the bytes, and the shards' copies came back from other processes)."""
    if not parts:
        raise ValueError("no shards to concatenate")
    first = parts[0]
    if any(p.spec != first.spec or p.steps != first.steps or p.seed != first.seed for p in parts):
        raise ValueError("shards of different banks (spec, steps or seed differ)")

    def cat(dicts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return {k: torch.cat([d[k] for d in dicts]) for k in dicts[0]} if dicts[0] else {}

    if spec is not None and spec != first.spec:
        raise ValueError("spec is not the shards' spec")
    spec = first.spec if spec is None else spec
    return TrainedBank(spec=spec, input_shape=first.input_shape, n_classes=first.n_classes,
                       params=cat([p.params for p in parts]),
                       accounting=_one_object_per_string([a for p in parts for a in p.accounting], spec),
                       membership=np.concatenate([p.membership for p in parts]),
                       policy_state=cat([p.policy_state for p in parts]),
                       clip_stats=cat([p.clip_stats for p in parts]), steps=first.steps,
                       seconds=max(p.seconds for p in parts), seed=first.seed, factory=first.factory)


def _one_object_per_string(accounting: list, spec: TrainSpec) -> list:
    """The accounting with equal strings as one object, the spec's where it has one, as in a bank trained in one
    process (its models share the spec's strings and the code's; shards come back from their workers with copies
    of their own). Pickle memoises by identity: this makes a merged bank save to the single-process bytes."""
    seen: dict[str, str] = {v: v for v in vars(spec).values() if isinstance(v, str)}

    def one(v):
        if isinstance(v, str):
            return seen.setdefault(v, v)
        return tuple(one(x) for x in v) if isinstance(v, tuple) else v

    return [dataclasses.replace(a, **{f.name: one(getattr(a, f.name)) for f in dataclasses.fields(a)})
            for a in accounting]


def _train_shard(X, y, group, membership, spec, rows, widths, kwargs, threads) -> TrainedBank:
    """One shard, in a worker: ``threads`` torch threads, then ``train_bank(models=rows, widths=widths)``."""
    torch.set_num_threads(threads)
    return train_bank(X, y, group, membership, spec, models=rows, widths=widths, **kwargs)


def _shard_widths(membership, spec, rows, kwargs) -> np.ndarray:
    """Round one, in a worker: [T] the largest batch per step among the shard's rows."""
    torch.set_num_threads(1)
    return bank_widths(membership, spec, seed=kwargs["seed"], stream_ids=kwargs["stream_ids"],
                       sample_over=kwargs["sample_over"], models=rows)


def train_bank_sharded(X: np.ndarray, y: np.ndarray, group: np.ndarray, membership: np.ndarray, spec: TrainSpec, *,
                       n_classes: int, n_groups: int, seed: int, device: str | None = None, progress: bool = True,
                       desc: str | None = None, stream_ids: np.ndarray | None = None,
                       sample_over: np.ndarray | None = None,
                       module_factory: Callable[[], torch.nn.Module] | None = None,
                       workers: int = 1, executor: Executor = "loky", ray_address: str | None = None,
                       threads: int = 1, gpus_per_worker: float = 0.0) -> TrainedBank:
    """:func:`~fairdp_core.engine.trainer.train_bank` over ``workers`` shards of rows, run by ``executor``.

    Arguments as ``train_bank``'s (X [n, ...], membership [M, n], ...); returns the same bank (M models, in row
    order). ``workers`` 1 with loky, or ``executor`` "serial", trains in this process (its torch threads as they
    are). ``threads``: torch threads per worker. ``gpus_per_worker``: Ray's ``num_gpus`` per task (a fraction
    shares a GPU); Ray only. ``seconds`` of the result is the wall time of the whole call.
    """
    membership = np.asarray(membership, dtype=bool)
    M = membership.shape[0] if membership.ndim == 2 else 0
    kwargs = dict(n_classes=n_classes, n_groups=n_groups, seed=seed, device=device, stream_ids=stream_ids,
                  sample_over=sample_over, module_factory=module_factory)
    if workers < 1 or threads < 1:
        raise ValueError(f"workers and threads must be positive, got workers={workers}, threads={threads}")
    if executor not in ("serial", "loky", "ray"):
        raise ValueError(f"unknown executor {executor!r}: serial, loky or ray")
    if workers == 1 and executor != "ray" or executor == "serial" or M <= 1:
        return train_bank(X, y, group, membership, spec, progress=progress, desc=desc, **kwargs)
    shards = shard_rows(M, workers)
    n = len(shards)
    label = desc or f"{spec.algorithm} x{M}"
    t0 = time.perf_counter()
    run = _Loky(n, threads) if executor == "loky" else _Ray(ray_address, n, threads, gpus_per_worker)
    widths = np.max(run.map(_shard_widths, [(membership, spec, rows, kwargs) for rows in shards],
                            shared=(membership,)), axis=0)
    calls = [(X, y, group, membership, spec, rows, widths,
              {**kwargs, "progress": progress and executor == "loky", "desc": f"{label} [shard {i + 1}/{n}]"}, threads)
             for i, rows in enumerate(shards)]
    parts = run.map(_train_shard, calls, shared=(X, y, group, membership), progress=progress, label=label)
    bank = concat_banks(parts, spec=spec)
    bank.seconds = time.perf_counter() - t0
    return bank


class _Loky:
    """joblib's reusable loky pool: large arrays reach the workers memory-mapped; each worker prints its own bar."""

    def __init__(self, n: int, threads: int) -> None:
        self.n, self.threads = n, threads

    def map(self, fn, calls, *, shared=(), progress=False, label="") -> list:
        from joblib import Parallel, delayed

        # inner_max_num_threads: the workers' BLAS/OpenMP pools at `threads` (torch.set_num_threads does the rest)
        with Parallel(n_jobs=self.n, backend="loky", inner_max_num_threads=self.threads) as par:
            return par(delayed(fn)(*c) for c in calls)


class _Ray:
    """One Ray task per call; arrays named in ``shared`` go to the object store once; a bar counts finished shards."""

    def __init__(self, address: str | None, n: int, threads: int, gpus: float) -> None:
        ray_connect(address, num_cpus=n * threads)
        self.threads, self.gpus = threads, gpus

    def map(self, fn, calls, *, shared=(), progress=False, label="") -> list:
        import ray
        from tqdm.auto import tqdm

        refs = {id(a): ray.put(a) for a in shared}  # top-level ObjectRef arguments reach the task as the arrays
        task = ray.remote(fn).options(num_cpus=self.threads, num_gpus=self.gpus, max_retries=0)
        futures = [task.remote(*[refs.get(id(a), a) for a in c]) for c in calls]
        pending = list(futures)
        with tqdm(total=len(futures), desc=f"{label} (Ray shards)", disable=not progress, unit="shard") as bar:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                bar.update(len(done))
        try:
            return ray.get(futures)
        except Exception as e:
            raise ShardError(f"a Ray task ({fn.__name__}) of {label or 'a sharded bank'} failed: "
                             f"{type(e).__name__}: {e}") from e


def ray_connect(address: str | None, num_cpus: int) -> None:
    """Connect to Ray once per process: ``None``/"local" starts a local Ray with ``num_cpus`` CPUs, anything else
    (``"auto"``, ``host:port``, ``ray://host:port``) joins that cluster. Raises :class:`ShardError` saying why."""
    try:
        import ray
    except ImportError as e:
        raise ShardError("Ray is not installed in this environment: pip install 'fairdp_core[cluster]' "
                         "(or `pip install ray`)") from e
    if ray.is_initialized():
        return
    env = {k: os.environ[k] for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MKL_CBWR",
                                         "ATEN_CPU_CAPABILITY", "OPENBLAS_CORETYPE")
           if k in os.environ}  # the stage's allocator, MKL and kernel settings, in every Ray worker
    try:
        if address in (None, "local"):
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=True,
                     runtime_env={"env_vars": env} if env else None)
        else:
            ray.init(address=address, runtime_env={"env_vars": env} if env else None)
    except Exception as e:  # ConnectionError, RuntimeError, ValueError: Ray's own types vary by version
        raise ShardError(f"cannot connect to Ray at {address!r}: {type(e).__name__}: {e}") from e
