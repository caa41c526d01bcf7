"""The DVC stage entry points, one module per stage (``python -m fairdp_core.stages.<stage> KEY``).

Each stage module imports only what that stage needs, so dvc.yaml can list exactly the code a stage depends on
(tests/test_stages.py imports every entry point in a fresh interpreter and checks the modules it loads against
the stage's declared deps): editing reporting code retrains nothing, editing the attacks reruns no training.
This package's ``__init__`` holds only the shared command-line plumbing and imports nothing heavy.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from ..atomic import jsonable  # noqa: F401  (re-exported: the stages write their JSON with it)

__all__ = ["jsonable", "read_plan", "stage_main", "write_timings"]

# glibc's allocator maps and zeroes large per-step temporaries afresh every step (docs/performance.md); the
# thresholds only take effect for a process started with them, so a training stage re-execs once with them set.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "68719476736"}
# MKL (torch's CPU BLAS) picks its code path per call from the buffers' memory alignment, which shifts with the
# process's environment: the same stage with the same seed gave banks differing in the last float bits (1,762 of
# 16,000 losses of one Adult bank; 5 of the 64 default banks). Conditional numerical reproducibility with the
# generic branch makes a bank the same bytes in every process (tested under 7 environments); it costs about 1.6x on
# the MLP here. A user who sets MKL_CBWR keeps theirs.
REPRO_ENV = {"MKL_CBWR": os.environ.get("MKL_CBWR", "COMPATIBLE")}


def _has_avx2() -> bool:
    """Whether this CPU runs AVX2 (Linux's /proc/cpuinfo; elsewhere False, so nothing is pinned)."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx2" in line for line in f)
    except OSError:
        return False


# torch's own kernels (reductions, element-wise ops) are compiled per vector width and picked per CPU, and each
# width rounds differently: an AVX-512 machine gave other banks than an AVX2 one under the same MKL_CBWR (docs/
# pipeline.md). Pinning the AVX2 kernels wherever the CPU has them makes both kinds run the same code. torch does not
# check the CPU against this variable, so it is set only where AVX2 exists. A user who sets it keeps theirs.
if os.environ.get("ATEN_CPU_CAPABILITY") or _has_avx2():
    REPRO_ENV["ATEN_CPU_CAPABILITY"] = os.environ.get("ATEN_CPU_CAPABILITY") or "avx2"
# numpy's OpenBLAS (the paper rules' float64 Gram products, engine/backends.py _f64_bmm) also picks its kernels per
# CPU: its Haswell (AVX2) kernels wherever the CPU has AVX2, what an AVX2 machine picks by itself.
if os.environ.get("OPENBLAS_CORETYPE") or _has_avx2():
    REPRO_ENV["OPENBLAS_CORETYPE"] = os.environ.get("OPENBLAS_CORETYPE") or "Haswell"


def reexec_with_malloc_env(module: str, argv: list[str]) -> None:
    """Re-exec a training stage once with the allocator and reproducibility settings (they only take effect for a
    process started with them)."""
    want = {**MALLOC_ENV, **REPRO_ENV}
    if os.environ.get("FAIRDP_NO_REEXEC") or all(os.environ.get(k) == v for k, v in want.items()):
        return
    env = {**os.environ, **want, "FAIRDP_NO_REEXEC": "1"}
    os.execve(sys.executable, [sys.executable, "-m", module, *argv], env)


def stage_main(name: str, fn: Callable[[list[str]], int], argv: list[str] | None = None) -> int:
    """Run a stage's ``fn(argv)``; a configuration or data error is one line on stderr and exit status 2."""
    from ..config import ConfigError

    try:
        return fn(sys.argv[1:] if argv is None else argv)
    except (ConfigError, KeyError, ValueError, FileNotFoundError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        print(f"fairdp {name}: error: {msg}", file=sys.stderr)
        return 2


def read_plan(path: str | os.PathLike) -> dict:
    """A run's plan file (written by the plan stage)."""
    import json
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p} missing: run the plan stage first (`dvc repro plan`, or "
                                "`python -m fairdp_core.stages.plan`)")
    return json.loads(p.read_text())


def write_timings(params, key: str, timings: dict[str, float]) -> None:
    """Wall-clock seconds of a stage, outside every DVC-tracked output (``results/timings/<key>.json``), so that
    reruns with the same params and seed stay byte-identical."""
    import json

    from ..atomic import write_text

    write_text(params.resolve("results/timings") / f"{key}.json",
               json.dumps({k: round(v, 3) for k, v in timings.items()}, indent=1) + "\n")
