"""The one-model audit (fairdp_core.audit.one): a planted leak is found, no leak gives intervals that hold 0, the
advantage interval's coverage is checked by simulation (seeded), and bad input is refused before any work."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fairdp_core.audit import one
from fairdp_core.cli import main as cli_main


def _scores(rng, n, shift):
    return rng.normal(shift, 1.0, n), rng.normal(0.0, 1.0, n)


def test_a_planted_leak_is_found_in_its_group():
    rng = np.random.default_rng(0)
    a_in, a_out = _scores(rng, 800, 1.0)   # group "a": members score higher (the model leaks them)
    b_in, b_out = _scores(rng, 800, 0.0)   # group "b": members and non-members alike
    res = one.audit_one(np.r_[a_in, b_in], np.r_[a_out, b_out], ["a"] * 800 + ["b"] * 800, ["a"] * 800 + ["b"] * 800,
                        n_null=50)
    g = res.table().set_index("group")
    # population advantage of the best threshold at shift 1: 2Φ(0.5) − 1 = 38.3 pp
    assert g.loc["a", "lo_pp"] > 25 and g.loc["a", "gpr_pp"] == pytest.approx(38.3, abs=6)
    assert g.loc["b", "lo_pp"] < 0 < g.loc["b", "hi_pp"]
    assert res.delta()["delta_lo"] > 20 and res.delta()["delta_pp"] > res.delta()["null_floor_pp"]
    c = res.contrasts().iloc[0]
    assert c.riskier == "a" and c.p_holm < 1e-6
    assert "riskier for a than for b" in " ".join(res.answer()).lower()
    assert g.loc["a", "tpr_at_0.01_fpr"] > 1.0 and g.loc["a", "tpr_at_0.001_fpr_note"] == "n/a: 800 non-members, 1000 needed"


def test_one_model_and_a_bank_give_the_one_result_type(tmp_path):
    """audit_one returns the CustomAudit an audit of a bank returns: its table, Δ, pairs, headline and answer read
    the loss threshold (its primary attack), and write() gives the same files with a one-model design line."""
    import json

    from fairdp_core.audit.custom_result import CustomAudit

    rng = np.random.default_rng(2)
    a_in, a_out = _scores(rng, 300, 1.0)
    b_in, b_out = _scores(rng, 300, 0.0)
    g = ["a"] * 300 + ["b"] * 300
    res = one.audit_one(np.r_[a_in, b_in], np.r_[a_out, b_out], g, g, n_null=20)
    assert type(res) is CustomAudit and res.primary == "loss_threshold"
    t = res.table()
    assert list(t.columns[:6]) == ["attack", "group", "n_records", "gpr_pp", "lo_pp", "hi_pp"]
    assert (t.n_records == 600).all() and t.set_index("group").loc["a", "lo_pp"] > 0
    d = res.delta()
    assert d["delta_lo"] > 0 and d["delta_pp"] == pytest.approx(t.gpr_pp.max() - t.gpr_pp.min())
    c = res.contrasts()
    assert list(c[["group_a", "group_b"]].iloc[0]) == ["a", "b"] and c.diff_pp.iloc[0] > 0
    assert res.headline()[0].startswith("Is some group at higher membership risk? Yes")
    assert "the loss threshold on one model" in res.headline()[0] and "Riskiest: a" in res.headline()[1]
    assert "a records are at higher risk" in res.answer()[0]
    assert len(res.records) == 1200 and set(res.roc.group) == {"a", "b"}
    out = res.write(tmp_path / "one")
    md = (out / "report.md").read_text()
    assert "Design: one trained model, 600 of its training records (members) and 600 held-out records." in md
    assert json.loads((out / "summary.json").read_text())["attacks"]["loss_threshold"]["delta_lo"] == d["delta_lo"]


def test_no_leak_intervals_hold_zero():
    rng = np.random.default_rng(1)
    s_in, s_out = _scores(rng, 1200, 0.0)
    groups = np.array(["x", "y", "z"] * 400)
    res = one.audit_one(s_in, s_out, groups, groups, n_null=50, seed=3)
    assert (res.table().lo_pp < 0).all() and (res.table().hi_pp > 0).all()
    assert res.delta()["delta_lo"] == 0.0
    assert (res.contrasts().lo_pp < 0).all() and (res.contrasts().hi_pp > 0).all()
    assert res.answer()[0].endswith("no difference between groups detected.") or "interval holds 0" in res.answer()[0]


def test_advantage_interval_covers_its_target_in_simulation():
    """Seed 0, 300 studies per cell: coverage ≥ 0.93 at every size and shift (the naive variance, which ignores
    that the two halves' estimates share records, covered 0.92–0.94; the bound used covers 0.98–0.995). The check
    rejects a wrong width: the same intervals at 0.6 × their width cover less than 0.93."""
    cov = one.coverage_study(300, sizes=(40, 400), shifts=(0.0, 0.8), seed=0)
    assert (cov.coverage >= 0.93).all(), cov
    assert (cov.width_pp < 60).all()
    rng = np.random.default_rng(5)
    hits = 0
    for _ in range(300):
        s_in, s_out = _scores(rng, 400, 0.8)
        f = one.cross_fit_group(s_in, s_out, rng)
        truth = np.mean([one.st.norm.sf(t - 0.8) - one.st.norm.sf(t) for t in f["thresholds"]])
        hits += abs(f["advantage"] - truth) <= 0.6 * 1.96 * np.sqrt(f["var"])
    assert hits / 300 < 0.93


def test_bad_input_is_refused_before_any_work():
    rng = np.random.default_rng(2)
    s = rng.normal(size=100)
    g = np.array(["a"] * 90 + ["b"] * 10)
    with pytest.raises(ValueError, match=r"fewer than 20 .*'b' \(10 members, 10 held out\)"):
        one.audit_one(s, s, g, g)
    with pytest.raises(ValueError, match="one score and one group per record"):
        one.audit_one(s, s, g[:50], g)
    with pytest.raises(ValueError, match="not finite"):
        one.audit_one(np.r_[s[:-1], np.nan], s, g, g)
    with pytest.raises(ValueError, match="record IDs are both"):
        one.check_disjoint(train_ids=[1, 2, 3], holdout_ids=[3, 4])
    with pytest.warns(UserWarning, match="identical to a training row"):
        one.check_disjoint(X_train=np.eye(3), X_holdout=np.eye(3)[:1])


def test_loss_scores_from_a_torch_model_and_a_wrong_output_shape():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    X, y = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32), np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0])
    s = one.loss_scores(model, X, y)
    expected = -torch.nn.functional.cross_entropy(model(torch.as_tensor(X)), torch.as_tensor(y), reduction="none")
    assert np.allclose(s, expected.detach().numpy())
    with pytest.raises(ValueError, match="one column per class"):
        one.loss_scores(torch.nn.Linear(4, 2), X, y)


def test_the_command_audits_a_scores_file_and_loses_nothing(tmp_path, capsys):
    import json

    import pandas as pd

    from fairdp_core.cli import main

    rng = np.random.default_rng(0)
    n = 1200
    g, mem = rng.choice(["f", "m"], n), rng.integers(0, 2, n)
    loss = rng.exponential(1.0, n) - 0.6 * mem * (g == "f")  # the model fits its female training records closer
    csv = tmp_path / "scores.csv"
    pd.DataFrame({"loss": loss, "member": mem, "sex": g}).to_csv(csv, index=False)
    out = tmp_path / "audit"
    assert main(["audit-one", "--scores", str(csv), "--loss", "los", "--group", "sex", "--out", str(out)]) == 2
    assert "no column 'los' (it has loss, member, sex)" in capsys.readouterr().err and not out.exists()
    assert main(["audit-one", "--scores", str(csv), "--loss", "loss", "--group", "sex", "--out", str(out),
                 "--n-null", "20"]) == 0
    assert "Riskier for f than for m" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == [".fairdp-manifest.json", "contrasts.csv", "groups.csv",
                                                     "summary.json"]
    assert json.loads((out / "summary.json").read_text())["delta_lo"] > 0
    (out / "notes.txt").write_text("mine")  # a file fairdp did not write: never overwritten, the run refused
    assert main(["audit-one", "--scores", str(csv), "--loss", "loss", "--group", "sex", "--out", str(out),
                 "--force"]) == 2
    assert (out / "notes.txt").read_text() == "mine"


def test_the_training_proxy_records_gaps_and_clipped_fractions_in_an_opacus_loop(tmp_path):
    """A real Opacus loop (make_private, Poisson batches, no noise) on data where group 1's labels are noise: its
    held-out − training loss gap ends above group 0's (memorised, not learned); clipped fractions are shares in
    [0, 1], and at a tiny bound every gradient is clipped; a call before backward() is refused."""
    import pandas as pd
    import torch
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    from fairdp_core.audit.proxy import GroupProxy

    rng = np.random.default_rng(0)
    n = 400
    g = rng.integers(0, 2, n)
    X = rng.normal(size=(n, 20)).astype(np.float32)
    y = np.where(g == 0, (X[:, 0] > 0).astype(int), rng.integers(0, 2, n))  # group 1: random labels
    tr, ho = np.arange(200), np.arange(200, n)

    def run(clip, epochs):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(20, 128), torch.nn.ReLU(), torch.nn.Linear(128, 2))
        loader = DataLoader(TensorDataset(torch.as_tensor(X[tr]), torch.as_tensor(y[tr]), torch.as_tensor(g[tr])),
                            batch_size=25)
        model, opt, dl = PrivacyEngine().make_private(module=model, optimizer=torch.optim.SGD(model.parameters(),
                                                      lr=0.5), data_loader=loader, noise_multiplier=0.0,
                                                      max_grad_norm=clip)
        proxy = GroupProxy(train_sample=(X[tr], y[tr], g[tr]), holdout=(X[ho], y[ho], g[ho]))
        if clip > 1:
            with pytest.raises(ValueError, match="no per-sample gradients"):
                proxy.observe_batch(opt, g[:5])
        for epoch in range(epochs):
            for xb, yb, gb in dl:
                if len(xb) == 0:
                    continue
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(xb), yb).backward()
                proxy.observe_batch(opt, gb)
                opt.step()
            proxy.record(model, epoch)
        return proxy

    proxy = run(10.0, 30)
    t = proxy.table()
    assert list(t.columns) == ["epoch", "group", "train_loss", "holdout_loss", "gap", "clipped_fraction"]
    assert len(t) == 60 and t.clipped_fraction.between(0, 1).all()
    assert np.allclose(t.gap, t.holdout_loss - t.train_loss)
    last = t[t.epoch == 29].set_index("group")
    assert last.loc[1, "gap"] > last.loc[0, "gap"] + 0.2, last
    assert (run(1e-6, 1).table().clipped_fraction == 1.0).all()
    proxy.write(tmp_path / "proxy.csv")
    assert len(pd.read_csv(tmp_path / "proxy.csv")) == 60


def test_one_model_against_its_recipe_on_a_bank_with_a_planted_leak():
    """A bank of 8 models over 600 audited records in 3 groups; group "c"'s members have lower loss in every model
    (the recipe leaks c most, "a" least): each one-model audit names c, ranks the groups alike, and its Δ is
    summarised against the recipe's. One model of each complementary pair is compared (a pair's two models are
    mirror images: with one function for both, their audits name opposite groups whatever the recipe)."""
    from fairdp_core.audit.one_vs_recipe import compare_bank

    rng = np.random.default_rng(4)
    M, m = 8, 600
    group = np.repeat([0, 1, 2], m // 3)
    membership = np.zeros((M, m), bool)
    for j in range(0, M, 2):  # complementary pairs, as the study's design
        half = rng.permutation(m) < m // 2
        membership[j], membership[j + 1] = half, ~half
    shift = np.array([0.0, 0.5, 1.5])[group]
    loss = rng.exponential(1.0, (M, m)) + 1.0 - membership * shift  # members of c fitted closest
    res = compare_bank(loss, membership, group, ["a", "b", "c"], {"a": 1.0, "b": 10.0, "c": 40.0}, n_null=5,
                       clipped={"a": 0.9, "b": 0.5, "c": 0.1})
    assert res["riskiest_agrees"] == 1.0 and res["recipe_riskiest"] == "c"
    assert res["spearman_mean"] > 0.9
    assert res["n_models"] == 4 and res["one_delta_sd_pp"] > 0  # one model of each complementary pair
    assert list(res["per_model"].model) == [0, 2, 4, 6]
    assert res["bias_pp"] == pytest.approx(res["one_delta_mean_pp"] - 39.0)
    # the loss-gap proxy: c's gap (1.5) dwarfs the sampling noise, so every model names c; ranks alike on average
    assert res["gap_riskiest_agrees"] == 1.0 and res["gap_spearman_mean"] > 0.8
    gaps = res["per_model"].gap_riskiest
    assert (gaps == "c").all()
    # a clipped fraction ranked the other way round names a, not c, and correlates −1
    assert res["clip_riskiest_agrees"] == 0.0 and res["clip_spearman"] == pytest.approx(-1.0)
    # mirror images: both models of each pair share one loss function of the records, with no membership effect
    same = np.repeat(rng.exponential(1.0, (M // 2, m)), 2, axis=0)
    mirror = compare_bank(same, membership, group, ["a", "b", "c"], {"a": 1.0, "b": 10.0, "c": 40.0}, n_null=5)
    assert mirror["n_models"] == 4  # counting both of a pair would force its agreement to 50%: never done
    flat = compare_bank(loss, membership, group, ["a", "b", "c"], {"a": 1.0, "b": 10.0, "c": 40.0}, n_null=5)
    assert np.isnan(flat["clip_riskiest_agrees"]) and np.isnan(flat["clip_spearman"])  # no DP: no clipping


@pytest.mark.slow
def test_the_german_credit_one_model_example_finds_the_memorising_model_and_not_the_dp_one(tmp_path):
    """examples/german_credit_one_model.py end to end (about 20 s): a non-private MLP trained 200 epochs on half of
    German credit leaks (each sex's advantage interval lies above 0); the same MLP with Opacus's make_private at ε = 3
    does not (each interval holds 0), and its accounting line states σ, q, T, C and the accountant."""
    import os
    import subprocess
    import sys

    import pandas as pd

    from .conftest import ROOT

    env = {**os.environ, "FAIRDP_DATA_MIRROR": os.environ.get("FAIRDP_DATA_MIRROR",
                                                              str(ROOT.parent / "shared" / "datasets"))}
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "german_credit_one_model.py"),
                          str(tmp_path / "german_credit.csv"), str(tmp_path / "out")],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "(Poisson), T = 500, C = 1, RDP accountant: ε = 3.00 at δ = 1e-05" in run.stdout
    for name in ("sgd", "dpsgd"):
        df = pd.read_csv(tmp_path / "out" / f"{name}_scores.csv")
        assert len(df) == 1000 and df["member"].sum() == 500 and set(df["sex"]) == {"female", "male"}
        res = one.audit_one(-df.loss[df.member == 1], -df.loss[df.member == 0], df.sex[df.member == 1],
                            df.sex[df.member == 0], seed=0)
        if name == "sgd":
            assert (res.table()["lo_pp"] > 0).all(), res.table()
        else:
            assert ((res.table()["lo_pp"] < 0) & (res.table()["hi_pp"] > 0)).all(), res.table()


def _saved_model_and_records(tmp_path, *, leak: bool):
    """A small MLP trained on the member half of 1,600 records and saved (torch.export; TorchScript for the fixed
    rule), and the records' CSV. Group
    f's labels are coin flips, so a model trained long enough memorises its members (the planted leak); without
    ``leak`` every label follows x0 and the model is a fixed linear rule that never saw the data."""
    import pandas as pd
    import torch

    rng = np.random.default_rng(1)
    n, d = 1600, 12
    X = rng.normal(size=(n, d)).astype(np.float32)
    sex = rng.choice(["f", "m"], n)
    member = rng.integers(0, 2, n)
    y = (X[:, 0] > 0).astype(int)
    if leak:
        y = np.where(sex == "f", rng.integers(0, 2, n), y)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(d, 128), torch.nn.Tanh(), torch.nn.Linear(128, 2))
    if leak:
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        Xm, ym = torch.as_tensor(X[member == 1]), torch.as_tensor(y[member == 1])
        for _ in range(400):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(Xm), ym).backward()
            opt.step()
    else:
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
            model[0].weight[0, 0], model[2].weight[1, 0], model[2].weight[0, 0] = 1.0, 2.0, -2.0
    path = tmp_path / ("leaky.pt2" if leak else "fixed.pt")
    if leak:  # both formats: a torch.export program (batch size left dynamic) and TorchScript
        example = (torch.zeros(4, d),)
        torch.export.save(torch.export.export(model, example, dynamic_shapes=({0: torch.export.Dim("batch")},)), path)
    else:
        torch.jit.save(torch.jit.script(model), str(path))
    csv = tmp_path / "records.csv"
    pd.DataFrame({**{f"x{j}": X[:, j] for j in range(d)}, "label": y, "member": member, "sex": sex,
                  "rid": np.arange(n)}).to_csv(csv, index=False)
    return path, csv


@pytest.mark.slow  # end to end: 26 s beside other jobs: make test-slow (CI runs both suites)
def test_the_command_audits_a_saved_model_with_a_planted_leak_and_one_without(tmp_path, capsys):
    """--model-file: an exported model that memorised group f's training records is found riskier for f (Δ's
    interval above 0); a fixed rule that never saw the records has both groups' advantage intervals holding 0."""
    import json

    import pandas as pd

    from fairdp_core.cli import main

    model, csv = _saved_model_and_records(tmp_path, leak=True)
    out = tmp_path / "leaky"
    assert main(["audit-one", "--model-file", str(model), "--data", str(csv), "--label", "label", "--group", "sex",
                 "--id", "rid", "--out", str(out), "--n-null", "20"]) == 0
    assert "Riskier for f than for m" in capsys.readouterr().out
    assert json.loads((out / "summary.json").read_text())["delta_lo"] > 0
    model, csv = _saved_model_and_records(tmp_path, leak=False)
    out = tmp_path / "fixed"
    assert main(["audit-one", "--model-file", str(model), "--data", str(csv), "--label", "label", "--group", "sex",
                 "--drop", "rid", "--out", str(out), "--n-null", "20"]) == 0
    groups = pd.read_csv(out / "groups.csv")
    assert (groups.lo_pp < 0).all() and (groups.hi_pp > 0).all()


