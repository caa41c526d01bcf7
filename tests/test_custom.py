"""Auditing your own model and data: RMIA against a slow reference and at chance without leakage, the three model
forms (engine, torch.func, Opacus fallback, BatchNorm refused), the audit finding leakage where there is some,
slices and intersections, and the CLI's errors before any training."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from fairdp_core.audit.custom import AuditSettings, audit_bank, audit_model
from fairdp_core.audit.custom_csv import audit_csv
from fairdp_core.audit.inference import cross_fit_contributions
from fairdp_core.audit.rmia import rmia_scores
from fairdp_core.cli import main as cli
from fairdp_core.engine import TrainSpec, train_bank
from fairdp_core.engine.backends import FuncBackend, LayerBackend, UnsupportedModule, check_module, make_backend


def _design(M: int, m: int, rng) -> np.ndarray:
    mem = np.zeros((M, m), bool)
    for r in range(M // 2):
        half = rng.permutation(m) < m // 2
        mem[2 * r], mem[2 * r + 1] = half, ~half
    return mem


# RMIA's loop-by-loop definition, at every setting: tests/test_attack_parity.py


def test_rmia_is_at_chance_without_leakage_and_finds_leakage():
    """2R = 16 models, 4,000 records, seed 1: with φ independent of membership the cross-fitted RMIA advantage
    averages 0 within 0.01; with φ shifted up by 0.5 for members it is clearly positive."""
    rng = np.random.default_rng(1)
    mem = _design(16, 4000, rng)
    base = rng.normal(size=mem.shape) + rng.normal(size=(1, mem.shape[1]))  # record effects, no membership
    null = cross_fit_contributions(rmia_scores(base, mem), mem).sum(0).mean()
    leak = cross_fit_contributions(rmia_scores(base + 0.5 * mem, mem), mem).sum(0).mean()
    assert abs(null) < 0.01, null
    assert leak > 0.05, leak


def _toy(n=600, d=8, seed=0, signal=1.5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    g = (rng.random(n) < 0.35).astype(np.int64)
    y = ((X[:, 0] + signal * X[:, 1] * (1 - 2 * g) + 0.8 * rng.normal(size=n)) > 0).astype(np.int64)
    return X, y, g


def test_backend_choice_and_refusals():
    """Custom modules go through torch.func (exact whatever their forward does: call order, tied weights, padding
    modes); the study's own CNN keeps its closed-form backend."""
    from fairdp_core.models import MnistCNN

    assert isinstance(make_backend(MnistCNN()), LayerBackend)
    assert isinstance(make_backend(nn.Sequential(nn.Flatten(), nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))),
                      FuncBackend)
    assert isinstance(make_backend(nn.Sequential(nn.Linear(4, 8), nn.GroupNorm(2, 8), nn.Tanh(), nn.Linear(8, 2))),
                      FuncBackend)
    with pytest.raises(UnsupportedModule, match="BatchNorm1d.*mix the samples") as e:
        check_module(nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)))
    assert e.value.mixes_samples
    with pytest.raises(UnsupportedModule, match=r"1 \(Dropout\)") as e:
        check_module(nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.Linear(8, 2)))
    assert not e.value.mixes_samples


class _Swapped(nn.Module):
    """Layers called in another order than registered, and a reflect-padded convolution: a closed-form backend
    pairing layers by registration order, or unfolding with zero padding, would get their gradients wrong."""

    def __init__(self):
        super().__init__()
        self.b = nn.Linear(6, 2)
        self.conv = nn.Conv2d(1, 2, 3, padding=1, padding_mode="reflect")
        self.a = nn.Linear(18, 6)

    def forward(self, x):
        return self.b(torch.tanh(self.a(torch.tanh(self.conv(x)).flatten(1))))


def test_custom_module_per_sample_gradients_are_exact():
    """Per-sample gradient norms of the engine's backend for a custom module equal autograd's, one sample at a time."""
    torch.manual_seed(0)
    net, x, y = _Swapped(), torch.randn(5, 1, 3, 3), torch.tensor([0, 1, 1, 0, 1])
    params = {k: v.detach()[None] for k, v in net.named_parameters()}
    norms, _ = make_backend(net).per_sample(params, x[None], y[None])
    for i in range(5):
        net.zero_grad()
        nn.functional.cross_entropy(net(x[i:i + 1]), y[i:i + 1], reduction="sum").backward()
        ref = torch.sqrt(sum(p.grad.pow(2).sum() for p in net.parameters()))
        torch.testing.assert_close(norms[0, i], ref, rtol=1e-5, atol=1e-6)


