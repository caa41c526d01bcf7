"""The ``claims`` campaign: the paper's claims at the paper's own design, run part by part (docs/claims.md).

A *part* is one dataset × model × ε of the ``claims`` profile (``law_paper-lr-e10``), or a dataset's SGD reference
(``law_paper-lr-sgd``). ``run_part`` trains and attacks its runs seed by seed (every arm of a seed before the next
seed, so that finished seeds are always paired), in this checkout's ``results/``, and writes one small summary per
run to ``reports/paper/claims/<run>.json`` (or ``--summaries``): its commit, a hash of its effective plan, the
numerics version, the package versions, accuracy, accounting, clipping per group, each attack's Δ and contrast, and
the wall time of train / signals / attack / overhead. A run whose summary exists with the same plan hash and
numerics version is never rerun, so a part can be stopped and restarted anywhere.

Seeds: ``min_seeds`` (6) paired seeds first; then as many more (up to the profile's ``seeds``, 16) as the spread of
the paired difference Δ(paper's rule made DP) − Δ(DP-SGD) needs for 80% power against ``effect_share`` (20%) of the
cell's Δ, for both estimators, re-estimated each time the current target is reached. The estimate is blinded
(:func:`seeds_needed`: the uncentred second moment of the differences, the two arms' pooled Δ), so that it does
not depend on which arm is which and does not inflate the paired test's type I error.

The campaign runs from a pinned git worktree of a committed revision (``--allow-dirty`` to override), one torch
thread, so that the main tree can change while it trains.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..atomic import jsonable, write_text
from ..audit.verdicts import seeds_needed
from ..config import ConfigError, Params
from ..versions import package_versions

__all__ = ["CLAIMS_ATTACKS", "NUMERICS_VERSION", "CampaignError", "CampaignPool", "numerics_of", "part_runs", "parts",
           "plan_hash", "run_part", "seeds_needed", "summary_numerics", "summary_path"]

# The bits a bank is trained to: bumped whenever a change to the engine changes every trained bank's bytes
# (tests/test_claims.py pins a small bank's hash to this version); a change that moves only some rules' bits bumps
# those rules' own version instead (Rule.numerics, :func:`numerics_of`). A verdict pools one version per arm and cell.
NUMERICS_VERSION = 1
# The attacks the claims profile runs: the two estimators every verdict shows, and the cheap reference attacks. The
# null-corrected PA-ALOOA estimator and PA-GBA are left out (together half the attack stage at m = n).
CLAIMS_ATTACKS = ("alooa_cross_fit", "alooa_in_sample", "ga", "lira_online", "lira_offline", "rmia")
# The profiles the campaign runs are those named claims* (the claims profile, the MNIST SD pilot and designs, the
# UTKFace pilot and CPU design) and frontier* (DP-SGD's accuracy–Δ frontier and the rules' extra points,
# docs/frontier.md).
CAMPAIGN_PREFIX = ("claims", "frontier")


def part_of(run: dict) -> str:
    if run["algorithm"] == "sgd":
        return f"{run['dataset']}-{run['model']}-sgd"
    return f"{run['dataset']}-{run['model']}-e{run['epsilon']:g}"


def parts(params: Params) -> list[str]:
    """Every part of the profile's grid, in grid order."""
    out: list[str] = []
    for r in params.runs.values():
        p = part_of(r.model_dump())
        if p not in out:
            out.append(p)
    return out


def part_runs(params: Params, part: str) -> dict[int, list[str]]:
    """seed -> the part's run names at that seed (grid order)."""
    out: dict[int, list[str]] = {}
    for name, r in params.runs.items():
        if part_of(r.model_dump()) == part:
            out.setdefault(r.seed, []).append(name)
    if not out:
        raise ConfigError(f"no part {part!r} in the {params.profile!r} profile (parts: {', '.join(parts(params))})")
    return dict(sorted(out.items()))


def effective_plan(params: Params, name: str) -> dict:
    """What determines run ``name``'s summary: its train and attack plans and the attacks run."""
    from ..stages.plan import attack_plan, train_plan

    return {"train": train_plan(params, name), "attack": attack_plan(params, name), "attacks": list(CLAIMS_ATTACKS)}


def plan_hash(plan: dict) -> str:
    return hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()[:16]


def summary_path(summaries: Path, name: str) -> Path:
    return Path(summaries) / f"{name}.json"