def test_a_saved_model_with_bad_inputs_is_refused_before_any_output(tmp_path, capsys):
    """Each bad input: one line naming the problem, exit 2, nothing written."""
    import pandas as pd
    import torch

    from fairdp_core.cli import main

    model, csv = _saved_model_and_records(tmp_path, leak=False)
    out = tmp_path / "out"
    base = ["audit-one", "--model-file", str(model), "--data", str(csv), "--group", "sex", "--out", str(out)]
    df = pd.read_csv(csv)
    cases = []
    shared = df.assign(rid=df.rid % 100)  # IDs reused between members and non-members
    shared.to_csv(tmp_path / "shared.csv", index=False)
    cases.append((["--label", "label", "--id", "rid"], "shared.csv", "record IDs are both in the training and"))
    df.assign(label=df.label + 2).to_csv(tmp_path / "three.csv", index=False)  # labels past the model's 2 outputs
    cases.append((["--label", "label", "--drop", "rid"], "three.csv", "needs one column per class"))
    df.assign(city="Paris").to_csv(tmp_path / "text.csv", index=False)
    cases.append((["--label", "label", "--drop", "rid"], "text.csv", "not numeric: 'city'"))
    cases.append((["--label", "lab"], "records.csv", "no column 'lab'"))
    for extra, data, message in cases:
        args = [a if a != str(csv) else str(tmp_path / data) for a in base] + extra
        assert main(args) == 2, message
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
        assert not out.exists()
    torch.save(torch.nn.Linear(2, 2), tmp_path / "pickled.pt")  # a pickled module: never unpickled
    assert main([a if a != str(model) else str(tmp_path / "pickled.pt") for a in base] + ["--label", "label"]) == 2
    err = capsys.readouterr().err
    assert "neither TorchScript nor a torch.export program" in err and "Traceback" not in err and not out.exists()
    df.assign(extra=1.0).to_csv(tmp_path / "wide.csv", index=False)  # 13 inputs for a 12-input model
    assert main([a if a != str(csv) else str(tmp_path / "wide.csv") for a in base] + ["--label", "label",
                                                                                        "--drop", "rid"]) == 2
    err = capsys.readouterr().err
    assert "the model failed on" in err and "Traceback" not in err and not out.exists()
    three = torch.nn.Sequential(torch.nn.Linear(12, 3))
    torch.jit.save(torch.jit.script(three), str(tmp_path / "three.pt"))
    assert main(base + ["--label", "label", "--drop", "rid", "--reference-model", str(tmp_path / "three.pt")]) == 2
    assert "a reference must classify the same classes" in capsys.readouterr().err and not out.exists()
    assert main(base[:1] + ["--group", "sex", "--out", str(out)]) == 2  # no source at all
    assert "give --scores CSV" in capsys.readouterr().err