def test_correct_slice_shows_no_leakage_where_there_is_none():
    """A bank whose models' correctness does not depend on membership (seed 8; 2R = 16, 3,000 records): the
    "correct"/"wrong" slices from correctness_labels both have GPR within 1 pp of 0. A vote of the OUT models alone
    (the mistake this guards against) puts "wrong" well above 0."""
    from fairdp_core.audit.custom import correctness_labels

    rng = np.random.default_rng(8)
    M, m = 16, 3000
    mem = _design(M, m, rng)
    hard = rng.normal(size=m)  # record difficulty, no membership effect
    margin = hard[None] + rng.normal(size=(M, m))
    y = np.zeros(m, int)
    logits = np.stack([np.zeros((M, m)), -margin], -1)  # class 0 predicted when margin > 0
    loss = np.log1p(np.exp(-margin))
    groups = rng.integers(0, 2, m)
    res = audit_bank(loss, mem, groups, slices={"correct": correctness_labels(logits, y)}, n_perm=20, n_null=2)
    sl = res.slices[(res.slices.slice == "correct") & (res.slices.attack == "alooa_cross_fit")]
    assert sl["gpr_pp"].abs().max() < 1.0, sl
    out_vote = np.where(((logits.argmax(-1) == 0) & ~mem).sum(0) / (~mem).sum(0) >= 0.5, "correct", "wrong")
    bad = audit_bank(loss, mem, groups, slices={"correct": out_vote}, n_perm=20, n_null=2).slices
    wrong = bad[(bad.slice == "correct") & (bad.value == "wrong") & (bad.attack == "alooa_cross_fit")]["gpr_pp"]
    assert wrong.iloc[0] > 1.5, wrong


@pytest.mark.slow
def test_custom_factory_trains_the_same_bank_as_the_engine_mlp():
    """A factory building the study's MLP as nn.Sequential goes through torch.func; the engine's own MLP through
    the dense backend. Same init draws, same streams: the same DP bank to float tolerance."""
    X, y, g = _toy(n=400)
    mem = _design(4, 400, np.random.default_rng(2))
    spec = TrainSpec(algorithm="dpsgd", model="mlp", epochs=2, batch_size=32, lr=0.1, clip=1.0, target_epsilon=5.0,
                     hidden=16)
    own = train_bank(X, y, g, mem, spec, n_classes=2, n_groups=2, seed=3, progress=False)
    seq = train_bank(X, y, g, mem, spec, n_classes=2, n_groups=2, seed=3, progress=False,
                     module_factory=lambda: nn.Sequential(nn.Flatten(), nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2)))
    for a, b in zip(own.params.values(), seq.params.values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert own.accounting[0].epsilon == pytest.approx(seq.accounting[0].epsilon)


@pytest.mark.slow
def test_audit_model_finds_leakage_of_an_overfit_model_and_not_of_a_private_one(capsys):
    """An MLP trained without privacy for many epochs on 300 noisy records leaks: PA-ALOOA's GPR interval lies above
    0 for both groups. At ε = 0.5 the same audit's overall advantage is near 0."""
    X, y, g = _toy(n=300, d=20, signal=0.3, seed=4)
    y = np.where(np.random.default_rng(5).random(len(y)) < 0.3, 1 - y, y)  # label noise: memorisation pays
    net = nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 2))
    sgd = audit_model(X, y, g, AuditSettings(model=net, algorithm="sgd", R=4, m=150, epochs=150, batch_size=32,
                                             lr=0.5, progress=False, min_per_group=10))
    t = sgd.table()
    assert (t["lo_pp"] > 0).all(), t
    dp = audit_model(X, y, g, AuditSettings(model=net, algorithm="dpsgd", epsilon=0.5, R=4, m=150, epochs=20,
                                            batch_size=32, lr=0.5, progress=False, min_per_group=10))
    assert abs(dp.records["alooa_cross_fit"].mean()) < 0.05
    assert dp.summary["accounting"]["epsilon"] <= 0.5 + 1e-6
    # RMIA and LiRA beside PA-ALOOA, ROC per group, the class and correctness slices with intervals
    assert {"rmia", "lira_online", "alooa_cross_fit"} <= set(sgd.groups["attack"])
    assert set(sgd.roc["group"]) == {"0", "1"} and (sgd.roc["tpr"].between(0, 1)).all()
    assert {"class", "correct"} <= set(sgd.slices["slice"])
    assert sgd.slices[sgd.slices.slice == "class"]["lo_pp"].notna().all()  # ("correct" may hold one value only)


