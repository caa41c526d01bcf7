"""params.yaml is strict: every mistake names the key path and the file, before any work starts."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from fairdp_core.config import ConfigError, load_params

from .conftest import ROOT


def test_project_params_are_valid():
    p = load_params(ROOT / "params.yaml")
    assert p.seed >= 0
    assert set(p.data.datasets) == {"adult", "bank", "credit", "law", "law_paper", "compas", "mnist", "utkface",
                                    # the beyond-membership variants: the attribute out of the inputs; a memorising Adult;
                                    # MNIST's 60,000 and UTKFace's whole training split
                                    "adult_blind", "law_paper_blind", "compas_blind", "adult_small", "mnist_full",
                                    "utkface_full"}
    assert p.data.datasets["mnist"].train_size == 10000
    for blind in ("adult_blind", "law_paper_blind", "compas_blind"):
        opts = p.data.datasets[blind]
        assert opts.source == blind.removesuffix("_blind") and not opts.group_as_feature


def test_a_dataset_variant_names_a_known_source(write_params):
    from fairdp_core.config import ConfigError

    with pytest.raises(ConfigError, match=r"datasets.x_blind.source: unknown dataset 'adlt'"):
        load_params(write_params({"data.datasets.x_blind": {"source": "adlt"}}))
    with pytest.raises(ConfigError, match=r"datasets.adult_x: unknown dataset.*source"):
        load_params(write_params({"data.datasets.adult_x": {"group": "sex"}}))


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"data.datasets.adult.tset_fraction": 0.3}, "data.datasets.adult.tset_fraction: unknown key"),
        ({"data.mirorr": "x"}, "data.mirorr: unknown key"),
        ({"trian": {}}, "trian: unknown key"),
        ({"seed": "twelve"}, "seed:"),
        ({"data.download": "yes"}, "data.download:"),
        ({"data.datasets.law.test_fraction": 1.5}, "data.datasets.law.test_fraction:"),
        ({"data.datasets.mnist.train_size": -3}, "data.datasets.mnist.train_size:"),
        ({"data.datasets.adullt": {}}, "datasets.adullt: unknown dataset"),
        ({"data.datasets.adult.group": "colour"}, "datasets.adult.group: unknown group attribute 'colour'"),
        ({"train.overrides.adult-lr-dpsgd_z": {"lr": 1.0}}, "train.overrides.adult-lr-dpsgd_z: expected"),
        ({"train.overrides.adult-lr.gamma": 1.5}, "train.overrides.adult-lr.gamma:"),
    ],
)
def test_bad_params_name_key_and_file(write_params, overrides, needle):
    path = write_params(overrides)
    with pytest.raises(ConfigError) as e:
        load_params(path)
    assert needle in str(e.value)
    assert str(path) in str(e.value)


def test_profile_names_a_file_of_profiles(write_params, tmp_path):
    # The profile list is read from profiles/ beside params.yaml: no list in the code to keep in step with it.
    path = write_params({"profile": "claims_utkfase"})
    load_params(path)  # no profiles/ beside it: any well-formed name (a params.yaml written by hand)
    (tmp_path / "profiles").mkdir()
    for name in ("default", "claims_utkface"):
        (tmp_path / "profiles" / f"{name}.yaml").write_text("{}\n")
    with pytest.raises(ConfigError, match=r"profile: 'claims_utkfase' is not a profile of .*\(claims_utkface, "
                                          r"default\) nor custom"):
        load_params(path)
    assert load_params(write_params({"profile": "claims_utkface"})).profile == "claims_utkface"
    assert load_params(write_params({"profile": "custom"})).profile == "custom"
    with pytest.raises(ConfigError, match=r"profile:"):
        load_params(write_params({"profile": "../default"}))


def test_missing_required_key(write_params):
    path = write_params(text="data:\n  datasets: {}\n")
    with pytest.raises(ConfigError, match=r"seed: required key is missing"):
        load_params(path)


def test_duplicate_key_is_refused(write_params):
    path = write_params(text="seed: 1\nseed: 2\ndata:\n  datasets: {}\n")
    with pytest.raises(ConfigError, match=r"duplicate key 'seed' at line 2"):
        load_params(path)


def test_relative_paths_resolve_against_params_file(write_params, tmp_path):
    p = load_params(write_params({"data.raw_dir": "somewhere/raw"}))
    assert p.resolve(p.data.raw_dir) == tmp_path / "somewhere" / "raw"


def test_cli_typo_fails_fast_and_writes_nothing(write_params, tmp_path):
    path = write_params({"data.datasets.adult.gruop": "sex"})
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "fairdp_core.cli", "--params", str(path), "prepare", "--all"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2
    assert "data.datasets.adult.gruop: unknown key" in r.stderr and str(path) in r.stderr
    assert time.perf_counter() - t0 < 10
    assert not (tmp_path / "data").exists()


@pytest.mark.slow
def test_only_the_datasets_some_stage_reads_are_prepared(tmp_path):
    """runs.yaml's prepare list (dvc.yaml's prepare stage iterates over it), by hand for the default and smoke
    profiles: the default leaves out law (the eventual-pass task), law_paper_blind and UTKFace (no default stage
    reads them); smoke prepares its grid's datasets, the blind Adult (attribute inference), MNIST's 60,000 (utility)
    and UTKFace (inversion, no evaluator pool), not its bank, credit or COMPAS. Every profile's list holds its runs'
    datasets and only configured ones."""
    from fairdp_core.cli import use_profile

    assert load_params(ROOT / "params.yaml").prepare == [
        "adult", "bank", "credit", "law_paper", "compas", "mnist", "mnist_full", "adult_blind", "compas_blind",
        "adult_small"]
    for prof in sorted(f.stem for f in (ROOT / "profiles").glob("*.yaml")):
        d = tmp_path / prof
        d.mkdir()
        use_profile(prof, d / "params.yaml", ROOT / "profiles")
        p = load_params(d / "params.yaml")
        assert {r.dataset for r in p.runs.values()} <= set(p.prepare) <= set(p.data.datasets), prof
        if prof == "smoke":
            assert p.prepare == ["adult", "law", "mnist", "mnist_full", "adult_blind", "utkface"]


def test_a_stale_or_missing_prepare_list_is_one_line(write_params, tmp_path):
    p = write_params()
    gen = tmp_path / "runs.yaml"
    text = gen.read_text()
    gen.write_text(text.replace("\n- bank\n", "\n"))
    with pytest.raises(ConfigError, match=r"runs\.yaml\): out of date with the datasets the stages read"):
        load_params(p)
    gen.write_text(text.split("\nprepare:")[0] + "\n")
    with pytest.raises(ConfigError, match="no 'prepare' list"):
        load_params(p)