def _difficulty_bank(leak: float, *, n: int = 2000, refs: int = 4, seed: int = 5):
    """Per-record difficulty d (a loss every model shares) that varies far more than the target's membership effect:
    the target's loss is d − ``leak`` on group f's members; each reference model (trained on none of the records)
    sees d plus a little noise."""
    rng = np.random.default_rng(seed)
    sex = rng.choice(["f", "m"], n)
    member = rng.integers(0, 2, n).astype(bool)
    d = rng.exponential(1.5, n)
    target = np.maximum(d - leak * (member & (sex == "f")) + rng.normal(0, 0.05, n), 1e-3)
    ref = np.maximum(d[None] + rng.normal(0, 0.05, (refs, n)), 1e-3)
    return target, ref, member, sex


def test_rmia_calibration_finds_a_leak_that_record_difficulty_hides_and_covers_0_without_one():
    """Hand-checked form: with a = 1 the calibrated score is −loss − log mean_r exp(−loss_r). On a bank where
    record difficulty swamps the membership effect, the raw loss threshold barely sees group f's leak while the
    calibrated score finds it (f's interval above 0, Δ's too); with no leak both groups' calibrated intervals hold 0."""
    from fairdp_core.audit.one import audit_one, calibrated_scores

    t, ref = np.array([1.0, 2.0]), np.array([[0.5, 2.0], [1.5, 2.0]])
    expected = -t - np.log((np.exp(-0.5) + np.exp(-1.5)) / 2 * np.array([1, 0]) + np.exp(-2.0) * np.array([0, 1]))
    assert np.allclose(calibrated_scores(t, ref), expected)
    with pytest.raises(ValueError, match="reference losses"):
        calibrated_scores(t, ref[:, :1])
    # a < 1: Pr(x) = ½((1 + a)·Pr_OUT(x) + (1 − a)), by hand for a = 0.3
    pr_out = np.array([(np.exp(-0.5) + np.exp(-1.5)) / 2, np.exp(-2.0)])
    assert np.allclose(calibrated_scores(t, ref, a=0.3), -t - np.log(0.5 * (1.3 * pr_out + 0.7)))
    # losses far beyond exp's range: still finite, and still ordered by how much better the target fits
    huge = calibrated_scores(np.array([900.0, 1000.0]), np.array([[1000.0, 1000.0], [1100.0, 1000.0]]))
    assert np.isfinite(huge).all() and huge[0] > huge[1]
    target, ref, member, sex = _difficulty_bank(leak=0.4)
    raw = audit_one(-target[member], -target[~member], sex[member], sex[~member], n_null=20, seed=0)
    cal_s = calibrated_scores(target, ref)
    cal = audit_one(cal_s[member], cal_s[~member], sex[member], sex[~member], n_null=20, seed=0)
    f_raw = raw.table().set_index("group").loc["f"]
    f_cal = cal.table().set_index("group").loc["f"]
    assert f_cal.lo_pp > 0 and cal.delta()["delta_lo"] > 0
    assert f_cal.gpr_pp > f_raw.gpr_pp + 20  # calibration removes the difficulty the raw loss carries
    target, ref, member, sex = _difficulty_bank(leak=0.0)
    cal_s = calibrated_scores(target, ref)
    none = audit_one(cal_s[member], cal_s[~member], sex[member], sex[~member], n_null=20, seed=0)
    assert (none.table().lo_pp < 0).all() and (none.table().hi_pp > 0).all()


