"""What the attack stage costs against training, at the paper's design, and what its shared sorts save.

    python benchmarks/attacks.py [--M 400] [--m 10000] [--rounds 3] [--out benchmarks]

One synthetic bank of the paper's design (M = 2R = 400 models in complementary pairs, m audited records, two
groups, scores with a small membership signal): every attack of the attack stage (``audit.run.audit``, timed per attack
by the stage's own timer), and, interleaved round by round, three hot paths against their slow references
(``tests/attack_references.py``: each column or row sorted afresh, each mean recomputed): the null-corrected
estimator (50 label permutations), PA-GBA's null floor (refits on 50 permuted group labels) and offline RMIA's choice
of a on one fold's 200 models (each played as the target for 21 values of a). Results are checked equal before they
are timed. Ratios from one run are what to read (the machine is noisy). Writes ``attacks.json`` and ``attacks.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fairdp_core.audit import attacks, rmia  # noqa: E402
from fairdp_core.audit.run import audit  # noqa: E402
from fairdp_core.audit.stats import delta_pp, gpr  # noqa: E402
from tests import attack_references as ref  # noqa: E402


def bank(M: int, m: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    mem = np.zeros((M, m), bool)
    for j in range(0, M, 2):
        half = rng.permutation(m) < m // 2
        mem[j], mem[j + 1] = half, ~half
    loss = np.abs(rng.normal(size=(M, m))) - 0.05 * mem
    return loss, mem, rng.integers(0, 2, m)


def gba_floor(scores, mem, g, *, fast: bool, n: int = 50) -> float:
    rng = np.random.default_rng(1)
    rows = attacks.sort_rows(scores) if fast else None
    out = []
    for _ in range(n):
        pg = rng.permutation(g)
        pred = (attacks.gba_predictions(scores, mem, pg, presorted=rows) if fast else ref.gba_predictions(scores, mem, pg))
        out.append(delta_pp(gpr(attacks._advantage_of_predictions(pred, mem), pg, 2)))
    return float(np.mean(out))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--M", type=int, default=400)
    ap.add_argument("--m", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent))
    args = ap.parse_args(argv)
    loss, mem, g = bank(args.M, args.m)
    scores = -loss
    nc = {"reference": lambda: ref.null_corrected_advantage(scores, mem, rng=np.random.default_rng(2), n_null=50),
          "shared sort": lambda: attacks.null_corrected_advantage(scores, mem, rng=np.random.default_rng(2),
                                                                  n_null=50)}
    gb = {"reference": lambda: gba_floor(scores, mem, g, fast=False), "shared sort": lambda: gba_floor(scores, mem, g,
                                                                                                    fast=True)}
    fold = attacks.pair_folds(args.M) == 1
    p_ref = 1 / (1 + np.exp(loss[fold]))  # the probabilities rmia_scores derives from φ = −loss
    ra = {"reference": lambda: ref.choose_offline_a(p_ref, mem[fold]),
          "shared sort": lambda: rmia.choose_offline_a(p_ref, mem[fold])}
    assert np.array_equal(nc["reference"](), nc["shared sort"]()) and gb["reference"]() == gb["shared sort"]()
    assert ra["reference"]() == ra["shared sort"]()
    times: dict[str, list[float]] = {}
    stage: list[dict] = []
    for _ in range(args.rounds):  # interleaved: each round times every variant once
        for path, variants in (("null-corrected", nc), ("PA-GBA null floor", gb), ("offline RMIA's a (one fold)", ra)):
            for name, f in variants.items():
                t = time.perf_counter()
                f()
                times.setdefault(f"{path}|{name}", []).append(time.perf_counter() - t)
        t = time.perf_counter()
        timings = audit(loss, -loss, mem, g, ["a", "b"], alpha=0.05, n_perm=200, n_null=50, stats_seed=0,
                        delta=1e-5).timings
        stage.append({"total_s": time.perf_counter() - t, **timings})
    med = {k: float(np.median(v)) for k, v in times.items()}
    stage_med = {k: float(np.median([s[k] for s in stage])) for k in stage[0]}
    res = {"M": args.M, "m": args.m, "rounds": args.rounds, "machine": platform.processor() or platform.machine(),
           "median_s": med, "attack_stage_median_s": stage_med}
    out = Path(args.out)
    (out / "attacks.json").write_text(json.dumps(res, indent=1) + "\n")
    lines = [f"# Attack cost at the paper's design (M = {args.M}, m = {args.m:,}; medians of {args.rounds} interleaved "
             "rounds)", "", "| path | reference (s) | shared sort (s) | speed-up |", "|---|---|---|---|"]
    for path in ("null-corrected", "PA-GBA null floor", "offline RMIA's a (one fold)"):
        a, b = med[f"{path}|reference"], med[f"{path}|shared sort"]
        lines.append(f"| {path} | {a:.2f} | {b:.2f} | {a / b:.2f}× |")
    lines += ["", "The attack stage's own timer (`audit.run.audit`, shared sorts), median seconds per attack:", "",
              "| attack | s |", "|---|---|"]
    lines += [f"| {k.removesuffix('_s')} | {v:.2f} |" for k, v in stage_med.items()]
    (out / "attacks.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
