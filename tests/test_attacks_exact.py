"""The attacks' shared-sort fast paths against the slow references (tests/attack_references.py: each column or row
sorted afresh), bit for bit, on banks with many tied scores: the null-corrected estimator (one sort for all its
permutations) and PA-GBA (each group read off the rows sorted once, for its fit and its null floor's refits)."""

from __future__ import annotations

import numpy as np
import pytest

from fairdp_core.audit import attacks

from . import attack_references as ref


def _bank(seed: int, M: int, m: int, *, decimals: int = 1):
    rng = np.random.default_rng(seed)
    mem = np.zeros((M, m), bool)
    for j in range(0, M, 2):
        half = rng.permutation(m) < m // 2
        mem[j], mem[j + 1] = half, ~half
    scores = np.round(rng.normal(size=(M, m)) + 0.4 * mem, decimals)  # rounded: ties in every column and row
    return scores, mem, rng.integers(0, 3, m)


@pytest.mark.parametrize("seed,M,m", [(0, 8, 50), (1, 16, 300), (2, 40, 501)])
def test_fast_paths_equal_the_references_bit_for_bit(seed, M, m):
    s, mem, g = _bank(seed, M, m)
    for got, want in zip(attacks.best_cut(s, mem), ref.best_cut(s, mem)):
        assert np.array_equal(got, want)
    fast = attacks.null_corrected_advantage(s, mem, rng=np.random.default_rng(9), n_null=7)
    slow = ref.null_corrected_advantage(s, mem, rng=np.random.default_rng(9), n_null=7)
    assert np.array_equal(fast, slow)
    assert np.array_equal(attacks.gba_predictions(s, mem, g), ref.gba_predictions(s, mem, g))
    rows = attacks.sort_rows(s)
    for perm_seed in range(3):  # the null floor's refits: permuted groups, rows sorted once
        pg = np.random.default_rng(perm_seed).permutation(g)
        assert np.array_equal(attacks.gba_predictions(s, mem, pg, presorted=rows), ref.gba_predictions(s, mem, pg))


def test_a_stale_sort_is_caught():
    """The check can fail: rows sorted for other scores give other thresholds."""
    s, mem, g = _bank(3, 16, 300)
    stale = attacks.sort_rows(s[::-1])
    assert not np.array_equal(attacks.gba_predictions(s, mem, g, presorted=stale), ref.gba_predictions(s, mem, g))
