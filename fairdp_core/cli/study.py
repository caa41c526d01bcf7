"""The study's stages, as dvc.yaml runs them (and `fairdp audit`, which chains plan, train and attack without DVC)."""

from __future__ import annotations

import argparse

from ..config import load_params


def _cmd_prepare(args: argparse.Namespace) -> int:
    from ..stages import prepare

    return prepare.main(["--params", args.params, *args.names, *(["--all"] if args.all else [])])


def _cmd_design(args: argparse.Namespace) -> int:
    from ..stages import design

    return design.main(["--params", args.params, args.key, *(["--out", args.out] if args.out else [])])


def _cmd_plan(args: argparse.Namespace) -> int:
    from ..stages import plan

    return plan.main(["--params", args.params])


def _cmd_train(args: argparse.Namespace) -> int:
    from ..stages import train

    return train.main(["--params", args.params, args.name, *(["--quiet"] if args.quiet else [])])


def _cmd_attack(args: argparse.Namespace) -> int:
    from ..stages import attack

    return attack.main(["--params", args.params, args.name])


def _cmd_audit(args: argparse.Namespace) -> int:
    """plan, then train, then attack one run (what the train@ and attack@ stages do, for use outside DVC)."""
    from ..stages import attack, plan, train

    rc = plan.main(["--params", args.params])
    if rc == 0:
        rc = train.main(["--params", args.params, args.name, *(["--quiet"] if args.quiet else [])])
    return rc or attack.main(["--params", args.params, args.name])


def _cmd_report(args: argparse.Namespace) -> int:
    from ..reporting.pages import run_notebook

    params = load_params(args.params)
    run_notebook(params, args.notebook)
    return 0


def _cmd_index(args: argparse.Namespace) -> int:
    from ..stages.index import write_index

    print(write_index(load_params(args.params)))
    return 0


def register(add) -> None:
    """Add the study commands (``add(audience, name, help=...)`` makes a subparser)."""
    p = add("study", "prepare", help="verify raw files and write data/prepared/<name>")
    p.add_argument("names", nargs="*", help="datasets to prepare")
    p.add_argument("--all", action="store_true", help="every dataset configured in params.yaml")
    p.set_defaults(func=_cmd_prepare)
    d = add("study", "design", help="draw the audit design (membership matrix) for designs[KEY]")
    d.add_argument("key", help="a key of runs.yaml's designs, e.g. adult-s0")
    d.add_argument("--out", help="default: results/designs/<KEY>.npz")
    d.set_defaults(func=_cmd_design)
    pl = add("study", "plan", help="write every run's effective settings to results/plan/")
    pl.set_defaults(func=_cmd_plan)
    t = add("study", "train", help="train runs[NAME]'s bank (results/train/NAME)")
    t.add_argument("name", help="a run of runs.yaml")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=_cmd_train)
    at = add("study", "attack", help="attack runs[NAME]'s trained bank (results/audit/NAME)")
    at.add_argument("name", help="a run of runs.yaml")
    at.set_defaults(func=_cmd_attack)
    a = add("study", "audit", help="plan, train and attack runs[NAME]")
    a.add_argument("name", help="a run of runs.yaml")
    a.add_argument("--quiet", action="store_true", help="no progress bar")
    a.set_defaults(func=_cmd_audit)
    r = add("study", "report", help="execute and render one report notebook")
    r.add_argument("notebook", help="a report of notebooks/ (without .py)")
    r.set_defaults(func=_cmd_report)
    i = add("study", "index", help="write reports/index.html and reports/metrics.json")
    i.set_defaults(func=_cmd_index)
