"""The README stays short and starts from the user's task; its links and the docs pages' links resolve.

- README.md has at most 150 lines and gives the two commands a newcomer needs, `make repro` and `make test`, in a
  fenced code block.
- Every relative markdown link in README.md and docs/*.md, and every backticked docs/...md path, names a file or
  directory of the repository (http(s) and mailto links and anchor-only links are ignored; #anchors are stripped).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import ROOT

README = ROOT / "README.md"
MAX_README_LINES = 150

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target), target up to the first space or ')' (an optional "title" after it)
INLINE_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'(][^)]*)?\)")
# [label]: target
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
DOCS_PATH = re.compile(r"`(docs/[^`\s#]+\.md)(?:#[^`\s]*)?`")


def markdown_files() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def relative_links(text: str) -> list[str]:
    """The relative link targets of a markdown text, without their #anchors (links inside code are not links)."""
    prose = INLINE_CODE.sub("", FENCE.sub("", text))
    targets = INLINE_LINK.findall(prose) + REFERENCE_LINK.findall(prose)
    out = []
    for t in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I) or t.startswith("//"):  # http:, https:, mailto:, ...
            continue
        path = t.split("#", 1)[0].split("?", 1)[0]
        if path:  # "#anchor" alone points into the same page
            out.append(path)
    return out


def broken_links(md: Path, root: Path = ROOT) -> list[str]:
    """Links of ``md`` (relative to its folder) and backticked docs/...md paths (relative to the repository root)
    that name nothing in the repository."""
    text = md.read_text(encoding="utf-8")
    bad = []
    for target in relative_links(text):
        base = root if target.startswith("/") else md.parent
        resolved = (base / target.lstrip("/")).resolve()
        if not resolved.exists() or not resolved.is_relative_to(root.resolve()):
            bad.append(f"{md.relative_to(root)}: link ({target})")
    for path in DOCS_PATH.findall(FENCE.sub("", text)):
        if not (root / path).is_file():
            bad.append(f"{md.relative_to(root)}: `{path}`")
    return bad


def test_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines; at most {MAX_README_LINES} (move detail to docs/)"


def test_readme_gives_the_two_commands():
    text = README.read_text(encoding="utf-8")
    code = "\n".join(m.group(0) for m in FENCE.finditer(text))
    for command in ("make repro", "make test"):
        assert re.search(rf"^\s*{re.escape(command)}(\s|$)", code, re.M), \
            f"README.md: no fenced code block gives the command `{command}`"


@pytest.mark.parametrize("md", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(md):
    bad = broken_links(md)
    assert not bad, "links to nothing in the repository:\n" + "\n".join(bad)


def test_the_link_checker_sees_links(tmp_path):
    """The checker is not vacuous: it finds the README's links, ignores web links, anchors and code, and reports a
    missing target."""
    assert "docs/claims.md" in relative_links(README.read_text(encoding="utf-8"))
    sample = ("[a](docs/claims.md#verdicts) [b](https://example.org/x.md) [c](#top) `docs/nowhere.md`\n"
              "```\n[d](in/code.md)\n```\n[e](no/such/file.md)\n")
    assert relative_links(sample) == ["docs/claims.md", "no/such/file.md"]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "claims.md").write_text("# claims\n")
    md = tmp_path / "docs" / "page.md"
    md.write_text("[ok](claims.md) [up](../docs/) [gone](missing-page.md#x) [out](../../elsewhere.md)\n"
                  "`docs/missing.md` `docs/claims.md#verdicts`\n")
    assert broken_links(md, root=tmp_path) == ["docs/page.md: link (missing-page.md)",
                                               "docs/page.md: link (../../elsewhere.md)",
                                               "docs/page.md: `docs/missing.md`"]