def test_the_command_adds_the_calibrated_audit_from_reference_losses(tmp_path, capsys):
    import json

    import pandas as pd

    from fairdp_core.cli import main

    target, ref, member, sex = _difficulty_bank(leak=0.4)
    csv = tmp_path / "scores.csv"
    pd.DataFrame({"loss": target, **{f"ref{r}": ref[r] for r in range(len(ref))}, "member": member.astype(int),
                  "sex": sex}).to_csv(csv, index=False)
    out = tmp_path / "audit"
    refs = [a for r in range(len(ref)) for a in ("--reference-loss", f"ref{r}")]
    assert main(["audit-one", "--scores", str(csv), "--score", "loss", "--group", "sex", "--out", str(out),
                 *refs]) == 2
    assert "--reference-loss calibrates a loss" in capsys.readouterr().err and not out.exists()
    assert main(["audit-one", "--scores", str(csv), "--loss", "loss", "--group", "sex", "--out", str(out),
                 "--n-null", "20", *refs]) == 0
    printed = capsys.readouterr().out
    assert "RMIA, calibrated by 4 reference models:" in printed and "Riskier for f than for m" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rmia_offline"]["delta_lo"] > 0 and summary["rmia_offline"]["references"] == 4
    assert summary["rmia_offline"]["delta_pp"] > summary["delta_pp"]
    assert (out / "groups_rmia_offline.csv").is_file() and (out / "groups.csv").is_file()


