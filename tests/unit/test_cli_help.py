"""Every `--help` ends with one example of what people type (argparse epilogs)."""

from __future__ import annotations

import argparse
import subprocess
import sys

from mntui.tui.cli.args import build_parser


def verbs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def ends_with_example(text: str, verb: str | None) -> bool:
    lines = text.rstrip().splitlines()
    start = "  mntui" if verb is None else f"  mntui {verb}"
    return lines[-2] == "example:" and (
        lines[-1].startswith(start) or (verb == "completion" and "mntui completion" in lines[-1])
    )


def test_every_verb_help_ends_with_an_example() -> None:
    parser = build_parser()
    found = verbs(parser)
    assert {"init", "completion", "launch", "kill", "status"} <= set(found)
    missing = [v for v, p in found.items() if not ends_with_example(p.format_help(), v)]
    assert not missing, f"verbs whose --help ends without an example: {missing}"
    assert ends_with_example(parser.format_help(), None)


def test_the_help_as_printed() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", "init", "--help"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert res.returncode == 0
    assert "[-- COMMAND ...]" in res.stdout.splitlines()[0] + res.stdout.splitlines()[1]
    assert res.stdout.rstrip().splitlines()[-1].startswith("  mntui init g369 g375 -- torchrun")


def test_the_version_is_said_and_exits_0() -> None:
    """`mntui --version` was refused as an unknown argument (exit 2)."""
    from importlib.metadata import version

    res = subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", "--version"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"mntui {version('mntui')}"
