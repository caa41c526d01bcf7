"""Thread plumbing shared by the attacks and the audit: the thread budget (:func:`threads`), an ordered parallel map
with bounded look-ahead (:func:`ordered_map`), and block-wise work over a large array (:func:`in_blocks`)."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def threads() -> int:
    """Threads for the attacks' independent pieces (permutations, reference models): ``FAIRDP_ATTACK_THREADS`` if
    set, else the CPUs this process may use, capped by ``OMP_NUM_THREADS`` when set (a campaign that runs one thread
    a process sets it to 1) and at 4: each thread holds about 25 bytes per (model, record) of the bank (about
    150 MB at the paper's Law design, M = 400 by m = 16,432), so memory grows with it. numpy releases the GIL in the
    sorts, gathers and sums."""
    if os.environ.get("FAIRDP_ATTACK_THREADS"):
        return max(1, int(os.environ["FAIRDP_ATTACK_THREADS"]))
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) > 0:
        n = min(n, int(omp))
    return max(1, min(4, n))


def ordered_map(fn: Callable, items, *, ahead: int | None = None) -> list:
    """``[fn(x) for x in items]``, computed on :func:`threads` threads, returned in order. ``items`` is consumed in
    order on the calling thread (a generator drawing from an rng draws exactly what the loop would), at most
    ``ahead`` (default 2 per thread) items ahead of the results, so memory stays bounded."""
    n = threads()
    if n == 1:
        return [fn(x) for x in items]
    ahead = ahead or 2 * n
    out, pending = [], deque()
    with ThreadPoolExecutor(n, thread_name_prefix="fairdp-attack") as pool:
        for x in items:
            pending.append(pool.submit(fn, x))
            if len(pending) >= ahead:
                out.append(pending.popleft().result())
        out += [f.result() for f in pending]
    return out


BLOCK_MIN_CELLS = 1 << 18  # below this many elements, :func:`in_blocks` runs one block (threads cost more)


def in_blocks(fn: Callable[[slice], None], n: int, *, cells: int) -> None:
    """``fn(block)`` for contiguous blocks of ``range(n)`` that cover it once, on :func:`threads` threads: one block
    a thread, or one in all when the work's array (``cells`` elements) is under :data:`BLOCK_MIN_CELLS`. For work
    done column by column (or model by model) that writes its own part of preallocated outputs: each column sees
    the same operations on the same values whatever its block, so the same bits on any number of threads."""
    k = min(threads(), n) if cells >= BLOCK_MIN_CELLS else 1
    edges = np.linspace(0, n, k + 1).astype(int)
    ordered_map(fn, [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])])
