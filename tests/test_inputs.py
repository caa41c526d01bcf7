"""The practitioner's path against real mistakes: an output directory never loses a file fairdp did not write,
every input problem is one line (exit 2, no traceback) before any training, the answer comes first, and the files
hold the numbers they say (slices.csv in pp)."""

from __future__ import annotations

import json
import os
import shutil
import string
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fairdp_core.atomic import MANIFEST, OutputDirError, check_output_dir
from fairdp_core.audit.custom import AuditSettings, audit_bank
from fairdp_core.audit.custom_csv import audit_csv
from fairdp_core.audit.inference import cross_fit_contributions, group_inference
from fairdp_core.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]


def _audit(seed=0, m=120, M=8, leak=0.0):
    """A CustomAudit from a synthetic bank (no training): complementary pairs, two groups, group 1 leaking."""
    rng = np.random.default_rng(seed)
    g = np.arange(m) % 2
    first = rng.random((M // 2, m)) < 0.5
    mem = np.empty((M, m), dtype=bool)
    mem[0::2], mem[1::2] = first, ~first
    loss = rng.exponential(1.0, (M, m)) * np.where(mem & (g[None] == 1), 1.0 - leak, 1.0)  # members of "male" fit
    return audit_bank(loss, mem, np.where(g == 0, "female", "male"), slices={"half": (np.arange(m) < m // 2)
                                                                                      .astype(str)}, n_perm=50,
                      n_null=5), loss, mem, g


@pytest.fixture(scope="module")
def result():
    return _audit()[0]


def _snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


@pytest.mark.slow
def test_a_user_file_and_the_input_survive_every_write_path(result, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "data.csv").write_text("a,b\n1,2\n")
    before = _snapshot(out)
    for force in (False, True):
        with pytest.raises(OutputDirError, match="did not write"):
            result.write(out, force=force)
        assert _snapshot(out) == before
    # the input itself as the target's parent, or the target holding it
    for target in (tmp_path, out):
        with pytest.raises(OutputDirError):
            result.write(target, force=True, protect=(out / "data.csv",))
    assert _snapshot(out) == before
    # a previous fairdp output: refused without force; with force exactly the manifest's files replaced
    new = tmp_path / "audit"
    result.write(new)
    listed = set(json.loads((new / MANIFEST).read_text())["files"])
    assert listed == {"summary.json", "groups.csv", "records.csv", "slices.csv", "roc.csv", "roc.png", "report.md"}
    with pytest.raises(OutputDirError, match="--force"):
        result.write(new)
    (new / "groups.csv").write_text("stale")
    result.write(new, force=True)
    assert (new / "groups.csv").read_text() != "stale"
    assert json.loads((new / MANIFEST).read_text()) == {"files": sorted(listed), "complete": True}
    assert not [p for p in new.iterdir() if p.name.endswith(".tmp")]
    (new / "mine.txt").write_text("mine")  # a user file added later: force refuses too
    with pytest.raises(OutputDirError, match="mine.txt"):
        result.write(new, force=True)
    assert (new / "mine.txt").read_text() == "mine"


def test_the_cli_refuses_before_any_work(tmp_path, monkeypatch, capsys):
    """`audit-custom --out .` beside the input, and --out holding a user file: exit 2, one line, nothing trained
    (no audit module is even called: the check runs first), nothing lost, --force included."""
    import fairdp_core.audit.custom_csv as custom_csv

    monkeypatch.chdir(tmp_path)
    pd.DataFrame({"x": range(40), "g": ["a", "b"] * 20, "y": [0, 1, 1, 0] * 10}).to_csv("in.csv", index=False)
    Path("keep.txt").write_text("mine")
    monkeypatch.setattr(custom_csv, "audit_model", lambda *a, **k: pytest.fail("trained before checking --out"))
    for extra in ([], ["--force"]):
        rc = cli_main(["audit-custom", "--data", "in.csv", "--label", "y", "--group", "g", "--out", ".", *extra])
        err = capsys.readouterr().err
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert sorted(os.listdir(".")) == ["in.csv", "keep.txt"] and Path("keep.txt").read_text() == "mine"


def test_slices_csv_is_in_pp_and_recomputes(result):
    """slices.csv's Δ bounds are in pp like every other column: recompute one slice's interval from
    group_inference (which gives Δ's bounds in pp), not 100 × that."""
    _, loss, mem, g = _audit()
    labels = (np.arange(len(g)) < len(g) // 2).astype(str)
    values, code = np.unique(labels, return_inverse=True)
    res = group_inference(cross_fit_contributions(-loss, mem), code, len(values), alpha=0.05)
    row = result.slices[(result.slices.slice == "half") & (result.slices.attack == "alooa_cross_fit")].iloc[0]
    assert row.delta_lo_pp == pytest.approx(res["delta_lo"]) and row.delta_hi_pp == pytest.approx(res["delta_hi"])
    assert row.gpr_pp == pytest.approx(100 * res["gpr"][0])
    assert abs(row.delta_hi_pp) < 100  # an advantage difference in pp is at most 100


def test_the_answer_comes_first_with_the_signed_contrast():
    """A planted leak in group "male": the first line of the answer (and of report.md) is the signed
    female − male contrast with its interval and p, the same numbers as the summary's contrast."""
    res = _audit(leak=0.8)[0]
    c = res.summary["attacks"]["alooa_cross_fit"]["contrast"]
    line = res.answer()[0]
    assert line.startswith("Riskier for female than for male? GPR female − male = ")
    assert f"{c['diff_pp']:+.2f} pp [{c['lo_pp']:+.2f}, {c['hi_pp']:+.2f}]" in line
    assert c["diff_pp"] < 0 and "male records are at higher risk" in line
    md = res.markdown().splitlines()
    assert md[2:4] == res.headline() and f"- {line}" in md  # report.md: the headline, then each pair


def test_with_five_groups_the_first_line_answers():
    """Five groups, one of them ("e") leaking: the first line says some group is at higher risk, with Δ and its
    null floor; the second names "e" riskiest and the safest group with their Holm-adjusted contrast (the summary's
    own numbers). With no leak the first line says no difference was detected."""
    rng = np.random.default_rng(3)
    m, M = 400, 16
    g = np.arange(m) % 5
    first = rng.random((M // 2, m)) < 0.5
    mem = np.empty((M, m), dtype=bool)
    mem[0::2], mem[1::2] = first, ~first
    names = np.array(list("abcde"))
    for leak, want in ((0.9, "Yes"), (0.0, "No difference detected")):
        loss = rng.exponential(1.0, (M, m)) * np.where(mem & (g[None] == 4), 1.0 - leak, 1.0)
        res = audit_bank(loss, mem, names[g], n_perm=50, n_null=5)
        head = res.headline()
        a = res.summary["attacks"]["alooa_cross_fit"]
        assert head[0].startswith(f"Is some group at higher membership risk? {want}: Δ = {a['delta_pp']:.2f} pp")
        assert f"null floor {a['null_floor_pp']:.2f} pp" in head[0] and "over 5 groups" in head[0]
        if leak:
            t = res.table().set_index("group")["gpr_pp"]
            assert head[1].startswith(f"Riskiest: e (GPR {t['e']:.2f} pp); safest: {t.idxmin()}")
            c = next(c for c in a["contrasts"] if {names[c["k"]], names[c["l"]]} == {"e", t.idxmin()})
            assert f"Holm p = {c['p_holm']:.2g}" in head[1] and f"{abs(c['diff_pp']):.2f} pp [" in head[1]


def _csv(tmp_path: Path, name: str, df: pd.DataFrame | None = None, text: str | None = None) -> Path:
    p = tmp_path / name
    if text is not None:
        p.write_text(text)
    else:
        df.to_csv(p, index=False)
    return p


def _frame(n=60):
    rng = np.random.default_rng(0)
    return pd.DataFrame({"x": rng.normal(size=n), "z": rng.normal(size=n), "g": np.resize(["a", "b"], n),
                         "y": np.resize(["good", "bad", "good"], n)})


BAD_INPUTS = {
    "empty": (dict(text=""), "the file is empty"),
    "whitespace": (dict(text="\n  \n"), "the file is empty"),
    "header only": (dict(text="x,g,y\n"), "a header (3 columns) and no data rows"),
    "one group": (dict(df=_frame().assign(g="a")), "the group column 'g' has one value"),
    "id column": (dict(df=_frame().assign(id=[f"r{i}" for i in range(60)])), "--drop id"),
    "many text values": (dict(df=_frame(120).assign(city=[f"c{i % 60}" for i in range(120)])), "--drop city"),
    "label typo": (dict(df=_frame().assign(y=["good", "bad", "Good "] * 20)), "differ only by case or whitespace"),
    "all-NaN column": (dict(df=_frame().assign(empty=np.nan)), "column 'empty' has no value in any row; pass --drop"),
    "label with many classes": (dict(df=_frame().assign(y=np.arange(60) % 30)),
                                "30 distinct values: that trains a 30-class model; pass --max-classes 30"),
}
# flags refused before the file is read (the file itself is fine)
BAD_FLAGS = {
    "epsilon 0": (["--epsilon", "0"], "--epsilon 0.0: the privacy target must be a positive number"),
    "epsilon negative": (["--epsilon", "-1"], "--epsilon -1.0: the privacy target must be a positive number"),
    "epsilon nan": (["--epsilon", "nan"], "--epsilon nan: the privacy target must be a positive number"),
    "lr 0": (["--lr", "0"], "--lr 0.0: must be positive"),
    "epochs 0": (["--epochs", "0"], "--epochs 0.0: must be positive"),
    "batch 0": (["--batch-size", "0"], "--batch-size 0: at least 1"),
    "clip 0": (["--clip", "0"], "--clip 0.0: the clip bound must be positive"),
    "R beyond memory": (["--R", "100000"], "--R 100000: 200000 models auditing 24 records need about 22.2 GB, more "
                                           "than the 8.0 GB this machine has free"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_each_bad_input_is_one_line_before_any_training(case, tmp_path, monkeypatch, capsys):
    import fairdp_core.audit.custom_csv as custom_csv

    kw, message = BAD_INPUTS[case]
    path = _csv(tmp_path, "data.csv", **kw)
    monkeypatch.setattr(custom_csv, "audit_model", lambda *a, **k: pytest.fail("trained on a bad input"))
    before = sorted(os.listdir(tmp_path))
    rc = cli_main(["audit-custom", "--data", str(path), "--label", "y", "--group", "g", "--out",
                   str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err, err
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("case", list(BAD_FLAGS))
def test_each_bad_flag_is_one_line_before_any_training(case, tmp_path, monkeypatch, capsys):
    """Impossible recipes are refused by the flags alone (the file is not read), R beyond this machine's free memory
    once the file gives the audited count: one line, no training, no output directory."""
    import fairdp_core.audit.custom as custom
    import fairdp_core.audit.custom_csv as custom_csv
    import fairdp_core.engine as engine

    flags, message = BAD_FLAGS[case]
    path = _csv(tmp_path, "data.csv", df=_frame())
    monkeypatch.setattr(engine, "train_bank", lambda *a, **k: pytest.fail("trained on a bad recipe"))
    monkeypatch.setattr(custom, "available_memory", lambda: 8e9)  # the same machine everywhere
    if case != "R beyond memory":
        monkeypatch.setattr(custom_csv, "read_user_csv", lambda p: pytest.fail("read the file for a bad flag"))
    rc = cli_main(["audit-custom", "--data", str(path), "--label", "y", "--group", "g", "--out", str(tmp_path / "o"),
                   "--min-per-group", "5", *flags])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_the_memory_refusal_can_be_overridden(tmp_path, monkeypatch, capsys):
    """--no-memory-check trains where the estimate is over what is free (training stubbed: it is reached)."""
    import fairdp_core.audit.custom as custom
    import fairdp_core.engine as engine

    path = _csv(tmp_path, "data.csv", df=_frame())
    monkeypatch.setattr(custom, "available_memory", lambda: 1e8)  # less than the 0.6 GB base

    def reached(*a, **k):
        raise ValueError("training reached")

    monkeypatch.setattr(engine, "train_bank", reached)
    args = ["audit-custom", "--data", str(path), "--label", "y", "--group", "g", "--out", str(tmp_path / "o"),
            "--min-per-group", "5", "--quiet"]
    assert cli_main(args) == 2 and "pass --no-memory-check" in capsys.readouterr().err
    assert cli_main([*args, "--no-memory-check"]) == 2 and "training reached" in capsys.readouterr().err


def test_a_constant_column_is_kept_with_a_warning_and_intervals_stay_possible(tmp_path):
    """A feature with one value is kept and named in a warning; every reported interval lies within what is
    possible (GPR ±100 pp, Δ in [0, 200] pp), and a slice too small to say anything is flagged uninformative."""
    from fairdp_core.audit.custom_csv import audit_csv

    df = _frame(120).assign(const=1.0, tiny=["u", "v", "w"] + ["big"] * 117)
    path = _csv(tmp_path, "data.csv", df=df)
    warned: list[str] = []
    res = audit_csv(path, AuditSettings(R=2, epochs=1, min_per_group=5, progress=False), label="y", group="g",
                    slices=["tiny"], on_warning=warned.append)
    assert any("column 'const' has one value ('1.0') in every row" in w for w in warned)
    sl = res.slices
    assert sl[["lo_pp", "hi_pp"]].stack().dropna().between(-100, 100).all()
    assert sl[["delta_lo_pp", "delta_hi_pp"]].stack().dropna().between(0, 200).all()
    assert res.groups[["lo_pp", "hi_pp"]].stack().dropna().between(-100, 100).all()
    for a in res.summary["attacks"].values():
        if a.get("delta_hi") is not None:
            assert 0 <= a["delta_lo"] <= a["delta_hi"] <= 200
    tiny = sl[(sl.slice == "tiny") & (sl.value.isin(["u", "v", "w"]))]
    assert len(tiny) and tiny.uninformative.all()  # one record each: no interval worth the name
    # each row by its own interval: flagged exactly where it is missing or spans 100 pp or more
    assert (sl.uninformative == ~(sl.hi_pp - sl.lo_pp < 100)).all() and (~sl.uninformative).any()


@settings(max_examples=int(os.environ.get("FAIRDP_HYPOTHESIS_EXAMPLES", "25")), deadline=None)
@given(eps=st.floats(allow_nan=True, allow_infinity=True), lr=st.floats(allow_nan=True, allow_infinity=True),
       R=st.integers(-5, 5), batch=st.integers(-5, 5))
def test_any_recipe_is_refused_in_one_line_or_accepted(eps, lr, R, batch):
    """check_recipe over arbitrary numbers: a ValueError naming a flag exactly when a value is impossible."""
    import math

    from fairdp_core.audit.custom_checks import check_recipe

    impossible = not (math.isfinite(eps) and eps > 0) or not (math.isfinite(lr) and lr > 0) or R < 2 or batch < 1
    try:
        check_recipe(epsilon=eps, lr=lr, R=R, batch_size=batch)
    except ValueError as e:
        assert impossible and str(e).startswith("--") and "\n" not in str(e)
    else:
        assert not impossible


def test_r_below_two_is_refused_before_any_work(tmp_path, capsys):
    path = _csv(tmp_path, "data.csv", df=_frame())
    assert cli_main(["audit-custom", "--data", str(path), "--label", "y", "--group", "g", "--out",
                     str(tmp_path / "o"), "--R", "1"]) == 2
    assert "--R 1: at least 2" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_dropped_rows_and_text_cells_are_warned_with_counts(tmp_path):
    """Rows with a missing value and a numeric column with a few text cells: a warning each, with counts, before
    the (here failing: one group) audit starts."""
    df = _frame(100).assign(g="a")
    df["z"] = df["z"].astype(object)
    df.loc[3, "z"] = "unknown"
    df.loc[[5, 6], "x"] = np.nan
    seen = []
    with pytest.raises(ValueError, match="one value"):
        audit_csv(_csv(tmp_path, "d.csv", df=df), label="y", group="g", on_warning=seen.append)
    assert any("column 'z': 1 text cells in a numeric column ('unknown') read as missing" in w for w in seen)
    assert any("3 of 100 rows dropped for a missing value (columns x, z)" in w for w in seen)


def test_a_yaml_syntax_error_is_one_line_with_file_line_and_column(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "params.yaml").read_text().replace("  epochs: 5", "  epochs: [5", 1)
    Path("params.yaml").write_text(text)
    (tmp_path / "runs.yaml").write_text((ROOT / "runs.yaml").read_text())
    for cmd in (["check-params"], ["grid", "--write"], ["set", "train.lr=0.2"]):
        assert cli_main(cmd) == 2
        err = capsys.readouterr().err.strip()
        line = next(i + 1 for i, t in enumerate(text.splitlines()) if "epochs: [5" in t)
        assert len(err.splitlines()) == 1 and f"params.yaml:{line + 1}:" in err and "not valid YAML" in err, err
    assert Path("params.yaml").read_text() == text


# --- property-based: malformed CSVs and params.yaml edits never trace back, never write, never lose a file ----


def _malformed_csv():
    cells = st.text(alphabet=string.ascii_letters + string.digits + " ,;\"'\t-.", max_size=12)
    rows = st.lists(st.lists(cells, min_size=0, max_size=5), min_size=0, max_size=6)
    return st.one_of(
        st.just(""), st.text(alphabet=" \n\t", max_size=5),
        rows.map(lambda rs: "\n".join(",".join(r) for r in rs)),
        st.lists(st.sampled_from(["x", "g", "y", "z"]), min_size=1, max_size=4, unique=True).map(",".join),
        st.binary(max_size=40).map(lambda b: b.decode("latin-1")))


@settings(max_examples=int(os.environ.get("FAIRDP_HYPOTHESIS_EXAMPLES", "25")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=_malformed_csv())
@example(content="\x85\x00\r\x00")  # a column name holding NEL, a line break to str.splitlines (found by hypothesis)
def test_malformed_csvs_are_one_line_and_write_nothing(content, tmp_path_factory, monkeypatch):
    import contextlib
    import io

    import fairdp_core.audit.custom_csv as custom_csv

    d = tmp_path_factory.mktemp("csv")
    (d / "data.csv").write_text(content)
    (d / "keep.txt").write_text("mine")
    monkeypatch.setattr(custom_csv, "audit_model", lambda *a, **k: (_ for _ in ()).throw(ValueError("reached training")))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli_main(["audit-custom", "--data", str(d / "data.csv"), "--label", "y", "--group", "g", "--out",
                       str(d / "out")])
    e = err.getvalue()
    assert rc == 2 and len(e.strip().splitlines()) == 1 and "Traceback" not in e, (content, e)
    assert sorted(os.listdir(d)) == ["data.csv", "keep.txt"] and (d / "keep.txt").read_text() == "mine"


@settings(max_examples=int(os.environ.get("FAIRDP_HYPOTHESIS_EXAMPLES", "25")), deadline=None)
@given(pos=st.floats(0, 1), junk=st.sampled_from([":", "[", "]", "{", "\t", "- ", "'", '"', ": :", "&a", "*b", "!!x",
                                                  "\n  bad: [", "%", "@"]))
def test_params_edits_never_trace_back_and_lose_nothing(pos, junk, tmp_path_factory):
    import contextlib
    import io

    d = tmp_path_factory.mktemp("params")
    text = (ROOT / "params.yaml").read_text()
    i = int(pos * len(text))
    broken = text[:i] + junk + text[i:]
    (d / "params.yaml").write_text(broken)
    (d / "runs.yaml").write_text((ROOT / "runs.yaml").read_text())
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli_main(["--params", str(d / "params.yaml"), "check-params"])
    e = err.getvalue()
    assert rc in (0, 2) and "Traceback" not in e
    if rc == 2:
        assert e.startswith("fairdp check-params: error: ") and (len(e.strip().splitlines()) == 1
                                                                or e.count("invalid params") == 1), e
    assert (d / "params.yaml").read_text() == broken and sorted(os.listdir(d)) == ["params.yaml", "runs.yaml"]


def test_check_output_dir_accepts_new_and_empty(tmp_path):
    check_output_dir(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    check_output_dir(tmp_path / "empty")
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputDirError, match="not a directory"):
        check_output_dir(tmp_path / "file")


def test_a_profile_runs_in_a_directory_of_its_own(tmp_path):
    """`make repro PROFILE=smoke` prepares profile-runs/smoke: a copy with the profile's params.yaml; the checkout's
    params.yaml (comments and all), its reports and its dvc.lock are untouched, and a refresh keeps the copy's own
    results and reports."""
    import hashlib
    import subprocess

    from fairdp_core.config import load_params
    from fairdp_core.study.profile_dir import prepare_profile_dir

    # a checkout of its own (a copy of the tracked files, committed), so that nothing else writes to it meanwhile
    root = tmp_path / "checkout"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode()
    for rel in filter(None, files.split("\0")):
        if (ROOT / rel).exists():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, root / rel)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)

    def digest(paths):
        return {p: hashlib.sha256((root / p).read_bytes()).hexdigest() for p in paths}

    watched = ["params.yaml", "runs.yaml", "dvc.lock", "reports/index.html"]
    before = digest(watched)
    dest = prepare_profile_dir(root, "smoke", dest=tmp_path / "smoke")
    assert digest(watched) == before
    assert "# fairdp study parameters" in (root / "params.yaml").read_text()  # the checkout keeps its comments
    assert load_params(dest / "params.yaml").profile == "smoke" and (dest / ".git").is_dir()
    assert (dest / "dvc.yaml").read_bytes() == (root / "dvc.yaml").read_bytes()
    # the copy's own outputs survive a refresh; its code is copied anew
    (dest / "reports" / "index.html").write_text("the profile's own index")
    (dest / "results").mkdir()
    (dest / "results" / "x").write_text("kept")
    (dest / "fairdp_core" / "config" / "__init__.py").write_text("stale")
    prepare_profile_dir(root, "smoke", dest=dest)
    assert (dest / "reports" / "index.html").read_text() == "the profile's own index"
    assert (dest / "results" / "x").read_text() == "kept"
    assert (dest / "fairdp_core" / "config" / "__init__.py").read_bytes() == (root / "fairdp_core" / "config" / "__init__.py").read_bytes()
    assert digest(watched) == before
    with pytest.raises(Exception, match="unknown profile"):
        prepare_profile_dir(root, "nosuch", dest=tmp_path / "x")
    # the Makefile sends a non-default profile there, the default one (and IN_PLACE=1) to the checkout
    dry = subprocess.run(["make", "-n", "repro", "PROFILE=smoke"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "fairdp_core.study.profile_dir smoke" in dry and "use-profile" not in dry.split("profile_dir")[0]
    dry = subprocess.run(["make", "-n", "repro", "PROFILE=smoke", "IN_PLACE=1"], cwd=ROOT, capture_output=True,
                         text=True).stdout
    assert "profile_dir" not in dry and "use-profile smoke" in dry


def test_ctrl_c_is_one_line_and_leaves_no_output(tmp_path, monkeypatch, capsys):
    """Ctrl-C while audit-custom trains: exit status 130, one line on stderr, no output directory, the data kept."""
    import fairdp_core.engine as engine

    path = _csv(tmp_path, "data.csv", df=_frame())

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(engine, "train_bank", interrupted)
    rc = cli_main(["audit-custom", "--data", str(path), "--label", "y", "--group", "g", "--out", str(tmp_path / "o"),
                   "--min-per-group", "5", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 130 and err[-1] == "fairdp audit-custom: interrupted; no partial output is left (rerun the same command)"
    assert "Traceback" not in "\n".join(err) and "16 models x 17 steps each on 36 of 48 records" in err[0]  # what would have run, then the end
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv"]
