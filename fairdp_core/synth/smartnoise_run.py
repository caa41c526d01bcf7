"""The standard DP synthesizers (MST, PATE-CTGAN, DP-CTGAN) from smartnoise-synth, as baselines for DPDSyn.

MST is DP at the (ε, δ) it is given. PATE-CTGAN and DP-CTGAN are not (see :mod:`fairdp_core.synth.dpgan`, "Why not
smartnoise's GANs"): they stay runnable, and the report labels them as nominal ε and keeps them out of its claims.

smartnoise-synth 1.0.8 pins opacus < 0.15 (0.14.0), which conflicts with the project's opacus 1.6, so this module
runs in its own environment, ``.venv-synth`` (``make synth-venv``: torch 2.13 CPU, smartnoise-synth 1.0.8,
packaging), and imports nothing of fairdp_core but the numpy/pandas-only :mod:`fairdp_core.synth.layout`,
:mod:`fairdp_core.data.base`, :mod:`fairdp_core.seeding` and :mod:`fairdp_core.atomic`:

    .venv-synth/bin/python -m fairdp_core.synth.smartnoise_run DATASET [--params params.yaml]

writes ``results/synth_baseline/<dataset>/<method>-e<ε>-s<seed>.npz`` (X float32 [n_synth, d], y int64) and
``refused.json`` (the runs a synthesizer refused, with its message: PATE-CTGAN raises for an ε too small for one
round of its teachers); wall times go to ``results/timings/synth_baseline-<dataset>.json``, outside the tracked
output. The records are handed to smartnoise as categorical codes:
numeric columns in the public equal-width bins of [-1, 1] (decoded back to bin midpoints), one-hot blocks as
their index, the label as a column. The category sets come from the public schema, never from the records: the
transformer is fitted on a public frame that lists every code, so smartnoise spends no budget and learns nothing
from the data in preprocessing; ε and δ are the synthesizer's whole budget (smartnoise's own accounting).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from ..atomic import atomic_dir, write_text
from ..data.base import load
from ..seeding import derive_seed
from .layout import Layout, discretise

__all__ = ["decode_codes", "main", "to_frame"]


def to_frame(X: np.ndarray, y: np.ndarray, layout: Layout, *, bins: int) -> pd.DataFrame:
    """Records as categorical codes (see the module docstring); columns ``c0..`` then ``label``."""
    codes = discretise(X, layout, bins=bins)
    df = pd.DataFrame(codes, columns=[f"c{j}" for j in range(codes.shape[1])])
    df["label"] = np.asarray(y, dtype=np.int64)
    return df


def public_frame(layout: Layout, *, bins: int, n_classes: int) -> pd.DataFrame:
    """Every code of every column (cycled to one length): the public category sets."""
    sizes = [bins] * len(layout.numeric) + [e - s for _, s, e in layout.blocks] + [n_classes]
    L = max(sizes)
    cols = {f"c{j}": np.arange(L) % k for j, k in enumerate(sizes[:-1])}
    cols["label"] = np.arange(L) % n_classes
    return pd.DataFrame(cols)


def decode_codes(df: pd.DataFrame, layout: Layout, *, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes back to the prepared feature space: numerics at their bin's midpoint, blocks one-hot."""
    X = np.zeros((len(df), layout.d), dtype=np.float32)
    j = 0
    for i in layout.numeric:
        X[:, i] = -1.0 + (df[f"c{j}"].to_numpy(np.float64) + 0.5) * 2.0 / bins
        j += 1
    for _, s, _e in layout.blocks:
        X[np.arange(len(df)), s + df[f"c{j}"].to_numpy(np.int64)] = 1.0
        j += 1
    return X, df["label"].to_numpy(np.int64)


