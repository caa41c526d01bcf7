"""A bank sharded over worker processes (joblib/loky) or Ray tasks is the bank one process trains.

Oracle: the single-process ``train_bank`` on the same data, seed and spec. Everything agrees bit for bit:
parameters, policy state, clipping counts, accounting (σ, q, T, ε per model), membership, steps. Three controls
show the comparison can fail: shards whose streams are keyed by their position in the shard, shards trained as
banks of their own (their own T and σ), and shards padded to their own batch widths instead of the bank's (the
models trained together set the padded width W, the largest Poisson batch among them, and the matmuls block their
reductions over W by it: the last float bit differs, as in test_engine's bank-independence test).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from fairdp_core.config import ConfigError, Params, load_params
from fairdp_core.config.sections import ComputeConfig
from fairdp_core.engine import TrainSpec, train_bank
from fairdp_core.engine.shard import ShardError, concat_banks, shard_rows, train_bank_sharded

N, D, K = 900, 12, 3


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(N, D)).astype(np.float32)
    y = rng.integers(0, 2, N)
    g = rng.integers(0, K, N)
    # pools of unequal size (0.35..0.65 of the records): the shards' mean pool sizes and largest q differ from the
    # bank's, so a shard that computed its own T or σ would differ
    mem = rng.random((6, N)) < np.linspace(0.35, 0.65, 6)[:, None]
    return X, y, g, mem


SPECS = {
    "lr-dpsgd": TrainSpec(algorithm="dpsgd", model="lr", epochs=2, batch_size=40, target_epsilon=2.0),
    "mlp-dpsgd": TrainSpec(algorithm="dpsgd", model="mlp", hidden=16, epochs=2, batch_size=40, target_epsilon=2.0),
    "mlp-dpsgd_s": TrainSpec(algorithm="dpsgd_s", model="mlp", hidden=16, epochs=2, batch_size=40,
                             target_epsilon=2.0, sigma_b=5.0),
    # K = 3 groups: the paper rule reads the Gram matrix of its group sums, with the cached input pairs
    "mlp-dpsgd_s_paper": TrainSpec(algorithm="dpsgd_s_paper", model="mlp", hidden=16, epochs=2, batch_size=40,
                                   target_epsilon=2.0),
}


def _train(data, spec, **kw):
    X, y, g, mem = data
    fn = train_bank if not kw else train_bank_sharded
    return fn(X, y, g, mem, spec, n_classes=2, n_groups=K, seed=7, progress=False, **kw)


@pytest.fixture(scope="module")
def single(data):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {k: _train(data, s) for k, s in SPECS.items()}
    finally:
        torch.set_num_threads(before)


def _assert_same_bank(a, b, tmp_path=None) -> None:
    """Bit for bit; with ``tmp_path``, also the same bytes saved (what the train stage writes, and DVC hashes)."""
    assert a.n_models == b.n_models and a.steps == b.steps
    assert a.accounting == b.accounting  # σ, q, T, ε per model: exactly
    np.testing.assert_array_equal(a.membership, b.membership)
    for attr in ("params", "policy_state", "clip_stats"):
        da, db = getattr(a, attr), getattr(b, attr)
        assert set(da) == set(db), attr
        for k in da:
            assert torch.equal(da[k], db[k]), (attr, k, (da[k].double() - db[k].double()).abs().max().item())
    if tmp_path is not None:
        a.save(tmp_path / "single.pt")
        b.save(tmp_path / "sharded.pt")
        assert (tmp_path / "single.pt").read_bytes() == (tmp_path / "sharded.pt").read_bytes()


def test_shard_rows_cover_the_bank_in_order():
    rows = shard_rows(7, 3)
    assert [len(r) for r in rows] == [3, 2, 2] and np.array_equal(np.concatenate(rows), np.arange(7))
    assert len(shard_rows(2, 5)) == 2  # never an empty shard
    with pytest.raises(ValueError):
        shard_rows(0, 2)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SPECS))
def test_loky_shards_equal_the_single_process_bank(data, single, name, tmp_path):
    b = _train(data, SPECS[name], workers=2, executor="loky")
    _assert_same_bank(single[name], b, tmp_path)


def test_in_process_shards_concatenate_to_the_bank(data, single):
    """The same without processes: train_bank(models=rows) per shard, concatenated (3 shards, DP-SGD-S's MLP)."""
    X, y, g, mem = data
    spec = SPECS["mlp-dpsgd_s"]
    parts = [train_bank(X, y, g, mem, spec, n_classes=2, n_groups=K, seed=7, progress=False, models=r)
             for r in shard_rows(len(mem), 3)]
    _assert_same_bank(single["mlp-dpsgd_s"], concat_banks(parts))


@pytest.mark.slow  # 18 s beside other jobs: make test-slow (CI runs both suites)
def test_the_equality_check_fails_for_wrongly_keyed_shards(data, single):
    """Controls: (a) streams keyed by the position within the shard (stream_ids 0, 1, 2, 0, 1, 2) give the second
    shard the first shard's initialisation, batches and noise; (b) shards trained as banks of their own compute
    their own T and σ. Both are far from the single-process bank, so the equality above is not vacuous."""
    X, y, g, mem = data
    spec = SPECS["lr-dpsgd"]
    ref = single["lr-dpsgd"]
    positional = np.concatenate([np.arange(len(r)) for r in shard_rows(len(mem), 2)])
    bad = _train(data, spec, workers=2, executor="loky", stream_ids=positional)
    with pytest.raises(AssertionError):
        _assert_same_bank(ref, bad)
    assert not torch.allclose(ref.params["fc.weight"][3:], bad.params["fc.weight"][3:], atol=1e-3)
    alone = [train_bank(X, y, g, mem[r], spec, n_classes=2, n_groups=K, seed=7, progress=False,
                        stream_ids=r) for r in shard_rows(len(mem), 2)]
    assert [a.steps for a in alone] != [ref.steps] * 2  # each half's own T (and σ): not the bank's
    assert {a.accounting[0].sigma_g for a in alone} != {ref.accounting[0].sigma_g}
    with pytest.raises(ValueError, match="different banks"):
        concat_banks(alone)


def test_the_bank_widths_make_it_bitwise(data, single):
    """Control: each shard padded to its own widths (the max over its rows only) is off in the last bits; padded to
    the bank's (what train_bank_sharded passes) it is exact. And bank_widths counts PoissonBank's batches."""
    from fairdp_core.engine import PoissonBank, bank_widths, model_generators

    X, y, g, mem = data
    spec = SPECS["mlp-dpsgd_s"]
    ref = single["mlp-dpsgd_s"]
    rows = shard_rows(len(mem), 2)
    own = concat_banks([train_bank(X, y, g, mem, spec, n_classes=2, n_groups=K, seed=7, progress=False, models=r,
                                   widths=bank_widths(mem, spec, seed=7, models=r)) for r in rows])
    diff = max((ref.params[k] - own.params[k]).abs().max().item() for k in ref.params)
    assert 0 < diff < 1e-6, diff
    pools = [torch.as_tensor(np.flatnonzero(r)) for r in mem]
    sampler = PoissonBank(pools, [spec.batch_size / len(p) for p in pools], [s["sample"] for s in model_generators(7, 6)])
    widths = bank_widths(mem, spec, seed=7)
    assert len(widths) == ref.steps
    assert [sampler.next()[0].shape[1] for _ in range(ref.steps)] == widths.tolist()


def test_models_argument_is_checked(data):
    X, y, g, mem = data
    with pytest.raises(ValueError, match="models"):
        train_bank(X, y, g, mem, SPECS["lr-dpsgd"], n_classes=2, n_groups=K, seed=7, progress=False,
                   models=np.array([0, 6]))


@pytest.fixture(scope="module")
def local_ray():
    """A small local Ray (2 CPUs; about 10 s to start). Ray is a test dependency (pyproject's dev extra): a missing
    Ray fails here rather than skipping."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_shards_equal_the_single_process_bank(data, single, local_ray, tmp_path):
    for name in ("lr-dpsgd", "mlp-dpsgd_s"):
        b = _train(data, SPECS[name], workers=2, executor="ray")
        _assert_same_bank(single[name], b, tmp_path)


def test_ray_missing_names_the_key_and_file(data, tmp_path, monkeypatch):
    """The train stage's executor: Ray requested but not importable is an error naming compute and params.yaml."""
    from fairdp_core.stages.train import _train as stage_train

    params = Params.model_validate({"seed": 1, "data": {"datasets": {}}, "compute": {"workers": 2, "ray_address": "local"},
                                    "base_dir": tmp_path})
    assert params.compute.backend == "ray"  # setting ray_address selects Ray
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    X, y, g, mem = data
    with pytest.raises(ShardError, match=r"params\.yaml: compute .*ray_address: local.*Ray is not installed"):
        stage_train(params, X, y, g, mem, SPECS["lr-dpsgd"], n_classes=2, n_groups=K, seed=7, progress=False)


@pytest.mark.parametrize(("compute", "message"), [
    ({"workers": 0}, r"compute\.workers: Input should be greater than 0"),
    ({"worker": 2}, r"compute\.worker: unknown key"),
    ({"backend": "dask"}, r"compute\.backend: Input should be 'loky' or 'ray'"),
    ({"backend": "loky", "ray_address": "auto"}, r"compute: ray_address is set \('auto'\) but backend is 'loky'"),
    ({"gpus_per_worker": 0.5}, r"compute: gpus_per_worker is Ray's num_gpus"),
    ({"shard_models": ["cnn", "mpl"]}, r"compute\.shard_models\.1: Input should be 'lr', 'mlp', 'cnn' or 'cnn_relu'"),
])
def test_compute_config_errors_name_the_key(tmp_path, compute, message):
    import yaml

    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({"seed": 1, "data": {"datasets": {}}, "compute": compute}))
    with pytest.raises(ConfigError, match=message) as e:
        load_params(p)
    assert str(p) in str(e.value)