def test_the_engines_proxy_records_each_epoch_and_leaves_the_bank_unchanged():
    """train_bank(on_epoch=BankGroupProxy(...)): one row per epoch, model and group; group 1's labels are coin
    flips, so its held-out − training gap ends above group 0's; clipped fractions are shares under DP-SGD and NaN
    under SGD; the bank's parameters are bit-identical with and without the observer (it draws no random numbers)."""
    import math

    import torch

    from fairdp_core.audit.proxy import BankGroupProxy
    from fairdp_core.engine import TrainSpec, train_bank

    rng = np.random.default_rng(2)
    n, n_ho, d = 600, 400, 10
    X = rng.normal(size=(n + n_ho, d)).astype(np.float32)
    g = rng.integers(0, 2, n + n_ho)
    y = np.where(g == 1, rng.integers(0, 2, n + n_ho), (X[:, 0] > 0).astype(int)).astype(np.int64)
    half = rng.permutation(n) < n // 2
    membership = np.stack([half, ~half, half, ~half])
    tr = slice(0, n)
    for spec in (TrainSpec(algorithm="sgd", model="mlp", epochs=40, batch_size=64, lr=1.0, hidden=128),
                 TrainSpec(algorithm="dpsgd", model="mlp", epochs=2.5, batch_size=64, lr=0.5, hidden=64,
                           target_epsilon=10.0, clip=0.5)):
        proxy = BankGroupProxy(X[tr], y[tr], g[tr], membership, holdout=(X[n:], y[n:], g[n:]), sample=200)
        kw = dict(n_classes=2, n_groups=2, seed=0, progress=False)
        watched = train_bank(X[tr], y[tr], g[tr], membership, spec, on_epoch=proxy, **kw)
        plain = train_bank(X[tr], y[tr], g[tr], membership, spec, **kw)
        assert all(torch.equal(watched.params[k], plain.params[k]) for k in plain.params)
        with pytest.raises(ValueError, match="group codes"):
            BankGroupProxy(X[tr], y[tr], g[tr] - 1, membership, holdout=(X[n:], y[n:], g[n:]))
        t = proxy.table()
        epochs = math.ceil(spec.epochs)  # 2.5 epochs: the last, partial one is epoch 3
        assert len(t) == epochs * 4 * 2 and sorted(t.epoch.unique()) == list(range(1, epochs + 1))
        if spec.algorithm == "sgd":
            last = t[t.epoch == spec.epochs].groupby("group").gap.mean()
            assert last[1] > last[0] + 0.2  # the memorised coin flips (measured: 0.75 against 0.34)
            assert t.clipped_fraction.isna().all()
        else:
            assert t.clipped_fraction.between(0, 1).all() and t.clipped_fraction.max() > 0


