"""Independent Poisson sampling for a bank of M models, each from its own generator.

Poisson sampling with rate q includes every (step, record) pair independently with probability q. Over a block
of K steps and a pool of n records that is a Bernoulli process on the K·n grid, drawn exactly from its gaps:
successive inclusions are Geometric(q) apart, so positions = cumsum(G) − 1 with G_j ~ Geometric(q) on {1, 2, ...};
position p is record p mod n at step p // n. One call draws a model's whole block, with no duplicates to reject.
Draws are made per model, so model m's batches depend only on its own generator, never on how many models are
trained beside it.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["PoissonBank", "batch_sizes", "bernoulli_positions"]


def bernoulli_positions(size: int, q: float, generator: torch.Generator) -> torch.Tensor:
    """Sorted positions in [0, size) of a Bernoulli(q) process, int64 [~q·size]: cumulative Geometric(q) gaps."""
    if q >= 1.0:
        return torch.arange(size)
    chunks, last = [], -1
    expected = size * q
    while True:
        n = int(expected + 6 * math.sqrt(expected) + 16)
        gaps = torch.empty(n, dtype=torch.float64).geometric_(q, generator=generator)
        pos = last + torch.cumsum(gaps, 0)
        chunks.append(pos)
        last = float(pos[-1])
        if last >= size:
            break
        expected = (size - last) * q
    pos = torch.cat(chunks) if len(chunks) > 1 else chunks[0]
    return pos[: int(torch.searchsorted(pos, float(size)))].to(torch.int64)  # sorted: the positions below size


def batch_sizes(pool_sizes: list[int], sample_rate: list[float], generators: list[torch.Generator], steps: int, *,
                block: int = 32) -> torch.Tensor:
    """[M, steps] int64: the sizes of the Poisson batches :class:`PoissonBank` draws from the same generators (the
    same draws, in the same order, without building the batches). Their max over models at step t is the padded
    width W_t of a bank's step t."""
    out = torch.zeros(len(pool_sizes), steps, dtype=torch.int64)
    for m, (n, q, g) in enumerate(zip(pool_sizes, sample_rate, generators)):
        for s in range(0, steps, block):
            pos = bernoulli_positions(block * n, q, g)
            out[m, s:s + block] = torch.bincount(pos // max(n, 1), minlength=block)[: steps - s]
    return out


class PoissonBank:
    """Per-model Poisson batches over per-model pools.

    ``pools``: list of M int64 tensors of global record indices (each model's training subset).
    ``sample_rate``: list of M rates q_m. ``generators``: M ``torch.Generator`` (one stream per model).
    :meth:`next` returns (indices [M, W] int64 into the global data, weights [M, W] float32 in {0, 1}); padding
    entries have weight 0 and index 0.

    ``widths`` ([steps] int, optional): pad step t to at least ``widths[t]`` entries. A shard of a bank passes the
    whole bank's widths, so that its matmuls see the shapes, and give the bits, of the whole bank's.
    """

    def __init__(self, pools: list[torch.Tensor], sample_rate: list[float], generators: list[torch.Generator],
                 *, block: int = 32, widths: torch.Tensor | None = None) -> None:
        if not (len(pools) == len(sample_rate) == len(generators)):
            raise ValueError("pools, sample_rate and generators must have one entry per model")
        self.pools = pools
        self.q = sample_rate
        self.gens = generators
        self.block = block
        self.M = len(pools)
        n_max = max(len(p) for p in pools)
        self._pool_pad = torch.zeros(self.M, max(n_max, 1), dtype=torch.int64)
        for m, p in enumerate(pools):
            self._pool_pad[m, : len(p)] = p
        self._buf: torch.Tensor | None = None  # [M, block, W] global record indices (0 where padding)
        self._valid: torch.Tensor | None = None
        self._t = block
        self.widths = widths
        self._step = 0

    def _refill(self) -> None:
        """Every model's next ``block`` batches, as global record indices [M, block, W] and validity: each model's
        positions drawn from its own generator, then placed for all models at once."""
        K, M = self.block, self.M
        pos = [bernoulli_positions(K * len(p), q, g).numpy() for p, q, g in zip(self.pools, self.q, self.gens)]
        lens = np.array([len(p) for p in pos])
        pos = np.concatenate(pos)
        n = np.repeat(np.array([max(len(p), 1) for p in self.pools]), lens)
        step = pos // n
        key = np.repeat(np.arange(M) * K, lens) + step  # nondecreasing: positions are sorted within a model
        counts = np.bincount(key, minlength=M * K)
        W = int(counts.max()) if len(pos) else 0
        flat = key * W + np.arange(len(pos)) - np.repeat(np.cumsum(counts) - counts, counts)  # (model, step, rank)
        row = np.repeat(np.arange(M) * self._pool_pad.shape[1], lens)
        buf = np.zeros(M * K * W, dtype=np.int64)
        valid = np.zeros(M * K * W, dtype=bool)
        buf[flat] = self._pool_pad.numpy().ravel()[row + pos - step * n]
        valid[flat] = True
        self._buf, self._valid = torch.from_numpy(buf).view(M, K, W), torch.from_numpy(valid).view(M, K, W)
        self._t = 0

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._t >= self.block:
            self._refill()
        idx, valid = self._buf[:, self._t], self._valid[:, self._t]
        self._t += 1
        W = int(valid.sum(1).max()) if valid.numel() else 0
        idx, valid = idx[:, :W], valid[:, :W]
        weights = valid.to(torch.float32)
        if self.widths is not None:
            pad = int(self.widths[self._step]) - W
            if pad < 0:
                raise ValueError(f"step {self._step}: a batch of {W} exceeds the given width {int(self.widths[self._step])}")
            idx, weights = (torch.nn.functional.pad(a, (0, pad)) for a in (idx, weights))
        self._step += 1
        return idx, weights
