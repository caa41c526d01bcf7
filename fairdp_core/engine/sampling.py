"""Independent Poisson sampling for a bank of M models, each from its own generator.

Poisson sampling with rate q over a pool of n_m records is drawn exactly as: the batch size
b ~ Binomial(n_m, q), then a uniformly random b-subset of the pool. The subset is the first b distinct values of
a stream of uniform draws with replacement (rejecting repeats yields a uniform random ordered sample without
replacement). Draws are made per model in blocks of steps, so model m's batches depend only on its own
generator, never on how many models are trained beside it.
"""

from __future__ import annotations

import math

import torch

__all__ = ["PoissonBank", "distinct_prefix"]


def distinct_prefix(draws: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each row of ``draws`` [S, L] (ints), the first ``counts[s]`` distinct values in order of appearance.

    Returns (values [S, W], valid [S, W] bool) with W = max(counts); a row with fewer distinct values than its
    count has ``valid.sum(1) < counts`` (the caller redraws it).
    """
    S, L = draws.shape
    sorted_vals, order = torch.sort(draws, dim=1, stable=True)
    first_sorted = torch.ones_like(sorted_vals, dtype=torch.bool)
    first_sorted[:, 1:] = sorted_vals[:, 1:] != sorted_vals[:, :-1]
    first = torch.empty_like(first_sorted).scatter_(1, order, first_sorted)  # first occurrence, original order
    keep = first & (torch.cumsum(first, dim=1) <= counts[:, None])
    W = int(counts.max()) if S else 0
    pos = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)[:, :W]  # kept positions first, in order
    return draws.gather(1, pos), keep.gather(1, pos)


class PoissonBank:
    """Per-model Poisson batches over per-model pools.

    ``pools``: list of M int64 tensors of global record indices (each model's training subset).
    ``sample_rate``: list of M rates q_m. ``generators``: M ``torch.Generator`` (one stream per model).
    :meth:`next` returns (indices [M, W] int64 into the global data, weights [M, W] float32 in {0, 1}); padding
    entries have weight 0 and index 0.
    """

    def __init__(self, pools: list[torch.Tensor], sample_rate: list[float], generators: list[torch.Generator],
                 *, block: int = 32) -> None:
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
        self._buf: torch.Tensor | None = None  # [M, block, W] local indices
        self._valid: torch.Tensor | None = None
        self._t = block

    def _draw_block(self, m: int) -> tuple[torch.Tensor, torch.Tensor]:
        n, q, g = len(self.pools[m]), self.q[m], self.gens[m]
        if n == 0:
            return torch.zeros(self.block, 0, dtype=torch.int64), torch.zeros(self.block, 0, dtype=torch.bool)
        counts = torch.binomial(torch.full((self.block,), float(n)), torch.full((self.block,), q), generator=g)
        counts = counts.to(torch.int64)
        # With b of n drawn, about b²/2n repeats are expected; draw a margin on top so redraws are rare.
        b_max = int(counts.max())
        L = b_max + 8 + int(4 * b_max * b_max / n) + int(4 * math.sqrt(b_max))
        draws = torch.randint(n, (self.block, L), generator=g)
        vals, valid = distinct_prefix(draws, counts)
        short = valid.sum(1) < counts
        for s in torch.nonzero(short).flatten().tolist():  # rare: not enough distinct values in the row
            row = torch.randperm(n, generator=g)[: int(counts[s])]
            vals[s, : len(row)], valid[s, : len(row)] = row, True
        return vals, valid

    def _refill(self) -> None:
        blocks = [self._draw_block(m) for m in range(self.M)]
        W = max(v.shape[1] for v, _ in blocks)
        self._buf = torch.zeros(self.M, self.block, W, dtype=torch.int64)
        self._valid = torch.zeros(self.M, self.block, W, dtype=torch.bool)
        for m, (v, ok) in enumerate(blocks):
            self._buf[m, :, : v.shape[1]] = v
            self._valid[m, :, : v.shape[1]] = ok
        self._t = 0

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._t >= self.block:
            self._refill()
        local, valid = self._buf[:, self._t], self._valid[:, self._t]
        self._t += 1
        W = int(valid.sum(1).max()) if valid.numel() else 0
        local, valid = local[:, :W], valid[:, :W]
        idx = self._pool_pad.gather(1, local) * valid
        return idx, valid.to(torch.float32)