@pytest.mark.parametrize("rule", ["dpsgd_s", "dpsgd_f"])
def test_group_proxy_counts_clips_at_each_groups_own_bound(rule):
    """With the group-aware Opacus optimizers each sample is clipped at its own group's bound (DP-SGD-S: set before
    the step; DPSGD-F: set inside step() from the batch's released counts): GroupProxy counts a gradient as clipped
    exactly when its norm exceeds that bound, not the largest one. Two batches of 20, group 1's bound below most of
    its norms: at least 18 of its 20 gradients are clipped, and counting against max_k C_k misses most of them."""
    import torch
    from opacus import GradSampleModule

    from fairdp_core.audit.proxy import GroupProxy
    from fairdp_core.opacus_compat import DPSGDFOptimizer, DPSGDSOptimizer

    torch.manual_seed(3)
    model = GradSampleModule(torch.nn.Linear(5, 2))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    if rule == "dpsgd_s":
        opt = DPSGDSOptimizer(sgd, noise_multiplier=0.5, sigma_b=1e9, n_groups=2, expected_batch_size=20)
        opt.Q = torch.tensor([50.0, 0.05])
    else:  # C_k = C0·(1 + a_k / mean_j a_j): group 1 all above C0, group 0 none
        opt = DPSGDFOptimizer(sgd, noise_multiplier=1e-5, sigma_b=1e-4, n_groups=2, expected_batch_size=20, clip=1.0)
    X = np.random.default_rng(3).normal(size=(40, 5)).astype(np.float32)
    g = np.repeat([0, 1], 10).tolist() * 2
    X[np.array(g) == 0] *= 0.01 if rule == "dpsgd_s" else 0.7  # group 0: smaller gradients (DPSGD-F: a smaller bound)
    y = np.zeros(40, dtype=int)
    proxy = GroupProxy(train_sample=(X, y, np.array(g)), holdout=(X, y, np.array(g)))
    want, at_max = {0: 0, 1: 0}, {0: 0, 1: 0}
    for b in range(2):
        xb, yb, gb = torch.as_tensor(X[20 * b:20 * b + 20]), torch.as_tensor(y[20 * b:20 * b + 20]), torch.tensor(
            g[20 * b:20 * b + 20])
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        norms = torch.stack([p.grad_sample.reshape(20, -1).norm(dim=1) for p in model.parameters()], 1).norm(dim=1)
        proxy.observe_batch(opt, gb)
        opt.set_groups(gb)
        opt.step()
        cut = norms > opt.last_sample_bounds  # the bounds step() clipped at, one per sample
        for k in (0, 1):
            want[k] += int(cut[gb == k].sum())
            at_max[k] += int((norms[gb == k] > opt.last_sample_bounds.max()).sum())
        assert len(set(opt.last_sample_bounds[gb == 1].tolist())) == 1  # one bound per group
    proxy.record(model._module, 0)
    t = proxy.table().set_index("group")
    assert sum(want.values()) >= sum(at_max.values()) + (10 if rule == "dpsgd_s" else 2)  # max_k C_k misses clips
    assert t.loc[1, "clipped_fraction"] == want[1] / 20 and t.loc[0, "clipped_fraction"] == want[0] / 20
    # observed but never stepped: refused, not counted against stale bounds
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(xb), yb).backward()
    proxy.observe_batch(opt, gb)
    with pytest.raises(RuntimeError, match="has not clipped the observed batch"):
        proxy.record(model._module, 1)