@pytest.mark.slow
def test_unsupported_layers_fall_back_to_opacus_and_batchnorm_is_refused(capsys):
    X, y, g = _toy(n=240)
    drop = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.1), nn.Tanh(), nn.Linear(16, 2))
    res = audit_model(X, y, g, AuditSettings(model=drop, algorithm="dpsgd", epsilon=4.0, R=2, m=80, epochs=2,
                                             batch_size=32, progress=False, min_per_group=10))
    assert "Training with Opacus instead" in capsys.readouterr().err
    acct = res.summary["accounting"]
    assert acct["trainer"].startswith("opacus") and acct["epsilon"] <= 4.0 + 1e-6
    # the noise Opacus applied is the σ calibrated for its own q = 1/⌈n/B⌉, and every planned step was taken
    assert acct["sigma_applied"] == pytest.approx(acct["sigma_g"]) and acct["sigma_g"] > 0.5
    assert acct["steps_taken"] == acct["steps"] > 0
    with pytest.raises(UnsupportedModule, match="GroupNorm instead"):
        bn = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 2))
        audit_model(X, y, g, AuditSettings(model=bn, R=2, m=80, progress=False, min_per_group=10))


def test_audit_model_takes_its_data_and_one_settings_object():
    """The user's door: the data, held-out data, names and slices, plus one frozen AuditSettings, checked when it is
    built (an impossible recipe is one line naming the setting, before any data is read); the front door exports it;
    anything else in its place is refused."""
    import dataclasses
    import inspect

    import fairdp_core

    params = inspect.signature(audit_model).parameters
    assert list(params)[:4] == ["X", "y", "groups", "settings"] and len(params) <= 10
    assert fairdp_core.AuditSettings is AuditSettings and "AuditSettings" in fairdp_core.__all__
    st = AuditSettings(R=4, epsilon=2.0, intersections=[["group", "class"]])
    assert st.intersections == (("group", "class"),) and dataclasses.replace(st, R=6).R == 6
    with pytest.raises(dataclasses.FrozenInstanceError):
        st.R = 5
    for bad, msg in ((dict(epsilon=0), "--epsilon 0"), (dict(R=1), "--R 1"), (dict(lr=float("nan")), "--lr nan"),
                     (dict(alpha=1.5), "alpha 1.5")):
        with pytest.raises(ValueError, match=msg):
            AuditSettings(**bad)
    X, y, g = _toy(n=60)
    with pytest.raises(TypeError, match="settings: an AuditSettings, got dict"):
        audit_model(X, y, g, {"R": 2})
    with pytest.raises(TypeError):
        audit_model(X, y, g, R=2)  # the old keywords: one settings object now
    with pytest.raises(ValueError, match=r"y: labels must be 0..0 \(class_names has 1 names\)"):
        audit_model(X, y, g, AuditSettings(R=2, min_per_group=5), class_names=["only"])


def test_audit_bank_checks_its_design_and_cuts_slices():
    rng = np.random.default_rng(6)
    mem = _design(8, 200, rng)
    loss = rng.exponential(size=mem.shape) - 0.3 * mem
    with pytest.raises(ValueError, match="complementary"):
        audit_bank(loss, np.roll(mem, 1, axis=1) | mem, np.zeros(200, int))
    sex = np.where(rng.random(200) < 0.5, "F", "M")
    race = np.where(rng.random(200) < 0.3, "A", "B")
    res = audit_bank(loss, mem, sex, slices={"race": race}, intersections=[("group", "race")], n_perm=50, n_null=5)
    cross = res.slices[res.slices.slice == "group × race"]
    assert set(cross["value"]) == {"F × A", "F × B", "M × A", "M × B"}
    assert cross["n_records"].groupby(cross["attack"]).sum().eq(200).all()
    # a slice's GPR is the mean advantage of its records
    rec = res.records
    f = cross[(cross.value == "F × A") & (cross.attack == "alooa_cross_fit")]["gpr_pp"].iloc[0]
    assert f == pytest.approx(100 * rec["alooa_cross_fit"][(sex == "F") & (race == "A")].mean())