def test_venv_dvc_runs_stage_commands_with_the_venvs_python(tmp_path):
    """`.venv/bin/dvc repro` from a shell whose PATH lacks the venv (docs/pipeline.md prints such commands): the
    stage command's `python` is the venv's (the .pth `make install` puts in its site-packages), so a stage that
    imports pandas runs."""
    import subprocess
    import sys

    venv_bin = Path(sys.executable).parent
    assert (venv_bin / "dvc").is_file(), "no dvc beside this Python: run the tests with `make test`"
    pth = list(Path(sys.prefix).glob("lib/python*/site-packages/fairdp-venv-path.pth"))
    assert pth, "fairdp-venv-path.pth is not installed in this venv: `make install` (or `make test`) puts it there"
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  s:\n    cmd: python -c \"import pandas, sys, pathlib; pathlib.Path('out.txt').write_text(sys.prefix)\"\n"
        "    outs:\n      - out.txt\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DVC_NO_ANALYTICS": "1"}
    subprocess.run([str(venv_bin / "dvc"), "init", "--no-scm", "-q"], cwd=tmp_path, env=env, check=True)
    r = subprocess.run([str(venv_bin / "dvc"), "repro", "-q"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert Path((tmp_path / "out.txt").read_text()).resolve() == Path(sys.prefix).resolve()


# ------------------------------------------------------------------------------------ the commands the docs print

SHELL_FENCE = re.compile(r"^(```|~~~)([^\n]*)\n(.*?)^\1[^\n]*$", re.M | re.S)
FAIRDP = ("fairdp", ".venv/bin/fairdp")
PYTHON = ("python", ".venv/bin/python")


def printed_commands() -> list[tuple[str, list[str]]]:
    """(file, argv) of every command line in the fenced shell blocks of README.md and docs/*.md: continuation
    lines joined, comments, leading environment assignments and `cd DIR &&` dropped; lines that are program
    output (their first word no command) left out."""
    import shlex

    out = []
    for md in markdown_files():
        for m in SHELL_FENCE.finditer(md.read_text(encoding="utf-8")):
            if m.group(2).strip() not in ("", "bash", "sh", "shell", "console"):
                continue
            for line in re.sub(r"\\\n\s*", " ", m.group(3)).splitlines():
                line = line.strip().removeprefix("$ ")
                for part in re.split(r"\s*&&\s*", line):
                    try:
                        argv = shlex.split(part, comments=True)
                    except ValueError:
                        continue
                    while argv and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[0]):
                        argv = argv[1:]
                    if argv and (argv[0] in (*FAIRDP, *PYTHON, "make", "dvc", ".venv/bin/dvc", "bash")):
                        out.append((md.name, argv))
    return out


class _Parsed(Exception):
    pass


def _parses(argv: list[str]) -> str | None:
    """None if ``argv`` (a fairdp command line without the program) parses, with every nested parser (claims,
    tune); else what argparse said. Nothing runs."""
    import argparse
    import contextlib
    import io
    from unittest import mock

    from fairdp_core.cli import build_parser

    err = io.StringIO()
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        original(self, args, namespace)
        raise _Parsed

    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args, extra = build_parser().parse_known_args(argv)
            if args.command in ("claims", "tune") and extra:
                with mock.patch.object(argparse.ArgumentParser, "parse_args", parse_then_stop):
                    args.extra = extra
                    args.func(args)
            elif extra and args.command != "exp":  # exp passes the rest to dvc
                return f"unrecognized arguments: {' '.join(extra)}"
    except _Parsed:
        return None
    except SystemExit as e:
        return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {e.code}"
    return None


def test_every_printed_command_works_as_printed():
    """Every command line in README.md and docs/*.md: a fairdp command (also `python -m fairdp_core.cli`) parses
    with its subcommand's own options; `python -m MODULE` names a module; `python FILE ...` names a file and its
    options parse; `make TARGET` names a target of the Makefile; `dvc SUB` is a DVC command whose help lists every
    option used (run from an environment whose PATH holds no venv); `bash FILE` names a file."""
    import importlib.util
    import os
    import runpy
    import subprocess
    import sys
    from unittest import mock

    cmds = printed_commands()
    assert len(cmds) > 30, len(cmds)
    targets = set(re.findall(r"^([A-Za-z][\w-]*)\s*:", (ROOT / "Makefile").read_text(), re.M))
    dvc_help: dict[str, str] = {}
    clean_env = {**os.environ, "PATH": "/usr/bin:/bin"}
    bad = []
    for md, argv in cmds:
        head, rest = argv[0], argv[1:]
        problem = None
        if head in FAIRDP or (head in PYTHON and rest[:2] == ["-m", "fairdp_core.cli"]):
            problem = _parses(rest[2:] if head in PYTHON else rest)
        elif head in PYTHON and rest[:1] == ["-m"]:
            problem = None if importlib.util.find_spec(rest[1]) else f"no module {rest[1]}"
        elif head in PYTHON and rest:
            script = ROOT / rest[0]
            if not script.is_file():
                problem = f"no file {rest[0]}"
            elif "argparse" in script.read_text():  # a script without options is only checked to exist
                import argparse

                original = argparse.ArgumentParser.parse_args

                def parse_then_stop(self, args=None, namespace=None):
                    original(self, args, namespace)
                    raise _Parsed

                try:
                    with mock.patch.object(argparse.ArgumentParser, "parse_args", parse_then_stop), \
                            mock.patch.object(sys, "argv", [str(script), *rest[1:]]):
                        runpy.run_path(str(script), run_name="__main__")
                except _Parsed:
                    pass
                except SystemExit as e:
                    problem = None if e.code in (0, None) else f"{rest[0]}: exit {e.code}"
        elif head == "make":
            problem = next((f"no make target {t}" for t in rest if not t.startswith("-") and "=" not in t
                            and t not in targets), None)
        elif head in ("dvc", ".venv/bin/dvc"):
            sub = next((w for w in rest if not w.startswith("-")), "")
            words = [w for w in rest if not w.startswith("-")]
            key = " ".join(words[:2]) if sub in ("exp", "queue", "remote", "config", "cache") else sub
            if key not in dvc_help:
                r = subprocess.run([str(ROOT / ".venv/bin/dvc"), *key.split(), "--help"], capture_output=True,
                                   text=True, env=clean_env, cwd=ROOT)
                dvc_help[key] = r.stdout if r.returncode == 0 else ""
            if not dvc_help[key]:
                problem = f"dvc {key}: no such command"
            else:
                problem = next((f"dvc {key}: no option {o}" for o in rest if o.startswith("-")
                                and o.split("=")[0] not in dvc_help[key]), None)
        elif head == "bash":
            problem = None if (ROOT / rest[0]).is_file() else f"no file {rest[0]}"
        if problem:
            bad.append(f"{md}: {' '.join(argv)[:100]}: {problem}")
    assert not bad, "\n".join(bad)
