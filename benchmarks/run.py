"""Throughput of the batched engine against Opacus, all measured in one run (ratios are what to read).

    python benchmarks/run.py [--quick] [--threads 2] [--out benchmarks]

Writes ``results.json`` (a list of records: workload, method, n_models, samples_per_s, model_epochs_per_s,
gflops, ...) and ``results.md``. Workloads use synthetic data of the study's shapes: Adult-shaped (n = 32,000,
d = 104, binary) for LR and the MLP (104→256→2), MNIST-shaped (n = 6,000, 1×28×28, 10 classes) for the CNN;
DP-SGD with batch 256, C = 1, σ = 1. Opacus is timed one model at a time, the standard way (``make_private`` with
its Poisson DataLoader, hooks) and on pre-sliced tensor batches (GradSampleModule hooks, no DataLoader: its
fastest mode measured on this machine). glibc's malloc thresholds (PERF_NOTES.md) are reported as found.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch
from opacus import GradSampleModule, PrivacyEngine
from opacus.optimizers import DPOptimizer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fairdp_core.engine import TrainSpec, train_bank
from fairdp_core.models import build_model

B = 256


def workload(name: str):
    rng = np.random.default_rng(0)
    if name in ("adult_lr", "adult_mlp"):
        n, shape, C = 32_000, (104,), 2
    else:
        n, shape, C = 6_000, (1, 28, 28), 10
    X = rng.normal(size=(n, *shape)).astype(np.float32)
    y = rng.integers(0, C, n)
    model = {"adult_lr": "lr", "adult_mlp": "mlp", "mnist_cnn": "cnn"}[name]
    return X, y, C, model


def flops_per_sample(model: nn.Module, shape) -> float:
    """Forward + backward ≈ 3 × forward multiply-adds × 2, counted for Linear and Conv2d layers."""
    macs = 0
    x = torch.zeros(1, *shape)
    hooks = []

    def count(m, inp, out):
        nonlocal macs
        if isinstance(m, nn.Linear):
            macs += m.in_features * m.out_features
        elif isinstance(m, nn.Conv2d):
            macs += out.numel() * m.in_channels * m.kernel_size[0] * m.kernel_size[1]

    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            hooks.append(m.register_forward_hook(count))
    model(x)
    for h in hooks:
        h.remove()
    return 6.0 * macs


def matmul_peak(seconds: float = 1.0) -> float:
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    torch.mm(a, b)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        torch.mm(a, b)
        n += 1
    return 2 * 2048**3 * n / (time.perf_counter() - t0) / 1e9


def bench_opacus(X, y, C, model_name, *, standard: bool, steps: int) -> float:
    torch.manual_seed(0)
    model = build_model(model_name, X.shape[1:], C)
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    if standard:
        pe = PrivacyEngine(accountant="rdp")
        model, opt, loader = pe.make_private(
            module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            data_loader=DataLoader(TensorDataset(Xt, yt), batch_size=B), noise_multiplier=1.0, max_grad_norm=1.0)
        seen, t0 = 0, time.perf_counter()
        for i, (xb, yb) in enumerate(loader):
            if i == steps:
                break
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            seen += len(yb)
        return seen / (time.perf_counter() - t0)
    gsm = GradSampleModule(model)
    opt = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=0.1), noise_multiplier=1.0, max_grad_norm=1.0,
                      expected_batch_size=B)
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, len(y), (B,), generator=g) for _ in range(steps)]
    seen, t0 = 0, time.perf_counter()
    for idx in batches:
        opt.zero_grad()
        nn.functional.cross_entropy(gsm(Xt[idx]), yt[idx]).backward()
        opt.step()
        seen += B
    return seen / (time.perf_counter() - t0)


def bench_engine(X, y, C, model_name, *, M: int, algorithm: str, steps: int) -> tuple[float, int]:
    n = len(y)
    spec = TrainSpec(algorithm=algorithm, model=model_name, epochs=steps * B / n, batch_size=B, lr=0.1, clip=1.0,
                     noise_multiplier=None if algorithm == "sgd" else 1.0)
    bank = train_bank(X, y, np.zeros(n, np.int64), np.ones((M, n), bool), spec, n_classes=C, n_groups=2, seed=0,
                      progress=False)
    return M * bank.steps * B / bank.seconds, bank.steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer steps and models: under a minute")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).parent))
    ap.add_argument("--paper-scale", action="store_true",
                    help="only the paper-scale banks: 400 Adult/LR and 400 MNIST-10k/MLP DP-SGD models, 20 epochs")
    args = ap.parse_args()
    if args.paper_scale:
        torch.set_num_threads(args.threads)
        return paper_scale(Path(args.out))
    torch.set_num_threads(args.threads)
    peak = matmul_peak(0.5 if args.quick else 2.0)
    env = {"threads": args.threads, "torch": torch.__version__, "machine": platform.machine(),
           "matmul_peak_gflops": round(peak, 1),
           "MALLOC_MMAP_THRESHOLD_": os.environ.get("MALLOC_MMAP_THRESHOLD_"),
           "MALLOC_TRIM_THRESHOLD_": os.environ.get("MALLOC_TRIM_THRESHOLD_"), "quick": args.quick}
    print(json.dumps(env))
    plan = {
        "adult_lr": ([1, 32, 128] if args.quick else [1, 32, 128, 512], 20 if args.quick else 60),
        "adult_mlp": ([1, 32] if args.quick else [1, 32, 128], 10 if args.quick else 30),
        "mnist_cnn": ([1, 4] if args.quick else [1, 8, 32], 3 if args.quick else 12),
    }
    records = []
    for wl, (Ms, steps) in plan.items():
        X, y, C, model_name = workload(wl)
        fps = flops_per_sample(build_model(model_name, X.shape[1:], C), X.shape[1:])

        def rec(method, M, sps, **extra):
            r = {"workload": wl, "model": model_name, "method": method, "n_models": M,
                 "samples_per_s": round(sps, 1), "model_epochs_per_s": round(sps / len(y), 4),
                 "gflops": round(sps * fps / 1e9, 2), "pct_matmul_peak": round(100 * sps * fps / 1e9 / peak, 1),
                 **extra}
            records.append(r)
            print(json.dumps(r), flush=True)

        rec("opacus_make_private", 1, bench_opacus(X, y, C, model_name, standard=True, steps=steps))
        rec("opacus_hooks_tensors", 1, bench_opacus(X, y, C, model_name, standard=False, steps=steps))
        for M in Ms:
            for alg in ("dpsgd", "sgd"):
                sps, T = bench_engine(X, y, C, model_name, M=M, algorithm=alg, steps=steps)
                rec(f"engine_{alg}", M, sps, steps=T)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "results_quick" if args.quick else "results"
    (out / f"{name}.json").write_text(json.dumps({"environment": env, "records": records}, indent=1))
    (out / f"{name}.md").write_text(table(records, env))
    print(table(records, env))


def paper_scale(out: Path) -> None:
    """Wall time of the paper-scale banks (2R = 400 models, 20 epochs, batch 256, DP-SGD at ε = 10), on
    Adult-shaped (n = 30,162 per model pool ≈ the real audit pools) and MNIST-10k-shaped data, models split into
    chunks of ``chunk`` trained one after the other (memory)."""
    recs = []
    for wl, n, shape, C, model, chunk in (("adult_lr", 30_162, (104,), 2, "lr", 400),
                                          ("mnist10k_mlp", 10_000, (784,), 10, "mlp", 50)):
        rng = np.random.default_rng(0)
        X = rng.normal(size=(n, *shape)).astype(np.float32)
        y = rng.integers(0, C, n)
        mem = rng.random((400, n)) < 0.98  # audit halves: every pool is most of the data
        spec = TrainSpec(algorithm="dpsgd", model=model, epochs=20, batch_size=B, lr=0.1, target_epsilon=10.0)
        t0 = time.perf_counter()
        for s in range(0, 400, chunk):
            train_bank(X, y, np.zeros(n, np.int64), mem[s:s + chunk], spec, n_classes=C, n_groups=2, seed=s, progress=True,
                       desc=f"{wl} models {s}-{s + chunk}")
        wall = time.perf_counter() - t0
        r = {"workload": wl, "n_models": 400, "epochs": 20, "wall_s": round(wall, 1),
             "samples_per_s": round(400 * 20 * 0.98 * n / wall, 1)}
        recs.append(r)
        print(json.dumps(r), flush=True)
    (out / "paper_scale.json").write_text(json.dumps(recs, indent=1))


def table(records, env) -> str:
    lines = [f"Measured in one run: {env['threads']} threads, torch {env['torch']}, matmul peak "
             f"{env['matmul_peak_gflops']} GFLOP/s, malloc thresholds {env['MALLOC_MMAP_THRESHOLD_']}/"
             f"{env['MALLOC_TRIM_THRESHOLD_']}.", "",
             "| workload | method | M | samples/s | model-epochs/s | GFLOP/s | % peak | × Opacus fastest | × make_private |",
             "|---|---|---|---|---|---|---|---|---|"]
    for wl in dict.fromkeys(r["workload"] for r in records):
        rs = [r for r in records if r["workload"] == wl]
        fast = next(r["samples_per_s"] for r in rs if r["method"] == "opacus_hooks_tensors")
        std = next(r["samples_per_s"] for r in rs if r["method"] == "opacus_make_private")
        for r in rs:
            lines.append(f"| {wl} | {r['method']} | {r['n_models']} | {r['samples_per_s']:,.0f} | "
                         f"{r['model_epochs_per_s']:.3f} | {r['gflops']} | {r['pct_matmul_peak']} | "
                         f"{r['samples_per_s'] / fast:.2f} | {r['samples_per_s'] / std:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