@pytest.fixture
def csv(tmp_path):
    X, y, g = _toy(n=400, d=4, seed=7)
    df = pd.DataFrame(X, columns=[f"x{i}" for i in range(4)])
    df["colour"] = np.where(g == 1, "red", "blue")
    df["size"] = np.where(X[:, 2] > 0, "big", "small")
    df["label"] = np.where(y == 1, "yes", "no")
    p = tmp_path / "toy.csv"
    df.to_csv(p, index=False)
    return p


@pytest.mark.slow
def test_cli_audit_custom_writes_every_output(csv, tmp_path, capsys):
    out = tmp_path / "audit"
    rc = cli(["audit-custom", "--data", str(csv), "--label", "label", "--group", "colour", "--slice", "size",
              "--intersect", "colour,size", "--R", "2", "--epochs", "3", "--out", str(out), "--quiet"])
    assert rc == 0
    assert {p.name for p in out.iterdir()} == {"summary.json", "groups.csv", "records.csv", "slices.csv", "roc.csv",
                                               "roc.png", "report.md", ".fairdp-manifest.json"}
    printed = capsys.readouterr().out
    assert printed.startswith("Is some group at higher membership risk? ")  # the answer first
    assert "Riskier for blue than for red? GPR blue − red = " in printed  # then each pair
    s = json.loads((out / "summary.json").read_text())
    assert s["group_names"] == ["blue", "red"] and s["accounting"]["epsilon"] <= 10 + 1e-6
    assert "outside ε" in s["preprocessing"]
    sl = pd.read_csv(out / "slices.csv")
    assert {"class", "correct", "size", "group × size"} <= set(sl["slice"])
    assert "Δ = " in printed and "(RMIA: Δ = " in printed


