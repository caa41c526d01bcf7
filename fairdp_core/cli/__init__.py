"""The ``fairdp`` command line: the study's stages (what dvc.yaml runs), the params helpers, the claims campaign and
the studies beside the pipeline, the audit of your own data, and maintenance. Every command is listed below;
``fairdp COMMAND --help`` for its options.

One module per audience (:data:`AUDIENCES`): each defines its commands and registers them."""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap

from ..config import ConfigError
from ..study.params_files import PROFILES_DIR, profile_names, set_params, use_profile, write_generated
from . import campaign, custom, maintenance, params, study
from .params import EXP_SHOW_DROP, exp_run

__all__ = ["AUDIENCES", "EXP_SHOW_DROP", "PROFILES_DIR", "build_parser", "exp_run", "main", "profile_names",
           "set_params", "use_profile", "write_generated"]


# The audiences of the commands, in the order `fairdp --help` lists them (each command names its own in
# build_parser; one added without an audience is listed under "other commands").
AUDIENCES = {
    "study": "the study's stages (dvc.yaml runs them; `fairdp audit` chains plan, train and attack without DVC)",
    "params": "params.yaml helpers",
    "campaign": "the claims campaign, and the studies beside the pipeline",
    "custom": "the audit of your own data and model",
    "maintenance": "maintenance",
}


def _command_listing(sub: argparse._SubParsersAction) -> str:
    """Every subcommand of ``sub`` with its help, grouped by its ``audience`` default (:data:`AUDIENCES`' order)."""
    width = max(min(shutil.get_terminal_size().columns, 120) - 2, 60)
    groups: dict[str | None, list[tuple[str, str]]] = {}
    for name, sp in sub.choices.items():
        groups.setdefault(sp.get_default("audience"), []).append((name, sp.description or ""))
    col = max(len(name) for name in sub.choices) + 4
    blocks = []
    for key in [*AUDIENCES, *(k for k in groups if k not in AUDIENCES)]:
        if key not in groups:
            continue
        lines = [f"{AUDIENCES.get(key, 'other commands')}:"]
        for name, text in groups[key]:
            lines += textwrap.wrap(text, width, initial_indent=f"  {name:<{col - 2}}", subsequent_indent=" " * col,
                                   break_on_hyphens=False) or [f"  {name}"]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def build_parser() -> argparse.ArgumentParser:
    """The ``fairdp`` parser; its description lists every subcommand, grouped by audience."""
    parser = argparse.ArgumentParser(prog="fairdp", usage="%(prog)s [-h] [--params PARAMS] COMMAND ...",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    # the commands are listed in the description, by audience, rather than by argparse in one flat list
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help=argparse.SUPPRESS,
                                prog="fairdp")

    def add(audience: str, name: str, *, help: str, **kw) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help, **kw)
        sp.set_defaults(audience=audience)
        return sp

    for module in (study, params, campaign, custom, maintenance):  # AUDIENCES' order
        module.register(add)
    parser.description = f"{__doc__.split(chr(10) * 2)[0]}\n\n{_command_listing(sub)}"
    return parser


# What `pip install fairdp_core` leaves out and the `train` extra brings: the audit of given scores or losses
# (audit-one --scores, custom.audit_bank) runs without them; training and --model-file need them.
TRAIN_EXTRA = ("torch", "opacus", "torchvision")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command not in ("tune", "claims", "exp"):  # only these pass their own options on
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    if argv is None and args.command in ("audit", "train", "tune", "clip-study", "claims"):
        from ..stages import reexec_with_malloc_env

        reexec_with_malloc_env("fairdp_core.cli", sys.argv[1:])
    try:
        return args.func(args)
    except KeyboardInterrupt:  # Ctrl-C: one line; outputs are written to a temporary and renamed, never partial
        print(f"fairdp {args.command}: interrupted; no partial output is left (rerun the same command)",
              file=sys.stderr)
        return 130
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in TRAIN_EXTRA:
            raise
        print(f"fairdp {args.command}: error: this command needs {e.name}, which the light install leaves out: "
              f"pip install 'fairdp_core[train]' (docs/library.md: the CPU build of torch)", file=sys.stderr)
        return 2
    except Exception as e:  # configuration and data errors: one line naming the problem; anything else raises
        from ..data.sources import DataSourceError
        from ..study.claims import CampaignError

        if not isinstance(e, (ConfigError, KeyError, ValueError, FileNotFoundError, DataSourceError, CampaignError)):
            raise
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        print(f"fairdp {args.command}: error: {msg}", file=sys.stderr)
        return 2
