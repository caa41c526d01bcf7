"""benchmarks/gpu_timing.py, the prepared GPU timing script: its dataset shapes are the gpu profile's
data, its run counts and step counts are the profile's, and its extrapolation is the arithmetic it states. Run on the
CPU with a few small banks (the script itself is for a GPU machine)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gpu_timing", ROOT / "benchmarks" / "gpu_timing.py")
gt = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("gpu_timing", gt)
_spec.loader.exec_module(gt)


@pytest.mark.slow
def test_shapes_are_the_gpu_profiles_prepared_data(mirror, tmp_path):
    """Every dataset of the gpu profile loaded as the profile configures it (UTKFace: its whole training split)."""
    from fairdp_core.data.loaders import load_dataset
    from fairdp_core.data.sources import Sources

    p = gt.profile_params("gpu")
    assert {r.dataset for r in p.runs.values()} == set(gt.SHAPES)
    src = Sources(raw_dir=tmp_path, mirror=mirror, download=False)
    for name, shape in gt.SHAPES.items():
        d = load_dataset(name, p.data.datasets[name], src, seed=p.seed)
        assert (len(d.train), tuple(d.train.X.shape[1:]), d.n_classes, d.n_groups) == shape, name


@pytest.mark.slow
def test_cpu_run_counts_steps_and_extrapolation(tmp_path):
    """COMPAS/LR and MNIST (MLP and CNN), 4 models, 2 steps: the gpu profile has 16 seeds × 5 runs + 16 at ε = 2 =
    96 COMPAS runs and 6 × 5 + 6 = 36 per MNIST model; T = round(20 · n/2 / 256); total = s/step · T · runs."""
    assert gt.main(["--device", "cpu", "--steps", "2", "--lr-steps", "2", "--models", "4", "--workers", "1", "--only", "compas", "mnist",
                    "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "cpu_timing.json").read_text())
    rows = {(r["dataset"], r["model"]): r for r in out["rows"]}
    assert set(rows) == {("compas", "lr"), ("mnist", "mlp"), ("mnist", "cnn")}
    assert rows["compas", "lr"]["runs"] == 96 and rows["mnist", "mlp"]["runs"] == rows["mnist", "cnn"]["runs"] == 36
    assert rows["compas", "lr"]["steps_per_run"] == round(20 * 4937 / 2 / 256) == 193
    assert rows["mnist", "cnn"]["steps_per_run"] == round(20 * 10_000 / 2 / 256) == 391
    for r in rows.values():
        assert r["per_step_s"] > 0
        assert r["total_h"] == pytest.approx(r["per_step_s"] * r["steps_per_run"] * r["runs"] / 3600, rel=1e-9)
    assert out["complete"] is False and out["environment"]["models"] == 4
    md = (tmp_path / "cpu_timing.md").read_text()
    assert "EXTRAPOLATION" in md and "MEASURED" in md and "the total covers those" in md


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without CUDA")
def test_without_cuda_it_says_so(tmp_path, capsys):
    assert gt.main(["--out", str(tmp_path)]) == 2
    assert "no CUDA device visible" in capsys.readouterr().err and not list(tmp_path.iterdir())
