"""A cold `mntui status` of a run the cluster watches (tui/cli/quickstatus.py): what it
may import, and the memo of the config it reads instead of loading the config.

The status itself over a real ssh to a real coordinator is
tests/integration/test_cold_status.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mntui.sessions.config import load_config
from mntui.sessions.errors import state_dir
from mntui.tui.cli import quickstatus
from mntui.tui.cli.quickstatus import KEEP, MEMO, recall, remember

# What a cold status must not load: the config's loader and its YAML, the node lists'
# parser, the SSH library, the UI (issue 30: a cold status within 1.5x of one `ssh`).
HEAVY = (
    "yaml",
    "ClusterShell",
    "paramiko",
    "fabric",
    "invoke",
    "textual",
    "rich",
    "mntui.sessions.config.jobconfig",
    "mntui.sessions.ssh.cluster",
    "mntui.sessions.launch.clusterwatch",
    "mntui.sessions.agent",
    "mntui.tui.cli.views",
)

# Nor the grammar: it answers before argparse is loaded (quickstatus.answer).
GRAMMAR = ("argparse", "mntui.tui.cli.entry", "mntui.tui.cli.args")

# The modules the quick path imports, in its order (the CLI package -> quickstatus.answer).
QUICK_PATH = (
    "mntui.tui.cli.prestart",
    "mntui.tui.cli.quickstatus",
    "mntui.tui.cli.configpath",
    "mntui.tui.cli.guard",
    "mntui.sessions.runs",
    "mntui.sessions.launch.board",
    "mntui.tui.cli.clusterstatus",
)


def test_the_quick_path_loads_no_config_loader_ssh_library_or_ui() -> None:
    code = (
        "import importlib, sys\n"
        f"for m in {QUICK_PATH!r}: importlib.import_module(m)\n"
        f"bad = sorted(k for k in sys.modules if k.startswith({HEAVY + GRAMMAR!r}))\n"
        "print(' '.join(bad))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [], f"a cold status loads {res.stdout.split()[:8]}"


def job_file(tmp_path: Path, job: str = "qs", extra: str = "") -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        f"job: {job}\nnodes: [g1, g2]\ncommand: python3 train.py\n"
        f"ssh: {{config: ssh_config, connect_timeout: 7, host_key: strict}}\n{extra}"
    )
    return path


def test_a_loaded_config_is_remembered_with_what_status_needs(tmp_path: Path) -> None:
    path = job_file(tmp_path, extra="restart: {max: 2}\n")
    remember(path, load_config(path))
    memo = recall(path)
    assert memo is not None and memo.job == "qs" and memo.restarts == 2
    ssh = memo.ssh
    assert ssh[:3] == ("ssh", "-F", str(tmp_path / "ssh_config"))  # relative to the file
    for opt in ("BatchMode=yes", "ConnectTimeout=7", "StrictHostKeyChecking=yes"):
        assert opt in ssh, ssh  # never asks anyone; the config's host_key wins
    assert "localhost" in memo.local and memo.timeout == pytest.approx(7 + 10)
    assert (state_dir() / MEMO).stat().st_mode & 0o777 == 0o600


def test_an_edited_config_is_a_miss(tmp_path: Path) -> None:
    path = job_file(tmp_path)
    remember(path, load_config(path))
    assert recall(path) is not None
    path.write_text(path.read_text().replace("job: qs", "job: other"))
    assert recall(path) is None  # the ordinary path loads it and remembers it again
    remember(path, load_config(path))
    memo = recall(path)
    assert memo is not None and memo.job == "other"


def test_a_config_that_asks_for_a_password_has_no_quick_status(tmp_path: Path) -> None:
    path = job_file(tmp_path, extra="")
    path.write_text(path.read_text().replace("host_key: strict", "password: prompt"))
    remember(path, load_config(path))
    assert recall(path) is None  # BatchMode could never log in: the ordinary path asks


def test_a_memo_that_is_not_ours_is_a_miss(tmp_path: Path) -> None:
    path = job_file(tmp_path)
    remember(path, load_config(path))
    memo_file = state_dir() / MEMO
    entry = json.loads(memo_file.read_text())[os.path.abspath(path)]
    for bad in (
        {"job": "../../etc"},
        {"job": ".hidden"},
        {"ssh": []},
        {"ssh": ["ssh", 3]},
        {"restarts": "2"},
        {"timeout": -1},
        {"format": 0},
        {"identity": [1, 2, 3]},
    ):
        memo_file.write_text(json.dumps({os.path.abspath(path): {**entry, **bad}}))
        assert recall(path) is None, bad
    for text in ("", "[]", "{", '{"x": 1}', "9" * 5000):
        memo_file.write_text(text)
        assert recall(path) is None, text[:10]


def test_the_memo_keeps_the_latest_configs_only(tmp_path: Path) -> None:
    paths = []
    for i in range(KEEP + 3):
        d = tmp_path / f"c{i}"
        d.mkdir()
        paths.append(job_file(d, job=f"j{i}"))
        remember(paths[-1], load_config(paths[-1]))
    data = json.loads((state_dir() / MEMO).read_text())
    assert len(data) == KEEP
    assert recall(paths[0]) is None and recall(paths[-1]) is not None


def test_no_memo_no_quick_status(tmp_path: Path) -> None:
    """Without a memo (a config never loaded, or edited since) the ordinary path answers:
    here, that no run is recorded (exit 3)."""
    path = job_file(tmp_path)
    assert quickstatus.quick_status(str(path), True, print) is None
    res = subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "status", "--json"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert res.returncode == 3, res.stdout + res.stderr
    assert recall(path) is not None  # the ordinary path remembered it