def test_shard_models_leaves_other_families_in_process(data, tmp_path, monkeypatch):
    """compute.shard_models: a bank of a listed family is split over compute.workers, any other trains in the
    stage's own process (one shard, no executor, even with Ray)."""
    import fairdp_core.stages.train as stage

    seen = []
    monkeypatch.setattr(stage, "train_bank_sharded",
                        lambda *a, workers, executor, **kw: seen.append((a[4].model, workers, executor)))
    params = Params.model_validate({"seed": 1, "data": {"datasets": {}}, "base_dir": tmp_path,
                                    "compute": {"workers": 2, "shard_models": ["mlp", "cnn"], "backend": "ray"}})
    X, y, g, mem = data
    for name in ("lr-dpsgd", "mlp-dpsgd_s"):
        stage._train(params, X, y, g, mem, SPECS[name], n_classes=2, n_groups=K, seed=7, progress=False)
    params = params.model_copy(update={"compute": params.compute.model_copy(update={"shard_models": None})})
    stage._train(params, X, y, g, mem, SPECS["lr-dpsgd"], n_classes=2, n_groups=K, seed=7, progress=False)
    assert seen == [("lr", 1, "serial"), ("mlp", 2, "ray"), ("lr", 2, "ray")]  # serial: not even one Ray task


def test_compute_defaults_run_in_process():
    c = ComputeConfig()
    assert (c.workers, c.backend, c.ray_address, c.threads_per_worker) == (1, "loky", None, 1)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (tests/gpu_check.sh runs it on a GPU)")


@cuda
def test_cuda_device_shards_equal_the_single_process_bank(data):
    """On CUDA: 2 loky workers sharing the GPU give the bank one process trains there (same tolerance)."""
    spec = SPECS["mlp-dpsgd_s"]
    ref = _train(data, spec, device="cuda", workers=1, executor="serial")
    _assert_same_bank(ref, _train(data, spec, device="cuda", workers=2, executor="loky"))


@cuda
def test_cuda_device_ray_shards_share_a_gpu(data):
    """On CUDA with Ray: 2 tasks of half a GPU each (compute.gpus_per_worker: 0.5)."""
    ray = pytest.importorskip("ray", reason="Ray is not installed on this GPU machine")
    spec = SPECS["lr-dpsgd"]
    ref = _train(data, spec, device="cuda", workers=1, executor="serial")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        _assert_same_bank(ref, _train(data, spec, device="cuda", workers=2, executor="ray", gpus_per_worker=0.5))
    finally:
        if started:
            ray.shutdown()
