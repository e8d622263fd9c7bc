"""The tree's habits, machine-checked in the test run: formatting, lint, import
boundaries. A failure prints the tool's own report."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: `bash .ci/setup --tests` installs it")
    return found


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=300)


def test_ruff_format() -> None:
    res = _run(_tool("ruff"), "format", "--check", "--diff", ".")
    assert res.returncode == 0, res.stdout + res.stderr


def test_ruff_lint() -> None:
    res = _run(_tool("ruff"), "check", "--output-format", "concise", ".")
    assert res.returncode == 0, res.stdout + res.stderr


def test_import_contracts() -> None:
    res = _run(_tool("lint-imports"), "--no-cache")
    assert res.returncode == 0, res.stdout + res.stderr
