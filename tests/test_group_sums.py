"""The paper rules' per-group statistics against K passes of the clipped sum with the group's factors only: the CNN
backend's one-pass sums (Backend.group_sums), and the dense backend's Gram matrix of the sums (group_gram, both of
its routes), for K ∈ {2, 3, 5, 10}, groups of very different sizes, a group absent from every model's batch, another
absent from one model's, and batch padding (factor 0)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairdp_core.engine.backends import Backend, DenseBackend, LayerBackend, make_backend
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


def _setup(model: str, shape: tuple[int, ...], K: int, M: int = 3, W: int = 40):
    torch.manual_seed(0)
    backend = make_backend(build_model(model, shape, 10, hidden=16))
    params = {k: v.unsqueeze(0).repeat(M, *[1] * v.dim()) + 0.05 * torch.randn(M, *v.shape)
              for k, v in build_model(model, shape, 10, hidden=16).named_parameters()}
    x = torch.randn(M, W, *shape)
    y = torch.randint(0, 10, (M, W))
    g, f = _batch(K, M, W)
    _, ctx = backend.per_sample({k: v.detach() for k, v in params.items()}, x, y)
    return backend, params, ctx, g, f


@pytest.mark.parametrize("K", [2, 3, 5, 10])
def test_cnn_one_pass_group_sums_equal_k_passes(K):
    backend, params, ctx, g, f = _setup("cnn", (1, 28, 28), K)
    M = g.shape[0]
    assert isinstance(backend, LayerBackend) and not backend.reads_gram(K)
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


@pytest.mark.parametrize("K", [2, 3, 5, 10])
@pytest.mark.parametrize(("model", "width"), [("lr", 12), ("mlp", 12), ("mlp", 300)])
def test_dense_group_gram_equals_the_gram_of_the_k_sums(model, width, K):
    """float64 inner products of the K-pass sums (the reference) against group_gram. A layer takes the pairs route
    where W·(in + out) < K·in·out, so both routes run here: sums for LR at K ≤ 5 and for the MLP at width 300 and
    K = 2, pairs for LR at K = 10 and for the MLP's first layer at width 300 and K = 10. A group absent everywhere
    has a zero row and column."""
    backend, _params, ctx, g, f = _setup(model, (width,), K)
    assert isinstance(backend, DenseBackend) and backend.reads_gram(K) == (K > 2)
    sums = _k_passes(backend, ctx, f, g, K)
    flat = torch.cat([v.flatten(2) for v in sums.values()], 2).double()
    want = torch.bmm(flat, flat.transpose(1, 2))
    got = backend.group_gram(ctx, f, g, K)
    assert got.dtype == torch.float64 and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6 * want.abs().max().item())
    assert torch.count_nonzero(got[:, K - 1]) == 0 and torch.count_nonzero(got[0, 1]) == 0


@pytest.mark.parametrize("K", [3, 5, 10])
@pytest.mark.parametrize(("model", "shape"), [("lr", (12,)), ("mlp", (300,)), ("mlp", (1, 4, 5))])
def test_dense_group_gram_from_cached_inputs_equals_the_gram_of_the_k_sums(model, shape, K, monkeypatch):
    """The first layer's input pairs gathered from the n × n cache (cache_inputs, the batch's ``rows`` of X) give
    the K-pass reference's Gram matrix, also for image-shaped inputs (flattened in the forward pass's order); the
    batch's rows of X off by one row do not (the check can fail); above INPUT_PAIRS_MAX_N nothing is cached and the
    per-step route gives the same matrix."""
    M, W, n = 3, 40, 90
    torch.manual_seed(1)
    backend = make_backend(build_model(model, shape, 10, hidden=16))
    params = {k: v.detach().unsqueeze(0).repeat(M, *[1] * v.dim()) + 0.05 * torch.randn(M, *v.shape)
              for k, v in build_model(model, shape, 10, hidden=16).named_parameters()}
    X = torch.randn(n, *shape)
    rows = torch.stack([torch.randperm(n)[:W] for _ in range(M)])
    y = torch.randint(0, 10, (M, W))
    g, f = _batch(K, M, W)
    _, ctx = backend.per_sample(params, X[rows], y)
    sums = _k_passes(backend, ctx, f, g, K)
    flat = torch.cat([v.flatten(2) for v in sums.values()], 2).double()
    want = torch.bmm(flat, flat.transpose(1, 2))
    tol = {"rtol": 1e-5, "atol": 1e-6 * want.abs().max().item()}
    assert backend.cache_inputs(X)
    torch.testing.assert_close(backend.group_gram(ctx, f, g, K, rows=rows), want, **tol)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(backend.group_gram(ctx, f, g, K, rows=(rows + 1) % n), want, **tol)
    monkeypatch.setattr(DenseBackend, "INPUT_PAIRS_MAX_N", n - 1)
    assert not backend.cache_inputs(X)
    torch.testing.assert_close(backend.group_gram(ctx, f, g, K, rows=rows), want, **tol)


def test_float64_products_go_through_numpys_blas_at_torchs_thread_count(monkeypatch):
    """The Gram route's float64 products (engine/backends.py ``_f64_bmm``, numerics version 5): torch.bmm's values to
    float64 rounding (a float32 product would miss by about 1e-7), on transposed views, as a fresh float64 tensor;
    numpy's BLAS runs at torch's thread count inside it (its default here is every core, which would oversubscribe a
    campaign's one-thread workers)."""
    from threadpoolctl import threadpool_info

    from fairdp_core.engine import backends

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(3, 17, 9, dtype=torch.float64, generator=gen)
    b = torch.randn(3, 11, 9, dtype=torch.float64, generator=gen)
    got = backends._f64_bmm(a, b.transpose(1, 2))
    assert got.dtype == torch.float64 and got.shape == (3, 17, 11)
    torch.testing.assert_close(got, torch.bmm(a, b.transpose(1, 2)), rtol=1e-13, atol=1e-13)
    seen, real = [], np.matmul

    def spy(x, y):
        seen.append({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})
        return real(x, y)

    monkeypatch.setattr(np, "matmul", spy)
    threads = torch.get_num_threads()
    try:
        for want in (1, 2):
            torch.set_num_threads(want)
            backends._f64_bmm(a, b.transpose(1, 2))
            assert seen[-1] == {want}
    finally:
        torch.set_num_threads(threads)
