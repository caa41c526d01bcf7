"""Attribute inference and model inversion: hand-sized toys whose answer is known, success against an
overfit model (above the base rate, with its interval), chance against an untrained one (the interval covers it).
Seeds are fixed; tolerances are stated at each assertion."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from fairdp_core.beyond import (
    attribute_inference_summary,
    invert_classes,
    lowest_loss_guesses,
    meta_classifier_guesses,
    pair_inference,
    total_variation,
)
from fairdp_core.beyond.attribute import label_only_guesses
from fairdp_core.beyond.tables import inversion_by_class, inversion_by_run, utility_table
from fairdp_core.engine import TrainSpec, stack_params, train_bank
from fairdp_core.models import CifarCNN, MnistReLUCNN, build_model


def _design(R: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """[2R, m]: rows 2r, 2r + 1 complementary random halves (the audit design's shape)."""
    mem = np.zeros((2 * R, m), dtype=bool)
    for r in range(R):
        half = rng.permutation(m)[: m // 2]
        mem[2 * r, half] = True
        mem[2 * r + 1] = ~mem[2 * r]
    return mem


# ------------------------------------------------------------------------------------------ hand-sized answers

def test_lowest_loss_picks_the_value_of_lowest_loss_by_hand():
    """Two models, three records, a three-valued attribute (columns 1..3) whose values map to groups (0, 1, 1): the
    loss is |x·w − y|, so the guess is the value whose column weight is closest to y − x0·w0, worked by hand."""
    w = np.array([[1.0, 0.0, 2.0, 5.0],    # model 0: values add 0, 2, 5
                  [1.0, 4.0, 0.0, 1.0]])   # model 1: values add 4, 0, 1
    X = np.array([[0.0, 0, 0, 0], [1.0, 0, 0, 0], [2.0, 0, 0, 0]], dtype=np.float32)
    y = np.array([0, 3, 6])

    def loss(Xv, yv):
        return np.abs(Xv @ w.T - yv[:, None]).T  # [M, N]

    guess = lowest_loss_guesses(loss, X, y, [1, 2, 3], np.array([0, 1, 1]), rng=np.random.default_rng(0))
    # model 0: record 0 needs 0 -> value 0 (group 0); record 1 needs 2 -> value 1 (group 1); record 2 needs 4 ->
    # value 2 adds 5 (|1|) vs value 1 adds 2 (|2|) -> value 2 (group 1). model 1: needs 0 -> value 1 (group 1);
    # needs 2 -> value 2 adds 1 (|1|) vs value 0 adds 4 (|2|) -> group 1; needs 4 -> value 0 (group 0).
    np.testing.assert_array_equal(guess, [[0, 1, 1], [1, 1, 0]])


def test_lowest_loss_breaks_ties_at_random():
    """A model that ignores the attribute ties every value: the guesses are uniform over values (binomial, 4,000
    draws, within 4 SD of 1/2)."""
    X = np.zeros((2000, 3), dtype=np.float32)
    guess = lowest_loss_guesses(lambda Xv, yv: np.zeros((2, len(yv))), X, np.zeros(2000, int), [1, 2],
                                np.array([0, 1]), rng=np.random.default_rng(1))
    assert abs(guess.mean() - 0.5) < 4 * np.sqrt(0.25 / guess.size)


def test_summary_members_non_members_and_gap_by_hand():
    """2R = 4 models, 4 records (groups 0, 0, 1, 1). Correct guesses S and membership by hand: group 0's records are
    guessed right exactly when they are members, group 1's always."""
    mem = np.array([[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0], [0, 0, 1, 1]], dtype=bool)
    group = np.array([0, 0, 1, 1])
    guess = np.where(mem, group[None], 1 - group[None])  # right when IN
    guess[:, 2:] = 1  # group 1 always right
    res = attribute_inference_summary(guess, mem, group, 2, group_names=["a", "b"])
    t = res.table.set_index("group")
    assert t.loc["a", "members"] == pytest.approx(1.0) and t.loc["a", "non_members"] == pytest.approx(0.0)
    assert t.loc["a", "gap"] == pytest.approx(1.0) and t.loc["b", "gap"] == pytest.approx(0.0)
    assert t.loc["b", "members"] == pytest.approx(1.0) and t.loc["b", "all"] == pytest.approx(1.0)
    # balanced accuracy (0.5 + 1) / 2; the majority base rate 1/2; raw success 12/16
    assert res.overall["balanced"] == pytest.approx(0.75) and res.overall["success"] == pytest.approx(0.75)
    assert res.overall["advantage"] == pytest.approx(0.5)


def test_pair_inference_weights_are_a_linear_combination_of_group_means():
    """The weighted estimate is Σ w_k·mean_k of the per-record sums, whatever the weights; with one group's weight
    1 it is the audit's GPR interval (group_inference) exactly, and with weights (1, −1) the contrast's (same
    variance; the contrast's df is not capped at R − 1)."""
    from fairdp_core.audit.inference import group_inference

    rng = np.random.default_rng(3)
    c = rng.normal(size=(6, 40)) + rng.normal(size=(6, 1))  # model effects too
    g = np.repeat([0, 1], 20)
    a = c.sum(0)
    r = pair_inference(c, g, 2, {0: 0.3, 1: -1.2})
    assert r["estimate"] == pytest.approx(0.3 * a[:20].mean() - 1.2 * a[20:].mean())
    assert r["lo"] < r["estimate"] < r["hi"]
    gi = group_inference(c, g, 2)
    one = pair_inference(c, g, 2, {1: 1.0})
    assert (one["lo"], one["hi"]) == pytest.approx((gi["gpr_lo"][1], gi["gpr_hi"][1]))
    contrast = pair_inference(c, g, 2, {0: 1.0, 1: -1.0})
    assert contrast["se"] == pytest.approx(gi["contrasts"][0]["se"])


def test_label_only_guess_maximises_balanced_accuracy_by_hand():
    """Per label, the value k of largest P(a = k | y) / P(a = k). Public records: y = 0 has a = 0, 0, 0, 1 and y = 1
    has a = 0, 0, 1, 1, so P(a = 1) = 3/8. Given y = 1: P(a=1|y)/P(a=1) = (1/2)/(3/8) = 4/3 against
    (1/2)/(5/8) = 4/5 for a = 0: guess 1, where the majority per label would tie (and the majority overall say 0).
    Given y = 0: (1/4)/(3/8) = 2/3 against (3/4)/(5/8) = 6/5: guess 0."""
    y = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    a = np.array([0, 0, 0, 1, 0, 0, 1, 1])
    np.testing.assert_array_equal(label_only_guesses(y, a, np.array([1, 0, 1]), n_classes=2, n_models=2),
                                  [[1, 0, 1], [1, 0, 1]])


def test_imputation_reads_an_attribute_the_other_features_carry():
    """An attribute copied into a feature (with noise) is imputed from the features (balanced accuracy > 0.9); one
    independent of every feature and of the label is not (within 0.1 of chance)."""
    from fairdp_core.beyond.attribute import imputation_guesses

    rng = np.random.default_rng(4)
    P, N = 600, 400
    ap, aa = rng.integers(0, 2, P), rng.integers(0, 2, N)
    yp, ya = rng.integers(0, 2, P), rng.integers(0, 2, N)
    for carried in (True, False):
        Xp, Xa = rng.normal(size=(P, 3)), rng.normal(size=(N, 3))
        if carried:
            Xp[:, 0] += 3 * ap
            Xa[:, 0] += 3 * aa
        g = imputation_guesses(Xp, yp, ap, Xa, ya, n_classes=2, n_models=4)
        assert g.shape == (4, N) and (g == g[:1]).all()
        bal = np.mean([(g[0][aa == k] == k).mean() for k in (0, 1)])
        assert (bal > 0.9) if carried else (abs(bal - 0.5) < 0.1), bal


# -------------------------------------------------------------------- against overfit and untrained models

def _memorisation_data(n: int, seed: int):
    """Random features, a random binary attribute as a one-hot input block (columns 8, 9) and a random label:
    nothing but memorisation links the attribute to the label."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 10)).astype(np.float32)
    a = rng.integers(0, 2, n)
    X[:, 8:] = np.eye(2)[a]
    X[:, 8:] *= 3.0  # a strong input, so that memorising the record means using it
    y = rng.integers(0, 2, n)
    return X, y, a


@pytest.fixture(scope="module")
def overfit_and_untrained():
    rng = np.random.default_rng(7)
    X, y, a = _memorisation_data(120, 7)
    mem = _design(4, len(y), rng)
    spec = TrainSpec(algorithm="sgd", model="mlp", epochs=400, batch_size=60, lr=0.5, hidden=64)
    over = train_bank(X, y, a, mem, spec, n_classes=2, n_groups=2, seed=11, progress=False)
    untrained = train_bank(X, y, a, mem, TrainSpec(algorithm="sgd", model="mlp", epochs=1e-9, batch_size=60, lr=1e-9,
                                                   hidden=64), n_classes=2, n_groups=2, seed=12, progress=False)
    return X, y, a, mem, over, untrained


def test_lowest_loss_succeeds_on_members_of_an_overfit_model(overfit_and_untrained):
    """Memorised records give their attribute away: members' success > 0.8 and the gap's interval above 0; the
    non-members (never seen) stay at chance (their interval covers 0.5)."""
    X, y, a, mem, over, _ = overfit_and_untrained
    s = over.params["fc1.weight"]
    assert s.shape[0] == 8
    X = X.copy()
    X[:, 8:] /= 3.0  # one-hot values are set to 0/1 by the attack; the model saw 0/3: give it what it saw
    guess = lowest_loss_guesses(lambda Xv, yv: over.evaluate(Xv * np.r_[np.ones(8), 3, 3].astype(np.float32), yv)[0],
                                X, y, [8, 9], np.array([0, 1]), rng=np.random.default_rng(0))
    res = attribute_inference_summary(guess, mem, a, 2)
    t = res.table
    assert (t["members"] > 0.8).all(), t
    assert (t["gap_lo"] > 0).all(), t
    assert ((t["non_members_lo"] <= 0.5) & (t["non_members_hi"] >= 0.5)).all(), t
    assert res.overall["advantage_lo"] > 0


def test_lowest_loss_is_at_chance_against_an_untrained_model(overfit_and_untrained):
    """Random initial weights: the advantage's interval covers 0 and every group's gap interval covers 0."""
    X, y, a, mem, _, untrained = overfit_and_untrained
    guess = lowest_loss_guesses(lambda Xv, yv: untrained.evaluate(Xv, yv)[0], X, y, [8, 9], np.array([0, 1]),
                                rng=np.random.default_rng(0))
    res = attribute_inference_summary(guess, mem, a, 2)
    assert res.overall["advantage_lo"] <= 0 <= res.overall["advantage_hi"], res.overall
    assert ((res.table["gap_lo"] <= 0) & (res.table["gap_hi"] >= 0)).all(), res.table


def test_meta_classifier_reads_an_attribute_the_outputs_carry_and_not_one_they_do_not():
    """Outputs that carry the attribute (logit shifted by ±1.5 with it) give a meta-classifier balanced accuracy
    > 0.7; outputs independent of it give an interval covering chance. The label is independent of the attribute,
    so the label-only baseline is at chance too."""
    rng = np.random.default_rng(5)
    M, P, N = 8, 400, 300
    ya, yp = rng.integers(0, 2, N), rng.integers(0, 2, P)
    aa, ap = rng.integers(0, 2, N), rng.integers(0, 2, P)
    mem = _design(M // 2, N, rng)

    def logits(attr, informative):
        z = rng.normal(size=(M, len(attr), 2))
        if informative:
            z[..., 1] += 1.5 * (2 * attr - 1)
        return z

    for informative in (True, False):
        g = meta_classifier_guesses(logits(ap, informative), yp, ap, logits(aa, informative), ya, n_classes=2)
        res = attribute_inference_summary(g, mem, aa, 2)
        if informative:
            assert res.overall["balanced"] > 0.7, res.overall
        else:
            assert res.overall["balanced_lo"] <= 0.5 <= res.overall["balanced_hi"], res.overall
    base = attribute_inference_summary(label_only_guesses(yp, ap, ya, n_classes=2, n_models=M), mem, aa, 2)
    assert abs(base.overall["balanced"] - 0.5) < 0.1


# --------------------------------------------------------------------------------------------- model inversion

def test_inversion_recovers_a_known_optimum_by_hand():
    """A linear model on 2x2 images whose class-1 logit is 5·x[0, 0] − 5·x[1, 1] (class 0: 0): the inversion of class
    1 lights pixel (0, 0) and darkens (1, 1) (within 0.05 of the box bounds)."""
    lin = nn.Linear(4, 2)
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.zero_()
        lin.weight[1, 0], lin.weight[1, 3] = 5.0, -5.0

    class Flat(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = lin

        def forward(self, x):
            return self.fc(x.flatten(1))

    mod = Flat()
    params = {k: v.detach()[None] for k, v in mod.named_parameters()}
    res = invert_classes(mod, params, (1, 2, 2), 2, steps=200, lr=0.1, tv=0.0, l2=0.0, restarts=1)
    img = res.images[0, 1, 0, 0]
    assert img[0, 0] > 0.95 and img[1, 1] < 0.05
    assert res.confidence[0, 1, 0] > 0.99


def test_total_variation_by_hand():
    x = torch.tensor([[[[0.0, 1.0], [1.0, 1.0]]]])
    # vertical differences |1 − 0|, |1 − 1| -> mean 0.5; horizontal |1 − 0|, |1 − 1| -> mean 0.5
    assert float(total_variation(x)[0]) == pytest.approx(1.0)


def _prototype_images(n: int, rng: np.random.Generator):
    """Three classes of 1x8x8 images: a bright 3x3 block at a class-specific place, plus noise."""
    protos = np.zeros((3, 1, 8, 8), np.float32)
    for c, (i, j) in enumerate([(0, 0), (0, 5), (5, 2)]):
        protos[c, 0, i:i + 3, j:j + 3] = 1.0
    y = rng.integers(0, 3, n)
    X = np.clip(protos[y] + 0.2 * rng.normal(size=(n, 1, 8, 8)), 0, 1).astype(np.float32)
    return X, y, protos


@pytest.mark.slow
def test_inversion_succeeds_against_a_trained_model_and_is_at_chance_untrained():
    """Evaluator: the nearest prototype. Reconstructions of a trained MLP are assigned their own class (accuracy
    over 12 models > 0.9); those of untrained MLPs are not (the t interval over model pairs covers chance 1/3)."""
    rng = np.random.default_rng(9)
    X, y, protos = _prototype_images(600, rng)
    mem = np.ones((12, len(y)), dtype=bool)
    trained = train_bank(X, y, y, mem, TrainSpec(algorithm="sgd", model="mlp", epochs=20, batch_size=64, lr=0.5,
                                                 hidden=32), n_classes=3, n_groups=3, seed=1, progress=False)
    untrained = train_bank(X, y, y, mem, TrainSpec(algorithm="sgd", model="mlp", epochs=1e-9, batch_size=64, lr=1e-9,
                                                   hidden=32), n_classes=3, n_groups=3, seed=2, progress=False)
    for bank, trained_ in ((trained, True), (untrained, False)):
        res = invert_classes(bank.module(), bank.params, (1, 8, 8), 3, steps=150, lr=0.05, tv=0.02, l2=0.01,
                             restarts=1, seed=0)
        d = ((res.images[:, :, 0, None] - protos[None, None]) ** 2).reshape(12, 3, 3, -1).sum(-1)
        pred = d.argmin(-1)  # [model, class]
        rows = [{"run": "r", "dataset": "toy", "model": "mlp", "algorithm": "sgd", "epsilon": np.nan, "seed": 0,
                 "class": str(c), "class_index": c, "model_index": m, "pair": m // 2, "restart": 0,
                 "success": bool(pred[m, c] == c), "dist_own_mean": 0.0, "dist_other_means": 1.0,
                 "nearest_mean_is_own": True,
                 "confidence": 1.0} for m in range(12) for c in range(3)]
        run = inversion_by_run(pd.DataFrame(rows)).iloc[0]
        if trained_:
            assert run["success"] > 0.9, run
        else:
            assert run["success_lo"] <= 1 / 3 <= run["success_hi"], run
        assert len(inversion_by_class(pd.DataFrame(rows))) == 3


def test_utility_table_reports_the_accounting():
    u = {"algorithms": {"sgd": {"accuracy": [0.9, 0.92], "accounting": None},
                        "dpsgd": {"accuracy": [0.8, 0.82, 0.84],
                                  "accounting": {"epsilon": 2.0, "sigma_g": 1.1, "sample_rate": 0.004, "steps": 100,
                                                 "sampling": "poisson", "accountant": "rdp", "delta": 1e-5}}}}
    t = utility_table(u).set_index("algorithm")
    assert t.loc["dpsgd", "accuracy"] == pytest.approx(0.82)
    assert t.loc["dpsgd", "accuracy_lo"] < 0.82 < t.loc["dpsgd", "accuracy_hi"]
    assert t.loc["dpsgd", "sigma"] == 1.1 and t.loc["dpsgd", "sampling"] == "poisson"


# ----------------------------------------------------------------------------------------------------- models

def test_the_materials_cnns_have_their_shapes():
    """cnn_relu: 28 -> 26 -> 13 -> 11 -> 5 (32·5·5 into dense 32); the CIFAR CNN: 32 -> 16 -> 8 -> 4 with GroupNorm
    and no BatchNorm."""
    m = build_model("cnn_relu", (1, 28, 28), 10)
    assert isinstance(m, MnistReLUCNN) and m(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    assert m.fc1.in_features == 32 * 5 * 5 and m.conv1.kernel_size == (3, 3)
    c = build_model("cnn", (3, 32, 32), 10)
    assert isinstance(c, CifarCNN) and c(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    assert any(isinstance(x, nn.GroupNorm) for x in c.modules())
    assert not any(isinstance(x, nn.modules.batchnorm._BatchNorm) for x in c.modules())
    with pytest.raises(ValueError, match="cnn_relu"):
        build_model("cnn_relu", (1, 48, 48), 2)
    assert stack_params([m])["conv1.weight"].shape == (1, 16, 1, 3, 3)


# ------------------------------------------------------------------------------------ CIFAR-10 (generated fixture)

def _cifar_archive(path, *, per_batch: int = 6, n_test: int = 10, seed: int = 0, extra: dict | None = None):
    """A cifar-10-python.tar.gz in the real layout (cifar-10-batches-py/data_batch_1..5, test_batch, batches.meta;
    each a pickled dict with bytes keys, ``data`` uint8 [n, 3072] as R, G, B planes, ``labels`` a list)."""
    import io
    import pickle
    import tarfile

    rng = np.random.default_rng(seed)

    def batch(n, label):
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        return {b"batch_label": label, b"labels": [int(v) for v in rng.integers(0, 10, n)], b"data": data,
                b"filenames": [f"img_{i}.png".encode() for i in range(n)]}

    members = {f"data_batch_{i}": batch(per_batch, f"training batch {i} of 5".encode()) for i in range(1, 6)}
    members["test_batch"] = batch(n_test, b"testing batch 1 of 1")
    members["batches.meta"] = {b"label_names": [c.encode() for c in ("airplane", "automobile", "bird", "cat", "deer",
                                                                     "dog", "frog", "horse", "ship", "truck")],
                               b"num_cases_per_batch": per_batch, b"num_vis": 3072}
    members.update(extra or {})
    with tarfile.open(path, "w:gz") as tf:
        for name, obj in members.items():
            raw = obj if isinstance(obj, bytes) else pickle.dumps(obj, protocol=2)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(raw)
            tf.addfile(info, io.BytesIO(raw))
    return members


def test_cifar10_reader_keeps_the_pixel_layout(tmp_path):
    """Row-major R, G, B planes of 32x32: value k of a row lands at channel k // 1024, pixel (k % 1024) // 32, k % 32."""
    from fairdp_core.data.sets.cifar10 import read_cifar10

    members = _cifar_archive(tmp_path / "c.tar.gz")
    Xtr, ytr, Xte, yte = read_cifar10(tmp_path / "c.tar.gz")
    assert Xtr.shape == (30, 3, 32, 32) and Xte.shape == (10, 3, 32, 32) and Xtr.dtype == np.uint8
    row = members["data_batch_2"][b"data"][1]
    x = Xtr[6 + 1]
    for k in (0, 1023, 1024, 2047 + 33, 3071):
        assert x[k // 1024, (k % 1024) // 32, k % 32] == row[k]
    assert ytr[6 + 1] == members["data_batch_2"][b"labels"][1]
    assert list(yte) == members["test_batch"][b"labels"]


def test_cifar10_reader_refuses_a_pickle_that_runs_code(tmp_path):
    """Only numpy's array reconstruction may be unpickled: a batch that calls os.system is refused."""
    import os
    import pickle

    from fairdp_core.data.sets.cifar10 import read_cifar10

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo owned",))

    _cifar_archive(tmp_path / "c.tar.gz", extra={"data_batch_3": pickle.dumps({b"data": Evil()}, protocol=2)})
    with pytest.raises(pickle.UnpicklingError, match="posix.system|os.system|never does"):
        read_cifar10(tmp_path / "c.tar.gz")


@pytest.mark.slow
def test_cifar10_loader_checks_the_hash_and_trains_the_gpu_profiles_cnn_end_to_end(tmp_path, monkeypatch):
    """The loader fetches cifar10 from a mirror, refuses it under the canonical hash (naming the path and the expected
    sha256), accepts it under its own, prepares it, and the utility stage trains the CIFAR CNN (GroupNorm) non-private
    and with DP-SGD on it, with ε from the accountant at most the target."""
    from dataclasses import replace

    import yaml

    from fairdp_core.config import load_params
    from fairdp_core.data.loaders import REGISTRY
    from fairdp_core.data.pipeline import prepare
    from fairdp_core.data.sources import ChecksumError, sha256_file
    from fairdp_core.stages.beyond import utility_run

    mirror = tmp_path / "mirror"
    (mirror / "cifar10").mkdir(parents=True)
    archive = mirror / "cifar10" / "cifar-10-python.tar.gz"
    _cifar_archive(archive, per_batch=8, n_test=12)
    params_text = {"seed": 1, "profile": "custom", "data": {"mirror": str(mirror), "raw_dir": str(tmp_path / "raw"),
                                                              "prepared_dir": str(tmp_path / "prepared"),
                                                              "datasets": {"cifar10": {}}},
                   "train": {"batch_size": 8, "threads": 1},
                   "beyond": {"utility": [{"dataset": "cifar10", "model": "cnn", "epsilon": 2.0, "seeds": 2,
                                           "epochs": 2, "batch_size": 8, "lr": 0.05}]}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params_text))
    monkeypatch.delenv("FAIRDP_DATA_MIRROR", raising=False)
    params = load_params(tmp_path / "params.yaml")
    with pytest.raises(ChecksumError, match="6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"):
        prepare(params, "cifar10")
    spec = REGISTRY["cifar10"]  # the same dataset module, recording this archive's hash instead of the canonical one
    raw = replace(spec.files[0], sha256=sha256_file(archive), nbytes=archive.stat().st_size)
    monkeypatch.setitem(REGISTRY, "cifar10", replace(spec, files=(raw,)))
    data = prepare(params, "cifar10")
    assert data.input_shape == (3, 32, 32) and len(data.train) == 40 and len(data.test) == 12
    assert data.train.X.dtype == np.float32 and 0.0 <= data.train.X.min() and data.train.X.max() <= 1.0
    info = utility_run(params, params.beyond.utility[0], progress=False)
    for alg in ("sgd", "dpsgd"):
        assert len(info["algorithms"][alg]["accuracy"]) == 2
    acc = info["algorithms"]["dpsgd"]["accounting"]
    assert acc["epsilon"] <= 2.0 + 1e-6 and acc["sampling"] == "poisson" and acc["sigma_g"] > 0


def test_the_gpu_profile_trains_the_cifar_cnn_at_epsilon_2(tmp_path):
    """profiles/gpu.yaml (merged on the default) holds the CIFAR-10 utility check: the dataset (downloaded, not in the
    mirror), and the CIFAR CNN (GroupNorm) non-private and at ε = 2 over 3 seeds, beside the MNIST CNN."""
    import shutil

    from fairdp_core.cli import use_profile
    from fairdp_core.config import load_params
    from fairdp_core.data.loaders import REGISTRY

    from .conftest import ROOT

    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(ROOT / "profiles", tmp_path / "profiles")
    use_profile("gpu", tmp_path / "params.yaml", tmp_path / "profiles")
    params = load_params(tmp_path / "params.yaml")
    assert params.data.download and "cifar10" in params.data.datasets
    u = {x.dataset: x for x in params.beyond.utility}
    assert u["cifar10"].model == "cnn" and u["cifar10"].epsilon == 2.0 and u["cifar10"].seeds >= 3
    assert u["mnist_full"].model == "cnn_relu" and u["mnist_full"].seeds >= 3
    assert REGISTRY["cifar10"].files[0].urls[0].startswith("https://www.cs.toronto.edu/~kriz/")


def test_the_attribute_and_its_method_come_from_the_prepared_data(mirror, tmp_path, monkeypatch):
    """group_column maps each value of the public vocabulary to its group (COMPAS: African-American -> 0, the five
    other races -> 1; law_paper: race_white 1 -> White (0)); a dataset with the attribute as an input gets the
    lowest-loss attack, its variant without it the meta-classifier."""
    import yaml

    from fairdp_core.config import load_params
    from fairdp_core.data.loaders import group_column
    from fairdp_core.data.pipeline import prepare
    from fairdp_core.stages.beyond import attribute_method

    monkeypatch.delenv("FAIRDP_DATA_MIRROR", raising=False)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({
        "seed": 1, "data": {"mirror": str(mirror), "raw_dir": str(tmp_path / "raw"),
                            "prepared_dir": str(tmp_path / "prepared"),
                            "datasets": {"compas": {"group": "race"}, "law_paper": {"group": "race1"},
                                         "compas_blind": {"source": "compas", "group": "race",
                                                          "group_as_feature": False}}}}))
    params = load_params(tmp_path / "params.yaml")
    compas, law, blind = (prepare(params, n) for n in ("compas", "law_paper", "compas_blind"))
    col, vocab, groups = group_column(compas)
    assert col == "race" and vocab[0] == "African-American" and list(groups) == [0, 1, 1, 1, 1, 1]
    col, vocab, groups = group_column(law)
    assert dict(zip(vocab, groups)) == {"0": 1, "1": 0}
    method, cols, vg = attribute_method(compas)
    assert method == "lowest_loss"
    assert [compas.feature_names[c] for c in cols] == [f"race={v}" for v in group_column(compas)[1]]
    assert attribute_method(blind)[0] == "meta_classifier"
    assert not any(f.startswith("race=") for f in blind.feature_names)
    np.testing.assert_array_equal(blind.train.group, compas.train.group)  # the same records, the same split
