"""params.yaml helpers: validate it, generate its runs, switch profiles, set keys, run DVC experiments."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..atomic import atomic_path
from ..config import (
    GENERATED_KEYS,
    ConfigError,
    generated_path,
    load_params,
)
from ..study.params_files import PROFILES_DIR, profile_names, set_params, use_profile, write_generated


def dvc_executable() -> str:
    """The ``dvc`` on PATH, else the one beside this Python (the venv's, when the caller's PATH lacks the venv)."""
    import shutil
    import sys

    here = Path(sys.executable).with_name("dvc")
    found = shutil.which("dvc") or (str(here) if here.is_file() else None)
    if found is None:
        raise ConfigError(f"dvc: not found beside {sys.executable} or on PATH (`make install` installs it into .venv)")
    return found


def exp_run(assignments: list[str], *, queue: bool = False, name: str | None = None, params: str = "params.yaml",
            dvc_args: list[str] | None = None) -> int:
    """``dvc exp run`` with ``-S`` that also works for ``grid`` and ``sweep`` keys: apply the assignments, regenerate
    the runs, then run (or ``--queue``) the experiment from the workspace. params.yaml and the generated runs are
    restored byte for byte when the experiment fails (or is interrupted), and with ``--queue`` always, so that
    several experiments can be queued one after another."""
    import subprocess

    dvc = dvc_executable()  # before any edit
    path = Path(params)
    gen_path = generated_path(path)
    original = path.read_text()
    original_gen = gen_path.read_text() if gen_path.is_file() else None
    cmd = [dvc, "exp", "run", *(["--queue"] if queue else []), *(["-n", name] if name else []), *(dvc_args or [])]
    rc = 1
    try:
        set_params(path, assignments)
        rc = subprocess.run(cmd).returncode
        return rc
    finally:
        if queue or rc != 0:
            with atomic_path(path, suffix=".yaml") as tmp:
                tmp.write_text(original)
            if original_gen is not None:
                with atomic_path(gen_path, suffix=".yaml") as tmp:
                    tmp.write_text(original_gen)


# `dvc exp show` lists a column per file dependency of every stage (one per run and per fairdp_core module: all paths,
# and no params or metrics column name has a '/'), and the generated runs.yaml (read through vars) as params.
# DVC applies the pattern with re.match (anchored at the start).
EXP_SHOW_DROP = r".*/|(runs|designs)\.|runs\.yaml:"


def _cmd_check(args: argparse.Namespace) -> int:
    from ..rules import load_checked  # the rules' own sections too (this loads the training code)

    load_checked(args.params)
    print(f"{args.params}: ok")
    return 0


def _cmd_grid(args: argparse.Namespace) -> int:
    if args.write:
        write_generated(args.params)
    p = load_params(args.params)
    print(f"{args.params}: {len(p.runs)} runs, {len(p.designs)} designs")
    return 0


def _cmd_profile(args: argparse.Namespace) -> int:
    use_profile(args.name, args.params, args.profiles)
    p = load_params(args.params)
    print(f"{args.params}: profile {args.name}, {len(p.runs)} runs")
    return 0


def _cmd_set(args: argparse.Namespace) -> int:
    set_params(args.params, args.set)
    p = load_params(args.params)
    print(f"{args.params}: {len(p.runs)} runs")
    return 0


def _flat(d: dict | list, prefix: str = "") -> dict[str, object]:
    """Dotted keys of nested dicts, and of lists of dicts or lists by index (grid.0.epsilons, as ``-S`` names them);
    a list of plain values is one value."""
    out: dict[str, object] = {}
    items = d.items() if isinstance(d, dict) else enumerate(d)
    for k, v in items:
        key = f"{prefix}{k}"
        if isinstance(v, dict) or (isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v)):
            out |= _flat(v, f"{key}.")
        else:
            out[key] = v
    return out


def exp_table(states: list[dict], *, all_rows: bool = False, metrics_file: str = "reports/metrics.json") -> str:
    """The experiments of ``dvc exp show --json`` (``states``) as a table that fits a terminal: one column per
    experiment (the workspace, each baseline commit, each experiment of it), one row per parameter whose value
    differs between them (first), then one row per configuration of the headline metrics (accuracy, Δ with its
    interval, pp) whose numbers differ; ``all_rows``: every configuration's row. Queued or failed experiments, which
    have no results, are named below the table."""
    cols: list[tuple[str, dict]] = []
    pending: list[str] = []

    def add(label: str, state: dict) -> None:
        data = state.get("data") or {}
        params = (data.get("params") or {}).get("params.yaml", {}).get("data") or {}
        metrics = (data.get("metrics") or {}).get(metrics_file, {}).get("data") or {}
        if not metrics or state.get("error"):  # queued or running (DVC gives them params only) or failed
            pending.append(label)
            return
        cols.append((label, {"params": _flat({k: v for k, v in params.items() if k not in GENERATED_KEYS}),
                             "metrics": metrics}))

    for st in states:
        add("workspace" if st.get("rev") == "workspace" else (st.get("name") or str(st.get("rev", ""))[:7]), st)
        for rng in st.get("experiments") or []:
            for exp in rng.get("revs") or []:
                state = (rng.get("executor") or {}).get("state")
                label = exp.get("name") or rng.get("name") or str(exp.get("rev", ""))[:7]
                add(label + (f" ({state})" if state not in (None, "success") else ""), exp)
    if len(cols) > 1 and cols[0][0] == "workspace" and cols[0][1] == cols[1][1]:
        cols = cols[1:]  # the workspace is its baseline commit: one column for both
    if not cols:
        return "no experiment has results yet" + (f" ({', '.join(pending)})" if pending else "")

    def cell(m: dict | None) -> str:
        if not m:
            return "—"
        acc = f"{100 * m['accuracy']:.2f}%" if m.get("accuracy") is not None else "—"
        ci = (f" [{m['delta_lo']:.2f}, {m['delta_hi']:.2f}]" if m.get("delta_lo") is not None
              and m.get("delta_hi") is not None else "")
        return f"{acc} Δ {m['delta_pp']:.2f}{ci}" if m.get("delta_pp") is not None else acc

    keys = sorted({k for _, c in cols for k in c["params"]})
    rows = [(k, [str(c["params"].get(k, "—")) for _, c in cols]) for k in keys]
    rows = [r for r in rows if len(set(r[1])) > 1]
    configs = list(dict.fromkeys(k for _, c in cols for k in c["metrics"]))
    mrows = [(k, [cell(c["metrics"].get(k)) for _, c in cols]) for k in configs]
    if not all_rows and len(cols) > 1:
        mrows = [r for r in mrows if len(set(r[1])) > 1]
    head = ["", *(label for label, _ in cols)]
    table = [head, *([k, *v] for k, v in rows), *([k, *v] for k, v in mrows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    lines = ["  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() for r in table]
    # section lines between the rows, outside the column widths
    lines.insert(1 + len(rows), f"accuracy and Δ (pp, 95% interval)"
                 f"{'' if all_rows or len(cols) == 1 else ', where they differ'}:")
    if rows:
        lines.insert(1, "parameters that differ:")
    if not mrows:
        lines.append("(no configuration's accuracy or Δ differs between these columns)")
    if pending:
        lines.append(f"without results yet: {', '.join(pending)}")
    return "\n".join(lines)


def _cmd_exp(args: argparse.Namespace) -> int:
    if args.action == "show":
        import json
        import subprocess

        if args.set or args.queue or args.name:
            raise ConfigError("fairdp exp show: -S, --queue and -n belong to `fairdp exp run`")
        if args.extra:  # DVC's own table, with its options
            return subprocess.run([dvc_executable(), "exp", "show", "--drop", EXP_SHOW_DROP, *args.extra]).returncode
        out = subprocess.run([dvc_executable(), "exp", "show", "--json", "--drop", EXP_SHOW_DROP],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise ConfigError(f"dvc exp show failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
        print(exp_table(json.loads(out.stdout), all_rows=args.all))
        return 0
    return exp_run(args.set or [], queue=args.queue, name=args.name, params=args.params, dvc_args=args.extra)


# Seconds to start one train or attack stage (python, torch and the stage's imports), which the timings files leave
# out: 3 s of CPU measured on a 2-core machine, 7 s of wall time while it was busy.
STAGE_START_S = 4.0


def _cmd_dry(args: argparse.Namespace) -> int:
    from ..stages.plan import rerun_estimate

    params = load_params(args.params)
    est = rerun_estimate(params)
    if not est["planned"]:
        print(f"fairdp dry: no plans in {params.resolve('results/plan')} yet, so every run is new: `make repro` runs "
              "the whole profile (the default profile: under 30 minutes on 2 cores)")
        return 0
    rows = est["reruns"]
    if not rows:
        print(f"fairdp dry: this params.yaml changes none of the {est['total_runs']} runs' settings: `dvc repro` "
              "retrains nothing (a stage whose own params changed, such as a report's, still reruns)")
    else:
        known = [r for r in rows if r[2] is not None]
        total = sum(r[2] for r in known)
        unknown = len(rows) - len(known)
        starts = STAGE_START_S * sum(len(r[1]) for r in rows)
        print(f"fairdp dry: `dvc repro` will rerun {len(rows)} of {est['total_runs']} runs, about "
              f"{(total + starts) / 60:.1f} minutes: {total / 60:.1f} of compute by their last timings "
              f"(results/timings) and about {STAGE_START_S:.0f} s to start each stage"
              + (f", plus {unknown} runs without a timing" if unknown else "")
              + "; then the report pages and the index that read them")
        width = max(len(r[0]) for r in rows)
        for name, parts, secs, source in rows[: args.limit]:
            when = "no timing" if secs is None else f"{secs:7.1f} s" + (f" (as {source})" if source else "")
            print(f"  {name:<{width}}  {' + '.join(parts):<14} {when}")
        if len(rows) > args.limit:
            print(f"  ... and {len(rows) - args.limit} more (--limit)")
    if est["removed"]:
        print(f"  {len(est['removed'])} planned runs are no longer in params.yaml (their results stay until `dvc gc`)")
    return 0


def register(add) -> None:
    """Add the params commands (``add(audience, name, help=...)`` makes a subparser)."""
    c = add("params", "check-params", help="validate params.yaml and exit")
    c.set_defaults(func=_cmd_check)
    dr = add("params", "dry", help="after a params edit: the runs `dvc repro` will retrain or re-attack, with "
             "their time from the last timings (before any work)")
    dr.add_argument("--limit", type=int, default=40, help="list at most this many runs (default 40)")
    dr.set_defaults(func=_cmd_dry)
    g = add("params", "grid", help="show (or --write) the runs generated from grid and sweep")
    g.add_argument("--write", action="store_true", help="write runs.yaml (default: only print the runs)")
    g.set_defaults(func=_cmd_grid)
    u = add("params", "use-profile", help="make params.yaml one of the run profiles")
    u.add_argument("name", help="a profile of profiles/: " + (", ".join(profile_names(PROFILES_DIR))
                                                              or f"none found in {PROFILES_DIR}"))
    u.add_argument("--profiles", default="profiles", help="the profiles directory (default: profiles)")
    u.set_defaults(func=_cmd_profile)
    st = add("params", "set", help="set params.yaml keys (KEY=VALUE, as dvc's -S) and regenerate the runs")
    st.add_argument("set", nargs="+", metavar="KEY=VALUE", help="e.g. train.lr=0.05 or 'grid.0.seeds=3'")
    st.set_defaults(func=_cmd_set)
    ex = add("params", "exp", help="dvc exp run with -S that regenerates the runs (grid and sweep keys too); "
                        "show: one column per experiment, the changed parameters first, then accuracy and Δ with "
                        "its interval where they differ")
    ex.add_argument("action", choices=["run", "show"], help="run an experiment, or show them")
    ex.add_argument("-S", "--set-param", dest="set", action="append", metavar="KEY=VALUE",
                    help="set a params key for this experiment (grid and sweep keys too; repeatable)")
    ex.add_argument("--queue", action="store_true", help="queue it (run later with `dvc queue start -j N`)")
    ex.add_argument("-n", "--name", default=None, help="the experiment's name")
    ex.add_argument("--all", action="store_true", help="show: every configuration's accuracy and Δ, not only those "
                    "that differ (DVC's own wide table: pass any `dvc exp show` option, e.g. --csv)")
    ex.set_defaults(func=_cmd_exp)