def synthesize(method: str, df: pd.DataFrame, public: pd.DataFrame, *, epsilon: float, delta: float, n: int,
               seed: int, gan_epochs: int) -> pd.DataFrame:
    """One smartnoise synthesizer fitted at (ε, δ) on ``df`` and sampled ``n`` rows."""
    import random

    import torch
    from snsynth import Synthesizer
    from snsynth.transform.table import TableTransformer

    np.random.seed(seed % 2**32)  # smartnoise draws from the global streams; seeded once per synthesizer
    random.seed(seed)
    torch.manual_seed(seed)
    if method == "mst":
        # MST's measurement noise comes from OpenDP's make_gaussian, a cryptographic RNG that cannot be seeded: the
        # same params gave a different table on every run. The same N(0, σ²) draws from a stream of this
        # synthesizer's seed instead (the noise every other DP mechanism of the project uses: a seeded PRNG, as
        # Opacus), so the stage is reproducible; the distribution, and so the privacy guarantee, is unchanged.
        import snsynth.mst.mst as mst_module

        noise_rng = np.random.default_rng(seed)
        mst_module.gaussian_noise = lambda sigma, size=None: (
            float(noise_rng.normal(0.0, sigma)) if size is None else list(noise_rng.normal(0.0, sigma, size)))
    cols = list(df.columns)
    style = "cube" if method == "mst" else "gan"
    tt = TableTransformer.create(public, style=style, categorical_columns=cols)
    tt.fit(public, epsilon=0.0)
    kw = {} if method == "mst" else {"epochs": gan_epochs}
    if method == "dpctgan":
        kw["batch_size"] = 500
    synth = Synthesizer.create(method, epsilon=float(epsilon), delta=float(delta), verbose=False, **kw) \
        if method != "mst" else Synthesizer.create(method, epsilon=float(epsilon), delta=float(delta))
    synth.fit(df, transformer=tt, categorical_columns=cols, preprocessor_eps=0.0)
    if method == "mst":
        # snsynth 1.0.8's MST.sample calls mbi's synthetic_data with its default method="round", which fills each
        # column from a record's rank within its parent's group, in row order: two children of one parent come out
        # in lock-step, with correlations the fitted model does not have (COMPAS: charge degree vs label +0.57
        # sampled against −0.12 real and fitted). Sampling each column from its fitted conditional ("sample") keeps
        # the model's joint; the rest is MST.sample's own decoding. Post-processing: no privacy cost.
        data = synth.synthesizer.synthetic_data(rows=n, method="sample")
        decompressed = synth.undo_compress_fn(data)
        out = synth._transformer.inverse_transform([tuple(t[1:]) for t in decompressed.df.itertuples()])
        out = pd.DataFrame(out, columns=cols) if not isinstance(out, pd.DataFrame) else out
    else:
        out = synth.sample(n)
    return out[cols].astype(np.int64)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="smartnoise_run", description=__doc__)
    ap.add_argument("dataset")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    raw = yaml.safe_load(Path(args.params).read_text())  # validated by the main environment's stages
    base = Path(args.params).resolve().parent
    s = raw["synth"]
    seed_root = int(raw["seed"])
    delta = float(raw.get("train", {}).get("delta", 1e-5))
    data = load(base / raw["data"].get("prepared_dir", "data/prepared") / args.dataset)
    layout = Layout.from_data(data)
    bins = int(s.get("bins", 10))
    df = to_frame(data.train.X, data.train.y, layout, bins=bins)
    public = public_frame(layout, bins=bins, n_classes=data.n_classes)
    methods = [m for m in s["methods"] if m in ("mst", "patectgan", "dpctgan")]
    out = Path(args.out or base / "results/synth_baseline" / args.dataset)
    timings, refused = {}, {}
    with atomic_dir(out) as tmp:
        for method in methods:
            for eps in s["epsilons"]:
                for seed in range(int(s["seeds"])):
                    t0 = time.perf_counter()
                    key = f"{method}-e{eps:g}-s{seed}".replace(".", "p")
                    try:
                        syn = synthesize(method, df, public, epsilon=eps, delta=delta, n=int(s["n_synth"]),
                                         seed=derive_seed(seed_root, "synth", args.dataset, method, float(eps), seed),
                                         gan_epochs=int(s["smartnoise"]["gan_epochs"]))
                    except ValueError as e:  # PATE-CTGAN refuses a budget too small for one teacher round
                        if "epsilon" not in str(e).lower():
                            raise
                        refused[key] = str(e)
                        print(json.dumps({"dataset": args.dataset, "run": key, "refused": str(e)}), flush=True)
                        continue
                    X, y = decode_codes(syn, layout, bins=bins)
                    np.savez(tmp / f"{key}.npz", X=X, y=y)
                    timings[key] = round(time.perf_counter() - t0, 3)
                    print(json.dumps({"dataset": args.dataset, "run": key, "seconds": timings[key]}), flush=True)
        (tmp / "refused.json").write_text(json.dumps(refused, indent=1) + "\n")
    write_text(base / "results/timings" / f"synth_baseline-{args.dataset}.json", json.dumps(timings, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