@pytest.mark.parametrize("args, message", [
    (["--label", "lable", "--group", "colour"], "no column 'lable'; columns: 'x0', 'x1', 'x2', 'x3', 'colour', 'size', 'label'"),
    (["--label", "label", "--group", "colour", "--intersect", "colour,shape"], "'shape' is not the group column"),
    (["--label", "label", "--group", "colour", "--min-per-group", "300"], "too few records in group"),
    (["--label", "label", "--group", "colour", "--model", "nosuchmodule:net"], "cannot import net from nosuchmodule"),
])
def test_cli_audit_custom_errors_name_the_problem(csv, tmp_path, capsys, args, message):
    out = tmp_path / "audit"
    assert cli(["audit-custom", "--data", str(csv), "--out", str(out), "--quiet", *args]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_cli_audit_custom_missing_group_values(csv, tmp_path, capsys):
    df = pd.read_csv(csv)
    df.loc[:4, "colour"] = None
    df.to_csv(csv, index=False)
    assert cli(["audit-custom", "--data", str(csv), "--label", "label", "--group", "colour",
                "--out", str(tmp_path / "a")]) == 2
    assert "the group column 'colour' is missing in 5 rows" in capsys.readouterr().err


def test_audit_csv_custom_module_function(csv, tmp_path, monkeypatch):
    """--model module:function: a function of (input_shape, n_classes) from the working directory."""
    (tmp_path / "mynets.py").write_text(
        "from torch import nn\n"
        "def small(input_shape, n_classes):\n"
        "    return nn.Sequential(nn.Linear(input_shape[0], 8), nn.GroupNorm(2, 8), nn.Tanh(), nn.Linear(8, n_classes))\n")
    monkeypatch.chdir(tmp_path)
    res = audit_csv(csv, AuditSettings(model="mynets:small", R=2, epochs=2, progress=False), label="label",
                    group="colour")
    assert res.summary["spec"]["model"] == "custom" and len(res.table()) == 2


@pytest.mark.slow
def test_the_opacus_fallback_samples_and_noises_as_it_accounts():
    """The fallback's own mechanism, measured (not its accounting restated): records are Poisson-sampled at the q it
    charges (mean batch size q·n, and its binomial variance: a mean batch size cannot tell Poisson from shuffled
    fixed-size batches, the variance can), and with inputs that give every per-sample gradient zero each step moves the
    weights by pure noise of std lr·σ·C / (q·n), fresh at every step (no correlation between steps). A sampler at
    B/n instead of 1/⌈n/B⌉, noise at another scale, or a reused noise draw fails here."""
    from fairdp_core.audit.custom import _train_opacus
    from fairdp_core.engine import TrainSpec

    n, B, lr, C = 300, 32, 0.5, 2.0
    X = np.zeros((n, 6), dtype=np.float32)
    y = np.arange(n) % 2
    spec = TrainSpec(algorithm="dpsgd", model="lr", epochs=30, batch_size=B, lr=lr, clip=C, target_epsilon=4.0,
                     delta=1e-5, accountant="rdp")
    sizes, weights = [], []

    def factory():
        lin = nn.Linear(6, 2, bias=False)

        def hook(mod, inp):
            sizes.append(inp[0].shape[0])
            weights.append(mod.weight.detach().clone())
        lin.register_forward_pre_hook(hook)
        return nn.Sequential(lin)

    torch.manual_seed(0)
    models, acct = _train_opacus(factory, X, y, np.ones((1, n), dtype=bool), spec, seed=3, progress=False)
    a = acct[0]
    q = 1 / int(np.ceil(n / B))
    assert a["sample_rate"] == pytest.approx(q) and a["steps_taken"] == a["steps"] == round(30 / q)
    sizes = np.array(sizes, dtype=float)
    assert len(sizes) == a["steps"]
    se = np.sqrt(n * q * (1 - q) / len(sizes))
    assert abs(sizes.mean() - n * q) < 4 * se, (sizes.mean(), n * q, se)  # B/n would be 6 SE away
    # Poisson, not shuffled: each record in a batch independently, so the batch size varies binomially, with variance
    # n·q·(1 − q) (fixed-size shuffled batches: 0). Over 300 steps the sample variance is within ±33% of it (4 SE).
    ratio = sizes.var(ddof=1) / (n * q * (1 - q))
    assert 0.67 < ratio < 1.33, ratio
    steps = torch.stack(weights)
    delta = (steps[1:] - steps[:-1]).reshape(len(steps) - 1, -1).numpy()
    want = lr * a["sigma_applied"] * C / (n * q)
    assert delta.std() == pytest.approx(want, rel=0.05), (delta.std(), want)
    r = np.corrcoef(delta[1:].ravel(), delta[:-1].ravel())[0, 1]
    assert abs(r) < 4 / np.sqrt(delta[1:].size), r  # fresh noise at every step
    assert a["epsilon"] <= 4.0 + 1e-6 and a["sigma_applied"] == pytest.approx(a["sigma_g"])


def test_audit_model_takes_any_registered_rule_at_its_own_defaults():
    """audit_model's rule list is the registry: AdaClip trains with its own γ (0.5), not DP-SGD-S's 0.75 under the same
    TrainSpec field, and its ε is accounted; a rule without a guarantee, a rule whose settings depend on the dataset
    (fixed group bounds from public shares) and an unknown name are refused in one line before any training."""
    from fairdp_core.rules import RULES

    X, y, g = _toy(n=240)
    res = audit_model(X, y, g, AuditSettings(model="lr", algorithm="adaclip", epsilon=4.0, R=2, m=80, epochs=1,
                                             batch_size=32, progress=False, min_per_group=10))
    spec = res.summary["spec"]
    assert spec["algorithm"] == "adaclip" and spec["gamma"] == 0.5 == RULES["adaclip"].settings().gamma
    assert res.summary["accounting"]["epsilon"] <= 4.0 + 1e-6
    for unguaranteed in ("dpsgd_s_nonprivate", "dpsgd_s_paper_code"):  # statistics not noised: no ε to report
        with pytest.raises(ValueError, match=f"algorithm '{unguaranteed}': its ε is not guaranteed"):
            audit_model(X, y, g, AuditSettings(model="lr", algorithm=unguaranteed, R=2, m=80, progress=False,
                                               min_per_group=10))
    with pytest.raises(ValueError, match="dpsgd_group_fixed: its settings have no default outside the pipeline"):
        audit_model(X, y, g, AuditSettings(model="lr", algorithm="dpsgd_group_fixed", R=2, m=80, progress=False,
                                           min_per_group=10))
    with pytest.raises(ValueError, match="unknown algorithm 'nope'; known: sgd, dpsgd"):
        audit_model(X, y, g, AuditSettings(model="lr", algorithm="nope", R=2, m=80, progress=False, min_per_group=10))