def test_one_model_contrasts_are_simultaneous_over_many_groups():
    """Six groups with no leak at all (member and held-out scores from one distribution): over 300 audits, the share
    in which ANY of the 15 pairwise contrast intervals excludes 0 stays at the stated 5% (Bonferroni over the pairs;
    seed 7, Monte Carlo SE 0.013, tolerance 0.08). With unadjusted 95% intervals (z 1.96) the same audits exclude 0
    somewhere in 37 of 300 (0.12): this test fails."""
    from fairdp_core.audit.one import audit_one

    rng = np.random.default_rng(7)
    K, n, studies = 6, 60, 300
    g = np.repeat(np.arange(K), n)
    any_excl = 0
    for i in range(studies):
        res = audit_one(rng.normal(size=K * n), rng.normal(size=K * n), g, g, n_null=0, seed=i)
        c = res.contrasts()
        assert len(c) == K * (K - 1) // 2
        any_excl += bool(((c.lo_pp > 0) | (c.hi_pp < 0)).any())
    assert any_excl / studies <= 0.08, any_excl / studies


def test_one_model_low_fpr_rows_only_with_enough_non_members():
    """TPR at 1% FPR needs 100 non-members in the group, at 0.1% 1,000: below that the row is n/a and says why."""
    from fairdp_core.audit.one import audit_one

    rng = np.random.default_rng(1)
    g_in = np.repeat([0, 1, 2], [200, 200, 200])
    g_out = np.repeat([0, 1, 2], [60, 150, 1200])
    res = audit_one(rng.normal(0.3, 1, 600), rng.normal(size=len(g_out)), g_in, g_out, n_null=0)
    t = res.table().set_index("group")  # group labels as text, as in every audit's table
    assert np.isnan(t.loc["0", "tpr_at_0.01_fpr"]) and "60 non-members, 100 needed" in t.loc["0", "tpr_at_0.01_fpr_note"]
    assert np.isfinite(t.loc["1", "tpr_at_0.01_fpr"]) and np.isnan(t.loc["1", "tpr_at_0.001_fpr"])
    assert np.isfinite(t.loc["2", "tpr_at_0.001_fpr"]) and t.loc["2", "tpr_at_0.001_fpr_note"] == ""


