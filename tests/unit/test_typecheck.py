"""mypy --strict over both packages, under their installed names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_mypy_strict(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    tree = tmp_path / "mntui"
    tree.mkdir()
    for pkg in ("sessions", "tui"):
        (tree / pkg).symlink_to(REPO / pkg)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(REPO / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "-p",
            "mntui.sessions",
            "-p",
            "mntui.tui",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(tmp_path)},
    )
    assert res.returncode == 0, res.stdout + res.stderr