def _git(args: list[str], cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def checkout_commit(base: Path, *, allow_dirty: bool = False) -> str:
    """The commit this checkout is at; a checkout with uncommitted changes to tracked files is refused (except
    params.yaml and runs.yaml, which `fairdp use-profile claims` rewrites: each run's effective plan is hashed)."""
    head = _git(["rev-parse", "HEAD"], base)
    dirty = _git(["status", "--porcelain", "--untracked-files=no", "--", ".", ":!params.yaml", ":!runs.yaml"], base)
    if dirty and not allow_dirty:
        raise ConfigError(f"{base}: uncommitted changes to tracked files; run the campaign from a pinned worktree of "
                          "a committed revision (git worktree add ../claims-run HEAD)")
    return head + ("+dirty" if dirty else "")


# The models the dense backend trains, which keeps K passes for the group sums at K ≤ 2 (engine/backends.py).
DENSE_MODELS = ("lr", "mlp")


def numerics_of(algorithm: str, model: str | None = None, n_groups: int | None = None) -> int:
    """The numerics version of a run of ``algorithm`` trained here: the engine's :data:`NUMERICS_VERSION`, or the
    rule's own (``Rule.numerics``) where a later change moved only that rule's bits. The paper rules' version 2 is
    their one-pass group sums (the CNNs); on the dense backend (LR, MLP) a run with ``n_groups`` ≤ 2 keeps K passes
    and the engine's bits and version, and one with more groups reads the sums' Gram matrix (``Rule.numerics_gram``,
    version 5: its float64 products through numpy's BLAS; 4 through torch's MKL; 3 formed the first layer's input
    pairs every step)."""
    from ..rules import get

    rule = get(algorithm)
    if model in DENSE_MODELS and n_groups is not None:
        if n_groups <= 2:
            return NUMERICS_VERSION
        if rule.numerics_gram is not None:
            return max(NUMERICS_VERSION, rule.numerics_gram)
    return max(NUMERICS_VERSION, rule.numerics)


def summary_numerics(s: dict) -> int:
    """The numerics version a run of summary ``s`` has when trained by this checkout."""
    return numerics_of(s["algorithm"], s.get("model"), len(s["group_names"]) if s.get("group_names") else None)


def _existing(path: Path, plan_sha: str) -> dict | None:
    if not path.is_file():
        return None
    s = json.loads(path.read_text())
    return s if s.get("plan_sha256") == plan_sha and s.get("numerics") == summary_numerics(s) else None


def _compact_attack(a: dict) -> dict:
    keep = ("delta_pp", "gpr", "null_floor_pp", "p_perm", "delta_lo", "delta_hi", "p_delta_gt_0", "contrast")
    return {k: a.get(k) for k in keep}


def _prepare(params: Params, dataset: str) -> None:
    prepared = params.resolve(params.data.prepared_dir) / dataset
    if not (prepared / "meta.json").is_file() and not any(prepared.glob("*")):
        from ..data.pipeline import prepare

        prepare(params, dataset)


def run_one(params: Params, name: str, part: str, summaries: Path | None, *, commit: str,
            progress: bool = True) -> dict:
    """Train and attack run ``name`` in this checkout's results/ and write its summary under ``summaries`` (None:
    only return it); returns the summary."""
    from ..stages.attack import run_attack
    from ..stages.design import write_design
    from ..stages.train import run_train

    t_all = time.perf_counter()
    plan = effective_plan(params, name)
    r = params.runs[name]
    _prepare(params, r.dataset)
    design_path = params.resolve("results/designs") / f"{plan['train']['design']}.npz"
    # Always drawn afresh (deterministic from the seed, a second at most): the file's name holds the dataset and seed
    # only, so one left by a campaign of another R or m in this checkout would otherwise be read as this one's.
    write_design(params, plan["train"]["design"], design_path)
    train_dir = params.resolve("results/train") / name
    t0 = time.perf_counter()
    info = run_train(params, name, train_dir, plan=plan["train"], design_path=design_path, progress=progress)
    train_wall = time.perf_counter() - t0
    tim = json.loads((params.resolve("results/timings") / f"train-{name}.json").read_text())
    t0 = time.perf_counter()
    summary, _ = run_attack(name, params.resolve("results/audit") / name, plan=plan["attack"], train_dir=train_dir,
                               design_path=design_path, attacks=CLAIMS_ATTACKS)
    attack_wall = time.perf_counter() - t0
    total = time.perf_counter() - t_all
    out = {
        "run": name, "part": part, "profile": params.profile, "dataset": r.dataset, "model": r.model,
        "algorithm": r.algorithm, "epsilon": r.epsilon, "seed": r.seed, "commit": commit,
        "plan_sha256": plan_hash(plan), "numerics": numerics_of(r.algorithm, r.model, len(info["group_names"])),
        "versions": package_versions(), "plan": plan,
        "n_models": info["n_models"], "m": info["m"], "R": info["R"], "n_train": info["n_train"],
        "n_test": info["n_test"], "group_names": info["group_names"], "class_names": info["class_names"],
        "device": params.train.device or "cpu",
        # What the plan hash leaves out but a CNN bank's last bits can depend on (torch threads, the MKL code path):
        # two summaries of one plan that differ here may differ in their bits, not in their distribution.
        "execution": {"threads": params.train.threads, "workers": params.compute.workers,
                      "MKL_CBWR": os.environ.get("MKL_CBWR")},
        "accuracy": info["accuracy"],
        "accounting": info["accounting"], "clipping": info["clipping"],
        "attacks": {k: _compact_attack(v) for k, v in summary["attacks"].items()},
        "wall_s": {"train": round(tim.get("train_s", train_wall), 1), "signals": round(tim.get("signals_s", 0.0), 1),
                   "attack": round(attack_wall, 1),
                   "overhead": round(total - tim.get("train_s", 0.0) - tim.get("signals_s", 0.0) - attack_wall, 1),
                   "total": round(total, 1)},
    }
    if summaries is not None:
        _write_summary(summaries, out)
    return out


def _log_line(s: dict) -> str:
    w = s["wall_s"]
    return (f"{s['run']}: acc {s['accuracy']['mean']:.4f}, Δ {s['attacks']['alooa_cross_fit']['delta_pp']:.3f} pp "
            f"(in-sample {s['attacks']['alooa_in_sample']['delta_pp']:.3f}); train {w['train']} s, attack "
            f"{w['attack']} s, total {w['total']} s")


def run_part(params: Params, part: str, summaries: Path, *, commit: str, min_seeds: int = 6,
             effect_share: float = 0.2, progress: bool = True, log: Callable[[str], None] = print,
             pool: CampaignPool | None = None) -> list[dict]:
    """Run ``part`` until it has the seeds its measured SD needs (or every seed for an SGD part); returns every
    summary of the part, in seed and grid order.

    The seeds run in waves: the first ``min_seeds``, then up to each new target of the blinded rule. A wave's runs
    are independent, so ``pool`` (:class:`CampaignPool`) may run them at once; without it they run here, one after
    the other (every arm of a seed before the next seed). The rule is re-estimated only at a wave's end, where the
    one-at-a-time order re-estimates it too, so both take the same decisions and run the same runs."""
    by_seed = part_runs(params, part)
    seeds = list(by_seed)
    max_seeds = len(seeds)
    done: list[dict] = []
    target, ran = min(min_seeds, max_seeds), 0
    while ran < target:
        wave = [name for seed in seeds[ran:target] for name in by_seed[seed]]
        done += run_wave(params, part, wave, summaries, commit=commit, progress=progress, log=log, pool=pool)
        ran = target
        if part.endswith("-sgd") or ran >= max_seeds:
            break
        need = seeds_needed(done, effect_share=effect_share, min_seeds=min_seeds, max_seeds=max_seeds)
        target = need["seeds"]
        sds = ", ".join(f"{k}: SD {v['sd_pp']:.3f} pp, {v['seeds']}" for k, v in need["detail"].items())
        log(f"{part}: {ran} seeds done; the measured spreads need {target} ({sds})")
    return done


def run_wave(params: Params, part: str, names: list[str], summaries: Path, *, commit: str, progress: bool,
              log: Callable[[str], None], pool: CampaignPool | None) -> list[dict]:
    """The summaries of runs ``names`` (in that order): read back where they exist with this plan and numerics,
    else run, here one by one or on ``pool`` (each written by this process as it arrives)."""
    got: dict[str, dict] = {}
    todo = []
    for name in names:
        s = _existing(summary_path(summaries, name), plan_hash(effective_plan(params, name)))
        if s is None:
            todo.append(name)
        else:
            got[name] = s
    if pool is None:
        for name in todo:
            got[name] = run_one(params, name, part, summaries, commit=commit, progress=progress)
            log(_log_line(got[name]))
    elif todo:

        for r in {params.runs[n].dataset for n in todo}:  # prepared here once, never by two workers at a time
            _prepare(params, r)
        t0, n = time.perf_counter(), len(todo)
        for k, (name, s) in enumerate(pool.run(params, part, todo, commit=commit), 1):
            _write_summary(summaries, s)
            got[name] = s
            eta = (time.perf_counter() - t0) / k * (n - k)
            log(f"{_log_line(s)} [{part}: {k} of {n} in this wave, ETA {eta / 60:.1f} min]")
    return [got[name] for name in names]


class CampaignError(RuntimeError):
    """A campaign worker failed or was killed; the summaries of the runs that finished are written."""


def _write_summary(summaries: Path, s: dict) -> None:
    """Run ``s["run"]``'s summary file, written atomically (one writer for the sequential and the pooled path)."""
    write_text(summary_path(summaries, s["run"]), json.dumps(jsonable(s), indent=1) + "\n")


def _as_stored(summary: dict) -> dict:
    """A summary as its file holds it (numpy values as JSON numbers and lists)."""
    return json.loads(json.dumps(jsonable(summary)))


def _run_task(params: Params, name: str, part: str, commit: str) -> tuple[str, dict]:
    """One whole run in a campaign worker (a loky process or a Ray task): one torch thread, the bank trained in this
    process (no shard pool inside a worker), the summary returned to the driver, which writes it."""
    import torch


    torch.set_num_threads(1)
    # serial in this process whatever the backend (shard_models [] keeps even a Ray profile from sharding); the
    # summary's execution record says so (workers 1), and that record is not compared by `claims verify`
    params = params.model_copy(update={"compute": params.compute.model_copy(update={"workers": 1,
                                                                                      "shard_models": []})})
    return name, _as_stored(run_one(params, name, part, None, commit=commit, progress=False))


class CampaignPool:
    """Whole runs as independent tasks, at most ``workers`` at a time: one-thread worker processes on this machine
    (``backend`` "loky", joblib's reusable pool), or Ray tasks of one CPU each (``backend`` "ray": a local Ray when
    ``ray_address`` is None or "local", else the cluster at that address, whose nodes see this checkout at the same
    path, docs/scaling.md). :meth:`run` yields each run's summary as it finishes. A failed or killed worker stops
    new runs; the runs in flight on live workers finish and are yielded (a killed loky worker breaks the pool: its
    runs in flight all fail), then :class:`CampaignError` names the runs that failed (the part resumes from its
    written summaries when rerun)."""

    def __init__(self, workers: int, backend: str = "loky", ray_address: str | None = None,
                 task: Callable = _run_task) -> None:
        if workers < 1:
            raise ConfigError(f"--workers {workers}: need at least 1")
        if backend not in ("loky", "ray"):
            raise ConfigError(f"compute.backend {backend!r}: loky or ray")
        self.workers, self.backend, self.ray_address, self.task = workers, backend, ray_address, task

    def run(self, params: Params, part: str, names: list[str], *, commit: str) -> Iterator[tuple[str, dict]]:
        calls = [(params, name, part, commit) for name in names]
        yield from (self._ray(calls) if self.backend == "ray" else self._loky(calls))

    def _loky(self, calls: list[tuple]) -> Iterator[tuple[str, dict]]:
        from concurrent.futures import FIRST_COMPLETED, wait

        from joblib.externals.loky import get_reusable_executor

        ex = get_reusable_executor(max_workers=self.workers, reuse=True)
        todo, pending, failed = list(calls), {}, []
        try:
            while pending or (todo and not failed):
                while todo and not failed and len(pending) < self.workers:  # at most one run per worker in flight
                    c = todo.pop(0)
                    pending[ex.submit(self.task, *c)] = c[1]
                done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                for f in done:
                    name = pending.pop(f)
                    try:
                        got = f.result()
                    except Exception as e:  # a worker killed (TerminatedWorkerError: its pool's runs all fail)
                        failed.append((name, e))
                        continue
                    yield got
        except BaseException:  # Ctrl-C, or the caller stopped: no worker keeps training
            ex.shutdown(wait=False, kill_workers=True)
            raise
        if failed:
            self._fail(failed, not_started=[c[1] for c in todo])

    def _ray(self, calls: list[tuple]) -> Iterator[tuple[str, dict]]:
        import ray

        from ..engine.shard import ray_connect

        ray_connect(self.ray_address, num_cpus=self.workers)
        task = ray.remote(self.task).options(num_cpus=1, max_retries=0)
        todo, pending, failed = list(calls), {}, []
        while pending or (todo and not failed):
            while todo and not failed and len(pending) < self.workers:
                c = todo.pop(0)
                pending[task.remote(*c)] = c[1]
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                name = pending.pop(ref)
                try:
                    yield ray.get(ref)
                except Exception as e:  # a Ray worker died or the run raised
                    failed.append((name, e))
        if failed:
            self._fail(failed, not_started=[c[1] for c in todo])

    def _fail(self, failed: list[tuple[str, BaseException]], not_started: list[str]) -> None:
        e = failed[0][1]
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        why = " ".join(lines[:1] + [ln for ln in lines[1:] if "exit code" in ln])  # one line, the exit codes kept
        rest = f"; {len(not_started)} runs not started" if not_started else ""
        raise CampaignError(f"{', '.join(n for n, _ in failed)}: a campaign worker failed ({type(e).__name__}: "
                            f"{why}){rest}; the finished runs' summaries are written: run the same command again to "
                            "resume") from e