def test_confident_records_get_distinct_losses_and_the_auc_is_mann_whitneys():
    """Logit margins of 20-60 (a memorising model): float32 cross-entropy ties them all at exactly 0, the float64
    margin-based loss keeps them apart and ordered; the per-group AUC is P(member > non-member), ties half."""
    import torch

    from fairdp_core.audit.one import audit_one, loss_scores, tie_share

    margins = np.linspace(20, 60, 50)
    logits = torch.tensor(np.stack([margins, np.zeros(50)], 1), dtype=torch.float32)
    y = np.zeros(50, dtype=np.int64)
    f32 = -torch.nn.functional.cross_entropy(logits, torch.as_tensor(y), reduction="none").numpy()
    assert tie_share(f32) == 1.0  # every float32 loss is 0
    s = loss_scores(torch.nn.Identity(), logits.numpy(), y)
    assert tie_share(s) == 0.0 and np.all(np.diff(s) > 0)  # larger margin, less loss, higher score
    np.testing.assert_allclose(-s, np.exp(-logits.numpy()[:, 0].astype(float)), rtol=1e-8)  # log(1 + e^-m) = e^-m
    rng = np.random.default_rng(0)
    s_in, s_out = rng.normal(0.5, 1, 200), rng.normal(0, 1, 200)
    g_in, g_out = np.resize(["a", "b"], 200), np.resize(["a", "b"], 200)
    res = audit_one(s_in, s_out, g_in, g_out, n_null=5)
    for k in ("a", "b"):
        a, b = s_in[g_in == k], s_out[g_out == k]
        want = ((a[:, None] > b[None]).sum() + 0.5 * (a[:, None] == b[None]).sum()) / (len(a) * len(b))
        assert res.table().set_index("group").loc[k, "auc"] == pytest.approx(want)


def test_the_command_warns_when_tied_scores_dominate(tmp_path, capsys):
    """A scores file whose held-out losses are mostly exactly 0 (float32 underflow): one warning names the share
    and says to save the loss in float64."""
    rng = np.random.default_rng(1)
    n = 400
    loss = np.where(rng.random(n) < 0.6, 0.0, rng.exponential(1.0, n))
    pd.DataFrame({"loss": loss, "member": np.resize([0, 1], n), "g": np.resize(["a", "a", "b", "b"], n)}).to_csv(
        tmp_path / "s.csv", index=False)
    assert cli_main(["audit-one", "--scores", str(tmp_path / "s.csv"), "--loss", "loss", "--group", "g", "--out",
                     str(tmp_path / "o"), "--n-null", "5"]) == 0
    err = capsys.readouterr().err
    assert "of the held-out records' scores equal another's (loss); the TPR at a low FPR is unreliable" in err
    assert "save it in float64" in err


def test_the_command_slices_by_another_column_and_says_what_it_leaves_out(tmp_path, capsys):
    """`audit-one --slice COL`: the risk cut by another column, as by --group: a leak planted in one age band is
    found there (and not across sex), a value under --min-per-group is left out and named, a missing slice column is
    refused before any output."""
    import json

    rng = np.random.default_rng(1)
    n = 2400
    sex, age = rng.choice(["f", "m"], n), rng.choice(["young", "old"], n)
    age[:30] = "teen"  # 30 records, about 15 members and 15 held out: under --min-per-group (20)
    mem = rng.integers(0, 2, n)
    loss = rng.exponential(1.0, n) - 0.6 * mem * (age == "young")  # the model fits its young training records closer
    csv = tmp_path / "scores.csv"
    pd.DataFrame({"loss": loss, "member": mem, "sex": sex, "age": age}).to_csv(csv, index=False)
    out = tmp_path / "audit"
    base = ["audit-one", "--scores", str(csv), "--loss", "loss", "--group", "sex", "--n-null", "20"]
    assert cli_main(base + ["--out", str(out), "--slice", "agee"]) == 2
    assert "--slice: no column 'agee'" in capsys.readouterr().err and not out.exists()
    assert cli_main(base + ["--out", str(out), "--slice", "age"]) == 0
    printed = capsys.readouterr().out
    assert "Slice by age (1 value left out" in printed and "'teen'" in printed
    assert "Riskiest: young" in printed and "young records are at higher risk" in printed
    s = pd.read_csv(out / "slices.csv")
    assert set(s["value"]) == {"old", "young"} and set(s["slice"]) == {"age"}
    young = s.set_index("value").loc["young"]
    assert young["lo_pp"] > 5 and young["n_members"] + young["n_nonmembers"] == int((age == "young").sum())
    summ = json.loads((out / "summary.json").read_text())
    assert summ["slices"]["age"]["delta_lo"] > 0
    assert summ["slices"]["age"]["left_out"] == [{"value": "teen", "members": 13, "held_out": 17}]
    assert summ["delta_lo"] == 0  # across sex, where nothing was planted, Δ's interval holds 0
