"""Throughput of the batched engine against Opacus, all measured in one run (ratios are what to read).

    python benchmarks/run.py [--quick] [--threads 2] [--repeats 3] [--out benchmarks]   # the table: medians of rounds
    python benchmarks/run.py --sharding [--quick] [--repeats 3]     # 1 vs 2 worker processes, Ray's overhead
    python benchmarks/run.py --paper-adult [--workers 1 2] [--repeats 3]   # one paper-scale Adult/LR bank, real data
    python benchmarks/run.py --conv-patches [--repeats 5]   # per-sample conv gradients: unfold vs strided patches
    python benchmarks/run.py --ratios [--rounds 7] [--save-baseline]   # DP-SGD ÷ non-private, one fixed M per workload
    python benchmarks/run.py --cnn-step [--repeats 5]   # where a CNN's DP-SGD step goes, per model and step
    python benchmarks/run.py --rule-cost [--rounds 5]   # each rule's time ÷ DP-SGD's at K = 2 and 10 groups
    python benchmarks/run.py --opacus-rule-cost [--rounds 5]   # the same on the Opacus route, ÷ Opacus's DP-SGD
    python benchmarks/run.py --mkl-cbwr [--rounds 5]   # a DP-SGD step under each MKL_CBWR setting, fresh processes

Writes ``results.json`` (a list of records: workload, method, n_models, samples_per_s, model_epochs_per_s,
gflops, ...) and ``results.md``. Workloads use synthetic data of the study's shapes: Adult-shaped (n = 32,000,
d = 104, binary) for LR and the MLP (104→256→2), MNIST-shaped (n = 6,000, 784 or 1×28×28, 10 classes) for the
MLP (784→256→10) and the CNN; GFLOP/s counts 6 × the multiply-adds of Linear and Conv2d layers per sample;
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

os.environ.setdefault("MKL_CBWR", "COMPATIBLE")  # as the train stage: worker processes inherit it
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
    elif name == "mnist_mlp":
        n, shape, C = 6_000, (784,), 10
    elif name == "utkface_cnn":
        n, shape, C = 6_000, (1, 48, 48), 2
    else:
        n, shape, C = 6_000, (1, 28, 28), 10
    X = rng.normal(size=(n, *shape)).astype(np.float32)
    y = rng.integers(0, C, n)
    model = {"adult_lr": "lr", "adult_mlp": "mlp", "mnist_mlp": "mlp", "mnist_cnn": "cnn", "utkface_cnn": "cnn"}[name]
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
    ap.add_argument("--sharding", action="store_true",
                    help="only the sharding benchmark: one process vs 2 worker processes (loky) vs 2 Ray tasks")
    ap.add_argument("--repeats", type=int, default=3,
                    help="interleaved repeats, medians reported (the table, --sharding, --paper-adult); --quick: 1")
    ap.add_argument("--paper-adult", action="store_true",
                    help="only one paper-scale Adult/LR DP-SGD bank on the prepared data: m = n, 2R = 400, 20 epochs")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="--paper-adult: worker counts (loky)")
    ap.add_argument("--conv-patches", action="store_true",
                    help="only per-sample conv weight gradients of the study's CNN layers: unfold vs strided patches")
    ap.add_argument("--ratios", action="store_true",
                    help="only DP-SGD ÷ non-private at one fixed bank size per workload (--rounds interleaved rounds)")
    ap.add_argument("--rounds", type=int, default=7, help="--ratios: interleaved rounds (at least 5)")
    ap.add_argument("--save-baseline", action="store_true",
                    help="--ratios: also write ratios_baseline.json, what later runs compare non-private speed with")
    ap.add_argument("--opacus-rule-cost", action="store_true",
                    help="the Opacus route: each make_private_<rule> ÷ Opacus's DP-SGD (benchmarks/opacus_rule_cost.md)")
    ap.add_argument("--rule-cost", action="store_true",
                    help="each clipping rule's time per step ÷ DP-SGD's, K = 2 and 10 groups (benchmarks/rule_cost.md)")
    ap.add_argument("--mkl-cbwr", action="store_true",
                    help="a DP-SGD step (LR, MLP) under each MKL_CBWR setting, one fresh process each (mkl_cbwr.md)")
    ap.add_argument("--cnn-step", action="store_true",
                    help="only where a CNN's DP-SGD step goes, per model and step, against SGD's (one thread)")
    args = ap.parse_args()
    if args.opacus_rule_cost:
        torch.set_num_threads(args.threads)
        if args.rounds < 5:
            ap.error("--rounds: at least 5 interleaved rounds")
        return opacus_rule_cost(Path(args.out), rounds=args.rounds)
    if args.rule_cost:
        torch.set_num_threads(args.threads)
        if args.rounds < 5:
            ap.error("--rounds: at least 5 interleaved rounds")
        return rule_cost(Path(args.out), rounds=args.rounds)
    if args.mkl_cbwr:
        if args.rounds < 5:
            ap.error("--rounds: at least 5 interleaved rounds")
        return mkl_cbwr(Path(args.out), rounds=args.rounds)
    if args.cnn_step:
        return cnn_step(Path(args.out), repeats=max(args.repeats, 5))
    if args.ratios:
        torch.set_num_threads(args.threads)
        if args.rounds < 5:
            ap.error("--rounds: at least 5 interleaved rounds")
        return ratios(Path(args.out), repeats=args.rounds, save_baseline=args.save_baseline)
    if args.conv_patches:
        torch.set_num_threads(args.threads)
        return conv_patches(Path(args.out), repeats=args.repeats)
    if args.sharding:
        return bench_sharding(Path(args.out), quick=args.quick, repeats=args.repeats)
    if args.paper_adult:
        return paper_adult(Path(args.out), workers=args.workers, repeats=args.repeats)
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
        "mnist_mlp": ([1, 8] if args.quick else [1, 8, 32], 6 if args.quick else 20),
        "mnist_cnn": ([1, 4] if args.quick else [1, 8, 32], 3 if args.quick else 12),
    }
    # every measurement `repeats` times, the rounds interleaved (round r times every method before round r + 1), so
    # that a slow spell of the machine falls on every method alike; the record holds the median and the range
    reps = 1 if args.quick else args.repeats
    runs: dict[tuple, list[float]] = {}
    n_fps: dict[str, tuple[int, float]] = {}  # per workload: records, FLOPs per sample
    for rep in range(reps):
        for wl, (Ms, steps) in plan.items():
            X, y, C, model_name = workload(wl)
            n_fps[wl] = len(y), flops_per_sample(build_model(model_name, X.shape[1:], C), X.shape[1:])
            for std in (True, False):
                runs.setdefault((wl, model_name, "opacus_make_private" if std else "opacus_hooks_tensors", 1, None),
                                []).append(bench_opacus(X, y, C, model_name, standard=std, steps=steps))
            for M in Ms:
                for alg in ("dpsgd", "sgd"):
                    sps, T = bench_engine(X, y, C, model_name, M=M, algorithm=alg, steps=steps)
                    runs.setdefault((wl, model_name, f"engine_{alg}", M, T), []).append(sps)
        print(f"round {rep + 1} of {reps} done", flush=True)
    records = []
    for (wl, model_name, method, M, T), v in runs.items():
        sps, (n, fps) = float(np.median(v)), n_fps[wl]
        r = {"workload": wl, "model": model_name, "method": method, "n_models": M,
             "samples_per_s": round(sps, 1), "samples_per_s_min": round(min(v), 1), "samples_per_s_max": round(max(v), 1),
             "repeats": len(v), "model_epochs_per_s": round(sps / n, 4),
             "gflops": round(sps * fps / 1e9, 2), "pct_matmul_peak": round(100 * sps * fps / 1e9 / peak, 1)}
        if T is not None:
            r["steps"] = T
        records.append(r)
        print(json.dumps(r), flush=True)
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


def bench_sharding(out: Path, *, quick: bool, repeats: int) -> None:
    """One bank trained five ways, interleaved ``repeats`` times (medians; ratios within this run): in this process
    at 1 and at 2 torch threads, and sharded over 2 worker processes of one thread each, by loky and by Ray
    (a local Ray of 2 CPUs); and the first half of the bank alone in this process, what each of 2 workers trains:
    whole / half is the most 2 workers can gain, reached when both have a core to themselves. Pools and Ray are
    started (and timed) before the repeats, so a repeat measures warm workers; the cold first calls are reported
    apart. DP-SGD, C = 1, σ = 1, batch 256, synthetic data of the study's shapes."""
    import statistics

    from fairdp_core.engine import bank_widths, train_bank_sharded

    plan = {"adult_lr": (64, 2 if quick else 5), "adult_mlp": (8, 0.5 if quick else 1.5),
            "mnist_cnn": (2 if quick else 4, 0.25 if quick else 0.5)}
    methods = {"1 process, 1 thread": dict(threads=1), "1 process, 2 threads": dict(threads=2),
               "its first half alone, 1 process, 1 thread": dict(threads=1, half=True),
               "loky, 2 workers x 1 thread": dict(workers=2, executor="loky"),
               "ray, 2 workers x 1 thread": dict(workers=2, executor="ray")}
    import ray

    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    env = {"ray_init_s": round(time.perf_counter() - t0, 2), "torch": torch.__version__, "repeats": repeats,
           "cpus": os.cpu_count(), "load_avg_before": os.getloadavg()[0], "quick": quick,
           "MKL_CBWR": os.environ.get("MKL_CBWR"), "ray": ray.__version__}
    records = []
    for wl, (M, epochs) in plan.items():
        X, y, C, model_name = workload(wl)
        n = len(y)
        spec = TrainSpec(algorithm="dpsgd", model=model_name, epochs=epochs, batch_size=B, lr=0.1, clip=1.0,
                         noise_multiplier=1.0)
        args = (X, y, np.zeros(n, np.int64), np.ones((M, n), bool), spec)
        kw = dict(n_classes=C, n_groups=2, seed=0, progress=False)

        widths = bank_widths(args[3], spec, seed=0)

        def run(m):
            opts = dict(methods[m])
            torch.set_num_threads(opts.pop("threads", 1))
            t = time.perf_counter()
            if opts.pop("half", False):  # what one of 2 workers trains: the lower bound of a 2-worker run's time
                bank = train_bank(*args, **kw, models=np.arange(M // 2), widths=widths)
            else:
                bank = train_bank_sharded(*args, **kw, **opts)
            return time.perf_counter() - t, bank.steps

        cold = {m: round(run(m)[0], 2) for m in methods if "workers" in methods[m]}  # start pools / Ray workers
        times: dict[str, list[float]] = {m: [] for m in methods}
        for _ in range(repeats):
            for m in methods:
                s, steps = run(m)
                times[m].append(s)
        base = statistics.median(times["1 process, 1 thread"])
        for m, ts in times.items():
            med = statistics.median(ts)
            r = {"workload": wl, "model": model_name, "n_models": M, "epochs": epochs, "steps": steps,
                 "method": m, "median_s": round(med, 3), "min_s": round(min(ts), 3), "max_s": round(max(ts), 3),
                 "speedup_vs_1_process_1_thread": round(base / med, 3), "cold_first_call_s": cold.get(m)}
            records.append(r)
            print(json.dumps(r), flush=True)
    ray.shutdown()
    env["load_avg_after"] = os.getloadavg()[0]
    name = "sharding_quick" if quick else "sharding"
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"Sharding, measured in one run (interleaved, {repeats} repeats, medians): torch {env['torch']}, Ray "
             f"{env['ray']} (local, 2 CPUs, started in {env['ray_init_s']} s), {env['cpus']} CPUs, load average "
             f"{env['load_avg_before']:.2f} before and {env['load_avg_after']:.2f} after.", "",
             "| workload | M | method | median s | min–max s | × 1 process, 1 thread | cold first call s |",
             "|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['workload']} | {r['n_models']} | {r['method']} | {r['median_s']} | {r['min_s']}–{r['max_s']} "
                     f"| {r['speedup_vs_1_process_1_thread']:.2f} | {r['cold_first_call_s'] or ''} |")
    (out / f"{name}.json").write_text(json.dumps({"environment": env, "records": records}, indent=1))
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def paper_adult(out: Path, *, workers: list[int], repeats: int) -> None:
    """Wall time of one paper-scale configuration on the prepared Adult data: m = n (every record audited, each
    model on a stratified half), 2R = 400, 20 epochs, batch 256, lr 0.1, clip 5, DP-SGD at ε = 10 (the paper
    profile's Adult/LR run), trained in this process (workers 1, one thread) or over that many loky workers of one
    thread, interleaved ``repeats`` times; the first sharded call includes starting the worker pool."""
    from fairdp_core.audit.design import audit_design
    from fairdp_core.data.base import load
    from fairdp_core.engine import train_bank_sharded

    torch.set_num_threads(1)
    data = load(Path(__file__).resolve().parents[1] / "data" / "prepared" / "adult")
    tr = data.train
    design = audit_design(tr.group, m=len(tr), R=200, min_per_group=50, rng=np.random.default_rng(0))
    mem = design.training_membership()
    spec = TrainSpec(algorithm="dpsgd", model="lr", epochs=20, batch_size=B, lr=0.1, clip=5.0, target_epsilon=10.0)
    recs, first = [], {}
    for rep in range(repeats):
        for w in workers:
            t0 = time.perf_counter()
            bank = train_bank_sharded(tr.X, tr.y, tr.group, mem, spec, n_classes=data.n_classes,
                                      n_groups=data.n_groups, seed=0, progress=True, workers=w,
                                      desc=f"adult-lr-dpsgd-e10 (paper scale, {w} worker(s))")
            wall = time.perf_counter() - t0
            first.setdefault(w, bank.params["fc.weight"])
            r = {"workload": "adult_lr_paper", "n_train": len(tr), "n_models": bank.n_models, "epochs": 20,
                 "steps": bank.steps, "workers": w, "repeat": rep, "train_wall_s": round(wall, 1),
                 "mean_pool": float(mem.sum(1).mean()), "load_avg": round(os.getloadavg()[0], 2),
                 "same_as_1_worker": bool(torch.equal(first[w], first[workers[0]]))}
            recs.append(r)
            print(json.dumps(r), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "paper_adult.json").write_text(json.dumps(recs, indent=1))


def conv_patches(out: Path, *, repeats: int) -> None:
    """Per-sample weight gradients δ_i · patches(a_i) of every convolution of the study's CNNs (MNIST 1×28×28,
    UTKFace 1×48×48), a batch of 256, the two ways: ``nn.functional.unfold`` of the default layout then bmm (the
    engine before), and :meth:`LayerBackend._patches` (one strided copy of a channels-last input) then bmm (the
    engine now). Each timed ``repeats`` times after one warm-up call, medians; also the patch extraction alone.
    Same numbers either way (checked here, up to the column order)."""
    import statistics

    from fairdp_core.engine.backends import LayerBackend

    W, recs = 256, []

    def med(f) -> float:
        f()
        ts = []
        for _ in range(repeats):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts) * 1e3

    for net, shape in (("cnn", (1, 28, 28)), ("cnn", (1, 48, 48))):
        module = build_model(net, shape, 10)
        acts = {}
        hooks = [m.register_forward_hook(lambda m, i, o, n=n: acts.__setitem__(n, (i[0], o)))
                 for n, m in module.named_modules() if isinstance(m, nn.Conv2d)]
        with torch.no_grad():
            module(torch.randn(W, *shape).contiguous(memory_format=torch.channels_last))
        for h in hooks:
            h.remove()
        for name, (a, o) in acts.items():
            layer = module.get_submodule(name)
            a = a.contiguous(memory_format=torch.channels_last)
            d = torch.randn_like(o.contiguous())

            def unfold():
                return nn.functional.unfold(a.contiguous(), layer.kernel_size, dilation=layer.dilation,
                                            padding=layer.padding, stride=layer.stride)

            def old():
                return torch.bmm(d.flatten(2), unfold().transpose(1, 2))

            def new():
                return torch.bmm(d.flatten(2), LayerBackend._patches(layer, a))

            o_, k = layer.weight.shape[0], layer.kernel_size
            same = torch.allclose(old(), new().view(W, o_, k[0], k[1], -1).permute(0, 1, 4, 2, 3).reshape(W, o_, -1),
                                  atol=1e-4, rtol=1e-4)
            ms = {"unfold_bmm": med(old), "patches_bmm": med(new),
                  "unfold_only": med(unfold),
                  "patches_only": med(lambda: LayerBackend._patches(layer, a))}
            r = {"input": "x".join(map(str, shape)), "layer": name, "in": tuple(a.shape[1:]),
                 "kernel": tuple(layer.weight.shape), "stride": layer.stride, "padding": layer.padding,
                 **{k: round(v, 2) for k, v in ms.items()}, "speedup": round(ms["unfold_bmm"] / ms["patches_bmm"], 2),
                 "same_numbers": same}
            recs.append(r)
            print(json.dumps(r), flush=True)
    lines = [f"Per-sample conv weight gradients of a batch of {W}, torch {torch.__version__}, "
             f"{torch.get_num_threads()} threads, medians of {repeats} repeats after a warm-up call (ms):", "",
             "| input | layer | weight | unfold + bmm | patches + bmm | × | unfold alone | patches alone | same numbers |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        lines.append(f"| {r['input']} | {r['layer']} | {'×'.join(map(str, r['kernel']))} | {r['unfold_bmm']} | "
                     f"{r['patches_bmm']} | {r['speedup']:.2f} | {r['unfold_only']} | {r['patches_only']} | "
                     f"{r['same_numbers']} |")
    out.mkdir(parents=True, exist_ok=True)
    (out / "conv_patches.json").write_text(json.dumps(recs, indent=1))
    (out / "conv_patches.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


# The targets: one bank size per workload (the engine's best measured M on 2 cores), steps enough for a few
# seconds a bank; DP-SGD must reach >= 0.85 of non-private throughput for LR and the MLP and >= 0.80 for the CNNs.
RATIO_PLAN = {"adult_lr": (512, 120, 0.85), "adult_mlp": (128, 30, 0.85), "mnist_cnn": (8, 12, 0.80),
              "utkface_cnn": (8, 6, 0.80)}


def ratios(out: Path, *, repeats: int, save_baseline: bool) -> None:
    """DP-SGD ÷ non-private (SGD) throughput of the engine at one fixed M per workload, ``repeats`` interleaved
    rounds after an untimed one (each round trains every workload's DP-SGD and SGD bank, the order of the pair
    alternating by round). The
    ratio is the median of the per-round ratios (paired, so a slow spell of the machine cancels), with its range.
    Non-private throughput is compared with ``ratios_baseline.json`` (the engine before its DP-SGD speed work, measured on
    this kind of machine): a ratio won by slowing SGD down would not count."""
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                            text=True).stdout.strip() or None
    env = {"threads": torch.get_num_threads(), "torch": torch.__version__, "repeats": repeats, "commit": commit,
           "load_avg_before": round(os.getloadavg()[0], 2), "MKL_CBWR": os.environ.get("MKL_CBWR"),
           "MALLOC_MMAP_THRESHOLD_": os.environ.get("MALLOC_MMAP_THRESHOLD_")}
    data = {wl: workload(wl) for wl in RATIO_PLAN}
    for wl, (M, steps, _) in RATIO_PLAN.items():  # one untimed round: allocator growth, thread pools, lazy inits
        for alg in ("dpsgd", "sgd"):
            bench_engine(*data[wl], M=M, algorithm=alg, steps=max(2, steps // 4))
    sps: dict[tuple[str, str], list[float]] = {}
    for rep in range(repeats):
        for wl, (M, steps, _) in RATIO_PLAN.items():
            X, y, C, model_name = data[wl]
            for alg in (("dpsgd", "sgd") if rep % 2 == 0 else ("sgd", "dpsgd")):
                sps.setdefault((wl, alg), []).append(bench_engine(X, y, C, model_name, M=M, algorithm=alg,
                                                                  steps=steps)[0])
        print(f"round {rep + 1} of {repeats} done", flush=True)
    env["load_avg_after"] = round(os.getloadavg()[0], 2)
    base_path = out / "ratios_baseline.json"
    base = ({r["workload"]: r for r in json.loads(base_path.read_text())["records"]}
            if base_path.exists() and not save_baseline else {})
    records = []
    for wl, (M, steps, target) in RATIO_PLAN.items():
        dp, sgd = np.array(sps[(wl, "dpsgd")]), np.array(sps[(wl, "sgd")])
        per_round = dp / sgd
        r = {"workload": wl, "n_models": M, "steps": steps, "target": target,
             "dpsgd_samples_per_s": round(float(np.median(dp)), 1), "sgd_samples_per_s": round(float(np.median(sgd)), 1),
             "ratio": round(float(np.median(per_round)), 3), "ratio_min": round(float(per_round.min()), 3),
             "ratio_max": round(float(per_round.max()), 3)}
        if wl in base:
            r["sgd_vs_baseline"] = round(r["sgd_samples_per_s"] / base[wl]["sgd_samples_per_s"], 3)
            r["dpsgd_vs_baseline"] = round(r["dpsgd_samples_per_s"] / base[wl]["dpsgd_samples_per_s"], 3)
        records.append(r)
        print(json.dumps(r), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    doc = json.dumps({"environment": env, "records": records}, indent=1)
    (out / "ratios.json").write_text(doc)
    if save_baseline:
        base_path.write_text(doc)
    lines = [f"DP-SGD ÷ non-private at one bank size per workload, measured in one run: {env['threads']} threads, torch "
             f"{env['torch']}, medians of {repeats} interleaved rounds (the ratio: the median of per-round ratios, "
             f"with its range); load average {env['load_avg_before']} before, {env['load_avg_after']} after. "
             "× baseline: this run's median throughput over `ratios_baseline.json`'s (another run: read it loosely).",
             "", "| workload | M | DP-SGD samples/s | SGD samples/s | DP ÷ non-private | range | target | met "
             "| SGD × baseline | DP-SGD × baseline |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['workload']} | {r['n_models']} | {r['dpsgd_samples_per_s']:,.0f} "
                     f"| {r['sgd_samples_per_s']:,.0f} | {r['ratio']:.2f} | {r['ratio_min']:.2f}–{r['ratio_max']:.2f} "
                     f"| {r['target']:.2f} "
                     f"| {'yes' if r['ratio'] >= r['target'] else 'no'} | {r.get('sgd_vs_baseline', '')} "
                     f"| {r.get('dpsgd_vs_baseline', '')} |")
    (out / "ratios.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


# workload -> (K groups, M models, steps, the target for rule time ÷ DP-SGD time)
RULE_COST_PLAN = {"adult_lr": (2, 128, 60, 1.1), "mnist_mlp": (10, 8, 12, 1.3), "mnist_cnn": (10, 2, 4, 1.3)}
RULE_COST_RULES = ("dpsgd_s", "dpsgd_s_paper", "dpsgd_s_paper_code", "dpsgd_group_fixed", "dpsgd_f", "global_adapt",
                   "adaclip")


def _rule_bank(X, y, g, C, model_name, *, M: int, algorithm: str, steps: int, K: int) -> float:
    """Seconds per step of one bank of ``algorithm`` (the trainer's own timer: the steps only)."""
    n = len(y)
    settings = {"shares": tuple([1.0 / K] * K)} if algorithm == "dpsgd_group_fixed" else ()
    spec = TrainSpec(algorithm=algorithm, model=model_name, epochs=steps * B / n, batch_size=B, lr=0.1, clip=1.0,
                     target_epsilon=10.0, settings=settings)
    bank = train_bank(X, y, g, np.ones((M, n), bool), spec, n_classes=C, n_groups=K, seed=0, progress=False)
    return bank.seconds / bank.steps


def _bench_env(rounds: int) -> dict:
    """A rule-cost run's environment: threads, torch, rounds, the commit and the load average before."""
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                            text=True).stdout.strip() or None
    return {"threads": torch.get_num_threads(), "torch": torch.__version__, "rounds": rounds, "commit": commit,
            "load_avg_before": round(os.getloadavg()[0], 2)}


def _interleaved(workloads, arms: list, timed, rounds: int) -> dict[tuple, list[float]]:
    """``rounds`` rounds of ``timed(workload, arm)`` over every workload and arm, the arms in reverse order every
    other round: {(workload, arm): seconds per step, one per round}."""
    per: dict[tuple, list[float]] = {}
    for rnd in range(rounds):
        for wl in workloads:
            for arm in (arms if rnd % 2 == 0 else arms[::-1]):
                per.setdefault((wl, arm), []).append(timed(wl, arm))
        print(f"round {rnd + 1} of {rounds} done", flush=True)
    return per


def _ratio(base: list[float], times: list[float], digits: int) -> dict:
    """Milliseconds per step of the baseline and the arm (medians), and the median per-round ratio with its range."""
    b, t = np.array(base), np.array(times)
    ratio = t / b
    return {"base_ms": round(1000 * float(np.median(b)), digits),
            "rule_ms_per_step": round(1000 * float(np.median(t)), digits), "ratio": round(float(np.median(ratio)), 3),
            "ratio_min": round(float(ratio.min()), 3), "ratio_max": round(float(ratio.max()), 3)}


PAIRS_PER_STEP = "pairs every step"
MKL_FLOAT64 = "MKL float64"  # version 4: the Gram route's float64 products through torch's MKL (under MKL_CBWR)


def _input_pairs_seconds(X) -> dict[int, float]:
    """Seconds (median of 3) of DenseBackend.cache_inputs on the workload's inputs X and on 10,000 rows of them
    (the MNIST MLP cell's pool), the one-off cost of numerics version 4's cached input pairs."""
    from fairdp_core.engine.backends import DenseBackend

    X = torch.as_tensor(X)
    big = X[torch.arange(10_000) % len(X)]
    out = {}
    for x in (X, big):
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            DenseBackend(["fc1"]).cache_inputs(x)
            times.append(time.perf_counter() - t0)
        out[len(x)] = round(float(np.median(times)), 2)
    return out


def rule_cost(out: Path, *, rounds: int) -> None:
    """Each rule's seconds per step ÷ DP-SGD's on the same bank (M models, K groups drawn uniformly), ``rounds``
    interleaved rounds after an untimed one; the ratio is the median of per-round ratios, with its range. The paper
    rules are timed twice: as the engine runs them (the CNN's one-pass group sums; on the dense backend with K > 2
    the Gram matrix of the sums and the release drawn from it) and with K passes of the clipped sum and the full
    release (the code before both), in the same rounds; on the dense backend with K > 2 also as versions 4 (the
    Gram matrix's float64 products through torch's MKL) and 3 (MKL, and the input pairs formed every step)."""
    from fairdp_core.engine import backends

    env = _bench_env(rounds)
    arms = [(r, "engine") for r in RULE_COST_RULES] + [(r, how) for how in ("K passes", PAIRS_PER_STEP, MKL_FLOAT64)
                                                       for r in ("dpsgd_s_paper", "dpsgd_s_paper_code")]
    engine_path = {(c, a): getattr(c, a) for c in (backends.DenseBackend, backends.LayerBackend)
                   for a in ("group_sums", "reads_gram", "cache_inputs")}
    f64_bmm = backends._f64_bmm

    def timed(wl, data, alg, how, steps):
        K, M, _, _ = RULE_COST_PLAN[wl]
        X, y, g, C, model_name = data
        if how in (PAIRS_PER_STEP, MKL_FLOAT64) and not (K > 2 and model_name in ("lr", "mlp")):
            return float("nan")  # the dense backend's Gram route only
        if how in (PAIRS_PER_STEP, MKL_FLOAT64):
            backends._f64_bmm = torch.bmm
        if how != "engine":
            for c, a in engine_path:
                if how == "K passes" or (how == PAIRS_PER_STEP and a == "cache_inputs"):
                    setattr(c, a, getattr(backends.Backend, a))
        try:
            return _rule_bank(X, y, g, C, model_name, M=M, algorithm=alg, steps=steps, K=K)
        finally:
            for (c, a), f in engine_path.items():
                setattr(c, a, f)
            backends._f64_bmm = f64_bmm

    data = {}
    for wl, (K, _M, steps, _) in RULE_COST_PLAN.items():
        X, y, C, model_name = workload(wl)
        data[wl] = (X, y, np.random.default_rng(1).integers(0, K, len(y)), C, model_name)
        for alg, how in [("dpsgd", "engine"), *arms]:  # untimed: allocator growth, lazy inits
            timed(wl, data[wl], alg, how, max(2, steps // 4))
    per = _interleaved(RULE_COST_PLAN, [("dpsgd", "engine"), *arms],
                       lambda wl, arm: timed(wl, data[wl], *arm, RULE_COST_PLAN[wl][2]), rounds)
    env["load_avg_after"] = round(os.getloadavg()[0], 2)
    env["input_pairs_s"] = _input_pairs_seconds(data["mnist_mlp"][0])
    records = []
    for wl, (K, M, steps, target) in RULE_COST_PLAN.items():
        for alg, how in arms:
            if np.isnan(per[(wl, (alg, how))]).any():
                continue
            r = _ratio(per[(wl, ("dpsgd", "engine"))], per[(wl, (alg, how))], 1)
            records.append({"workload": wl, "K": K, "n_models": M, "steps": steps, "rule": alg, "group_sums": how,
                            "dpsgd_ms_per_step": r.pop("base_ms"), **r, "target": target})
            print(json.dumps(records[-1]), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rule_cost.json").write_text(json.dumps({"environment": env, "records": records}, indent=1))
    lines = [f"Each rule's time per step ÷ DP-SGD's on the same bank, measured in one run: {env['threads']} threads, "
             f"torch {env['torch']}, commit {env['commit']}, medians of {rounds} interleaved rounds (the ratio: the median "
             f"of per-round ratios, with its range); load average {env['load_avg_before']} before, "
             f"{env['load_avg_after']} after. Groups drawn uniformly. The paper rules also with K passes of the "
             "clipped sum and the full release (the code before the one-pass sums and the Gram matrix) and, on the "
             f"MLP, with the first layer's input pairs formed every step ({PAIRS_PER_STEP}: numerics version 3, "
             f"before the cache) and with the Gram matrix's float64 products through torch's MKL ({MKL_FLOAT64}: "
             "version 4, before numpy's OpenBLAS), in the same rounds. The cache of the inputs' pairs is built once "
             "per bank, outside the steps timed (median of 3): "
             + ", ".join(f"n = {n:,}: {t} s" for n, t in env["input_pairs_s"].items())
             + " (a claims run of the MNIST MLP cell, n = 10,000, has about 780 steps).", "",
             "| workload | K | M | rule | group statistics | DP-SGD ms/step | rule ms/step | rule ÷ DP-SGD | range | target "
             "| met |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['workload']} | {r['K']} | {r['n_models']} | {r['rule']} | {r['group_sums']} "
                     f"| {r['dpsgd_ms_per_step']} | {r['rule_ms_per_step']} | {r['ratio']:.2f} "
                     f"| {r['ratio_min']:.2f}–{r['ratio_max']:.2f} | {r['target']:.1f} "
                     f"| {'yes' if r['ratio'] <= r['target'] else 'no'} |")
    (out / "rule_cost.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


CBWR_SETTINGS = ("COMPATIBLE", "AVX2", "AUTO")
CBWR_PLAN = {"mnist_mlp": (8, 12), "adult_lr": (128, 60)}  # workload: (M, steps)
_CBWR_CHILD = """
import sys, torch, numpy as np
sys.path.insert(0, {here!r})
import run as R
torch.set_num_threads(1)
X, y, C, model_name = R.workload({wl!r})
g = np.random.default_rng(1).integers(0, 2, len(y))
R._rule_bank(X, y, g, C, model_name, M={M}, algorithm="dpsgd", steps=3, K=2)
print(R._rule_bank(X, y, g, C, model_name, M={M}, algorithm="dpsgd", steps={steps}, K=2))
"""


def mkl_cbwr(out: Path, *, rounds: int) -> None:
    """Seconds per DP-SGD step of one bank under each ``MKL_CBWR`` setting (MKL reads it once, at its first call, so
    each measurement is a fresh process), ``rounds`` interleaved rounds, the settings in reverse order every other
    round; per setting the median, and the median per-round ratio to COMPATIBLE (the stages' setting) with its
    range. COMPATIBLE and AVX2 are both reproducible (AVX2 on CPUs with AVX2); AUTO is not."""
    import subprocess
    import sys

    env = {**_bench_env(rounds), "threads": 1}  # each child process's torch threads
    per: dict[tuple[str, str], list[float]] = {}
    for rnd in range(rounds):
        for wl, (M, steps) in CBWR_PLAN.items():
            for setting in (CBWR_SETTINGS if rnd % 2 == 0 else CBWR_SETTINGS[::-1]):
                code = _CBWR_CHILD.format(here=str(Path(__file__).parent), wl=wl, M=M, steps=steps)
                res = subprocess.run([sys.executable, "-c", code], env={**os.environ, "MKL_CBWR": setting},
                                     capture_output=True, text=True, check=True)
                per.setdefault((wl, setting), []).append(float(res.stdout.split()[-1]))
        print(f"round {rnd + 1} of {rounds} done", flush=True)
    env["load_avg_after"] = round(os.getloadavg()[0], 2)
    records = []
    for wl, (M, steps) in CBWR_PLAN.items():
        for setting in CBWR_SETTINGS:
            r = _ratio(per[(wl, "COMPATIBLE")], per[(wl, setting)], 2)
            records.append({"workload": wl, "n_models": M, "steps": steps, "MKL_CBWR": setting,
                            "compatible_ms_per_step": r.pop("base_ms"), **r})
    out.mkdir(parents=True, exist_ok=True)
    (out / "mkl_cbwr.json").write_text(json.dumps({"environment": env, "records": records}, indent=1))
    lines = [f"A DP-SGD step of one bank under each MKL_CBWR setting, one fresh process per measurement: "
             f"{env['threads']} threads, torch {env['torch']}, commit {env['commit']}, medians of {rounds} interleaved "
             f"rounds (the ratio to COMPATIBLE, the stages' setting: the median of per-round ratios, with its range); "
             f"load average {env['load_avg_before']} before, {env['load_avg_after']} after.", "",
             "| workload | M | MKL_CBWR | ms/step | ÷ COMPATIBLE | range |", "|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['workload']} | {r['n_models']} | {r['MKL_CBWR']} | {r['rule_ms_per_step']} "
                     f"| {r['ratio']:.2f} | {r['ratio_min']:.2f}–{r['ratio_max']:.2f} |")
    (out / "mkl_cbwr.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


OPACUS_RULES = ("dpsgd_s", "dpsgd_s_paper", "dpsgd_f", "global_adapt", "adaclip")


def _opacus_rule_step(X, y, g, C, model_name, *, rule: str, K: int, steps: int) -> float:
    """Seconds per step of ``steps`` Poisson batches (B = 256) through ``PrivacyEngine.make_private`` (rule
    "dpsgd") or the rule's ``make_private_<rule>`` (fairdp_core.opacus_compat), one model, σ_eff = 1, C = 1."""
    from fairdp_core import opacus_compat as oc

    torch.manual_seed(0)
    model = build_model(model_name, X.shape[1:], C)
    loader = DataLoader(TensorDataset(torch.as_tensor(X), torch.as_tensor(y), torch.as_tensor(g)), batch_size=B,
                        generator=torch.Generator().manual_seed(0))
    pe = PrivacyEngine(accountant="rdp")
    common = dict(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), data_loader=loader,
                  noise_multiplier=1.0)
    if rule == "dpsgd":
        model, opt, loader = pe.make_private(max_grad_norm=1.0, **common)
    elif rule == "dpsgd_s":
        model, opt, loader = oc.make_private_dpsgd_s(pe, sigma_b=20.0, n_groups=K, tau=1.0, gamma=0.75, eta_q=0.2,
                                                     q_init=1.0, **common)
    elif rule == "dpsgd_s_paper":
        model, opt, loader = oc.make_private_dpsgd_s_paper(pe, n_groups=K, clip=1.0, **common)
    elif rule == "dpsgd_f":
        model, opt, loader = oc.make_private_dpsgd_f(pe, sigma_b=20.0, n_groups=K, clip=1.0, **common)
    elif rule == "global_adapt":
        model, opt, loader = oc.make_private_global_adapt(pe, sigma_b=20.0, clip=1.0, z_init=1.0, **common)
    else:
        model, opt, loader = oc.make_private_adaclip(pe, sigma_b=20.0, clip=1.0, **common)
    grouped = hasattr(opt, "set_groups")
    done, elapsed = 0, 0.0
    while done < steps:
        for xb, yb, gb in loader:
            t0 = time.perf_counter()
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            if grouped:
                opt.set_groups(gb)
            opt.step()
            elapsed += time.perf_counter() - t0
            done += 1
            if done == steps:
                break
    return elapsed / steps


def opacus_rule_cost(out: Path, *, rounds: int) -> None:
    """The Opacus route: each rule's ``make_private_<rule>`` seconds per step ÷ Opacus's own DP-SGD
    (``make_private``) on the same data, one model, ``rounds`` interleaved rounds after an untimed one (medians of
    per-round ratios, with their range). Workloads and K as in :func:`rule_cost` (groups drawn uniformly)."""
    env = _bench_env(rounds)
    plan = {"adult_lr": (2, 40, 1.1), "mnist_mlp": (10, 12, 1.3)}
    data = {}
    for wl, (K, _steps, _) in plan.items():
        X, y, C, model_name = workload(wl)
        data[wl] = (X, y, np.random.default_rng(1).integers(0, K, len(y)), C, model_name)
        for rule in ("dpsgd", *OPACUS_RULES):  # untimed
            _opacus_rule_step(*data[wl], rule=rule, K=K, steps=2)
    per = _interleaved(plan, ["dpsgd", *OPACUS_RULES], lambda wl, rule: _opacus_rule_step(
        *data[wl], rule=rule, K=plan[wl][0], steps=plan[wl][1]), rounds)
    env["load_avg_after"] = round(os.getloadavg()[0], 2)
    records = []
    for wl, (K, steps, target) in plan.items():
        for rule in OPACUS_RULES:
            r = _ratio(per[(wl, "dpsgd")], per[(wl, rule)], 2)
            records.append({"workload": wl, "K": K, "steps": steps, "rule": rule,
                            "opacus_dpsgd_ms_per_step": r.pop("base_ms"), **r, "target": target})
            print(json.dumps(records[-1]), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "opacus_rule_cost.json").write_text(json.dumps({"environment": env, "records": records}, indent=1))
    lines = [f"The Opacus route: each rule's make_private_<rule> time per step ÷ Opacus's own DP-SGD (make_private) "
             f"on the same data, one model, measured in one run: {env['threads']} threads, torch {env['torch']}, commit "
             f"{env['commit']}, medians of {rounds} interleaved rounds (the ratio: the median of per-round ratios, with its "
             f"range); load average {env['load_avg_before']} before, {env['load_avg_after']} after.", "",
             "| workload | K | rule | Opacus DP-SGD ms/step | rule ms/step | rule ÷ DP-SGD | range | target | met |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['workload']} | {r['K']} | {r['rule']} | {r['opacus_dpsgd_ms_per_step']} "
                     f"| {r['rule_ms_per_step']} | {r['ratio']:.2f} | {r['ratio_min']:.2f}–{r['ratio_max']:.2f} "
                     f"| {r['target']:.1f} | {'yes' if r['ratio'] <= r['target'] else 'no'} |")
    (out / "opacus_rule_cost.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def cnn_step(out: Path, *, repeats: int) -> None:
    """Where a CNN's DP-SGD step goes, per model and step (256 samples, one thread, medians of ``repeats``
    interleaved rounds of 10 calls): SGD's whole gradient (``batch_grad``) against DP-SGD's forward and backward to
    the layer outputs (``_one``), each convolution's patch copy and per-sample GEMM, the norms and the clipped sum.
    What is left of the DP-SGD ÷ non-private ratio to gain is read off these (docs/performance.md)."""
    import statistics

    from fairdp_core.engine.backends import LayerBackend, _row_sq
    from fairdp_core.models import MnistCNN, UTKFaceCNN

    torch.set_num_threads(1)
    W, rows = 256, []
    cases = {"mnist_cnn": (MnistCNN(10), (1, 28, 28), 10), "utkface_cnn": (UTKFaceCNN(2), (1, 48, 48), 2)}
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(repeats):
        for wl, (mod, shape, C) in cases.items():
            torch.manual_seed(0)
            be = LayerBackend(mod)
            p1 = {k: v.detach().clone() for k, v in be.module.named_parameters()}
            p = {k: v.unsqueeze(0) for k, v in p1.items()}
            x, y, w = torch.randn(1, W, *shape), torch.randint(0, C, (1, W)), torch.ones(1, W)
            norms, ctx = be.per_sample(p, x, y)
            pairs = be._one(p1, x[0], y[0])
            parts = {"SGD: batch_grad": lambda: be.batch_grad(p, x, y, w),
                     "DP-SGD: per_sample (all)": lambda: be.per_sample(p, x, y),
                     "DP-SGD: forward + backward to outputs": lambda: be._one(p1, x[0], y[0]),
                     "DP-SGD: clipped_sum": lambda: be.clipped_sum(ctx, w)}
            for (name, layer), (a, d) in zip(be.layers, pairs):
                if isinstance(layer, torch.nn.Conv2d):
                    P = be._patches(layer, a)
                    g = torch.bmm(d.flatten(2), P)
                    parts[f"DP-SGD: {name} patches"] = lambda layer=layer, a=a: be._patches(layer, a)
                    parts[f"DP-SGD: {name} per-sample GEMM"] = lambda d=d, P=P: torch.bmm(d.flatten(2), P)
                    parts[f"DP-SGD: {name} norms"] = lambda g=g: _row_sq(g.flatten(1))
            for name, fn in parts.items():
                fn()
                t0 = time.perf_counter()
                for _ in range(10):
                    fn()
                times.setdefault((wl, name), []).append((time.perf_counter() - t0) / 10 * 1e3)
    lines = [f"Per model and step (256 samples, 1 thread, torch {torch.__version__}), medians of {repeats} interleaved "
             "rounds of 10 calls, ms. `python benchmarks/run.py --cnn-step`.", "", "| workload | part | ms | range |",
             "|---|---|---|---|"]
    for (wl, name), v in times.items():
        rows.append({"workload": wl, "part": name, "median_ms": round(statistics.median(v), 2),
                     "min_ms": round(min(v), 2), "max_ms": round(max(v), 2)})
        lines.append(f"| {wl} | {name} | {statistics.median(v):.2f} | {min(v):.2f}–{max(v):.2f} |")
    out.mkdir(parents=True, exist_ok=True)
    (out / "cnn_step.json").write_text(json.dumps(rows, indent=1))
    (out / "cnn_step.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def table(records, env) -> str:
    reps = max(r.get("repeats", 1) for r in records)
    lines = [f"Measured in one run: {env['threads']} threads, torch {env['torch']}, matmul peak "
             f"{env['matmul_peak_gflops']} GFLOP/s, malloc thresholds {env['MALLOC_MMAP_THRESHOLD_']}/"
             f"{env['MALLOC_TRIM_THRESHOLD_']}; "
             + (f"medians of {reps} interleaved rounds (samples/s: the range over rounds), every ratio a ratio of medians."
                if reps > 1 else "one round."), "",
             "| workload | method | M | samples/s | range | model-epochs/s | GFLOP/s | % peak | × Opacus fastest "
             "| × make_private | DP ÷ non-private |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for wl in dict.fromkeys(r["workload"] for r in records):
        rs = [r for r in records if r["workload"] == wl]
        fast = next(r["samples_per_s"] for r in rs if r["method"] == "opacus_hooks_tensors")
        std = next(r["samples_per_s"] for r in rs if r["method"] == "opacus_make_private")
        sgd = {r["n_models"]: r["samples_per_s"] for r in rs if r["method"] == "engine_sgd"}
        for r in rs:
            ratio = (f"{r['samples_per_s'] / sgd[r['n_models']]:.2f}"
                     if r["method"] == "engine_dpsgd" and r["n_models"] in sgd else "")
            rng = (f"{r['samples_per_s_min']:,.0f}–{r['samples_per_s_max']:,.0f}" if "samples_per_s_min" in r else "")
            lines.append(f"| {wl} | {r['method']} | {r['n_models']} | {r['samples_per_s']:,.0f} | {rng} | "
                         f"{r['model_epochs_per_s']:.3f} | {r['gflops']} | {r['pct_matmul_peak']} | "
                         f"{r['samples_per_s'] / fast:.2f} | {r['samples_per_s'] / std:.2f} | {ratio} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
