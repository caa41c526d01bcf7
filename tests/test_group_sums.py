"""The per-group clipped sums in one pass (Backend.group_sums; the paper rule's statistics) equal K passes of the
clipped sum with the group's factors only: every engine backend, K ∈ {2, 5, 10}, groups of very different sizes,
a group absent from every model's batch, another absent from one model's, and batch padding (factor 0)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairdp_core.engine.backends import Backend, DenseBackend, LayerBackend, group_segments, make_backend
from fairdp_core.models import build_model


def _batch(K: int, M: int, W: int, seed: int = 0):
    """groups with shares falling geometrically (group 0 about half of every batch, the last ones rare), group K-1
    absent from every batch, group 1 absent from model 0's, and the last fifth of each row batch padding."""
    rng = np.random.default_rng(seed)
    p = 0.5 ** np.arange(K - 1)
    g = rng.choice(K - 1, size=(M, W), p=p / p.sum())
    g[0][g[0] == 1] = 0
    w = np.ones((M, W), np.float32)
    w[:, -W // 5:] = 0.0
    f = rng.uniform(0.1, 1.0, (M, W)).astype(np.float32) * w
    return torch.as_tensor(g), torch.as_tensor(f)


def _k_passes(backend, ctx, f, g, K):
    return Backend.group_sums(backend, ctx, f, g, K)


@pytest.mark.parametrize("K", [2, 3, 5, 10])
@pytest.mark.parametrize("model", ["lr", "mlp", "cnn"])
def test_one_pass_group_sums_equal_k_passes(model, K):
    torch.manual_seed(0)
    M, W = 3, 40
    shape = (1, 28, 28) if model == "cnn" else (12,)
    backend = make_backend(build_model(model, shape, 10, hidden=16))
    assert isinstance(backend, LayerBackend if model == "cnn" else DenseBackend)
    params = {k: v.unsqueeze(0).repeat(M, *[1] * v.dim()) + 0.05 * torch.randn(M, *v.shape)
              for k, v in build_model(model, shape, 10, hidden=16).named_parameters()}
    x = torch.randn(M, W, *shape)
    y = torch.randint(0, 10, (M, W))
    g, f = _batch(K, M, W)
    _, ctx = backend.per_sample({k: v.detach() for k, v in params.items()}, x, y)
    got = backend.group_sums(ctx, f, g, K)
    want = _k_passes(backend, ctx, f, g, K)
    assert got.keys() == want.keys()
    for n in want:
        assert got[n].shape == want[n].shape == (M, K, *params[n].shape[1:]), n
        torch.testing.assert_close(got[n], want[n], rtol=1e-4, atol=1e-5)
        assert torch.count_nonzero(got[n][:, K - 1]) == 0 and torch.count_nonzero(got[n][0, 1]) == 0  # absent
    # the K sums add up to the one clipped sum with every factor
    full = backend.clipped_sum(ctx, f)
    for n in full:
        torch.testing.assert_close(got[n].sum(1), full[n], rtol=1e-4, atol=1e-5)


def test_group_segments_by_hand():
    """Two models, K = 3: each row's group-k samples in batch order, padded with factor 0 to the longest row;
    batch padding (factor 0) left out; a group no model holds is None."""
    g = torch.tensor([[1, 0, 1, 0, 1], [0, 0, 0, 1, 1]])
    f = torch.tensor([[0.1, 0.2, 0.3, 0.0, 0.5], [0.6, 0.7, 0.8, 0.9, 0.0]])
    segs = group_segments(f, g, 3)
    (s0, f0), (s1, f1), none = segs
    assert none is None
    assert s0.shape == (2, 3) and s0[0, :1].tolist() == [1] and s0[1].tolist() == [0, 1, 2]
    torch.testing.assert_close(f0, torch.tensor([[0.2, 0.0, 0.0], [0.6, 0.7, 0.8]]))
    assert s1.shape == (2, 3) and s1[0].tolist() == [0, 2, 4] and s1[1, :1].tolist() == [3]
    torch.testing.assert_close(f1, torch.tensor([[0.1, 0.3, 0.5], [0.9, 0.0, 0.0]]))
