"""A cold `mntui status` of a run the cluster watches (tui/cli/quickstatus.py): one
`ssh` to the main, neither the config's loader nor the SSH library, and the same status
as the ordinary path gives.

Real parts: sshd fake nodes, tmux, the sentinels and the coordinator shipped and run
on the nodes' bare `python3`, a light 2-node job (plain python3 steps).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fakecluster import FakeCluster, free_port, wait_for
from helpers import Cfg, step_count, steps_job, tagged_anywhere

from mntui.sessions.errors import state_dir
from mntui.tui.cli.quickstatus import MEMO

pytestmark = pytest.mark.integration

HEAVY = ("yaml", "ClusterShell", "paramiko", "fabric", "textual", "rich")
SAME = ("job", "run_id", "status", "attempt", "chain", "cause", "exit_code", "via")


# The CLI as `python -m mntui.tui.cli` runs it, writing sys.modules at exit: -X importtime
# misses what importlib.import_module loads (a wing's lazy exports, sessions/exports.py).
RUN = """import atexit, json, os, runpy, sys
atexit.register(lambda: open(os.environ["QS_MODULES"], "w").write(json.dumps(sorted(sys.modules))))
runpy.run_module("mntui.tui.cli", run_name="__main__", alter_sys=True)
"""


def status(path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """`mntui status` in a fresh process, and every module it had loaded at its end."""
    modules = path.parent / "modules.json"
    modules.unlink(missing_ok=True)
    res = subprocess.run(
        [sys.executable, "-c", RUN, "-c", str(path), "status", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "QS_MODULES": str(modules)},
    )
    return res, set(json.loads(modules.read_text()))


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def rows(text: str) -> list[list[str]]:
    """The table's node rows, up to OUTPUT (their ages and steps move)."""
    return [line.split()[:4] for line in text.splitlines() if re.match(r"node\d ", line)]


def test_a_cold_status_reads_the_board_over_one_ssh_without_loading_the_config(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "qs-cold"
    port, wport = free_port(), free_port()
    path = cfg.write(steps_job(job, port, extra=f"watch: {{where: cluster, port: {wport}}}"))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "watched by the cluster" in res.stdout, res.stdout
    try:
        wait_for(
            lambda: all(step_count(fake.node(n).log(job)) >= 2 for n in ("node0", "node1")),
            60,
            what="both nodes stepping",
        )
        # the launch loaded the config and remembered it: the cold status reads the memo
        res, loaded = status(path, "--json")
        assert res.returncode == 0, res.stdout + res.stderr
        assert not heavy(loaded), f"a cold status loaded {heavy(loaded)}"
        assert "mntui.sessions.config.jobconfig" not in loaded
        quick = json.loads(res.stdout)
        text, _ = status(path)
        assert text.returncode == 0, text.stdout + text.stderr

        (state_dir() / MEMO).unlink()  # no memo: the ordinary path (config, Cluster)
        res, loaded = status(path, "--json")
        assert res.returncode == 0, res.stdout + res.stderr
        assert (
            "mntui.sessions.config.jobconfig" in loaded and "mntui.sessions.ssh.cluster" in loaded
        )
        ordinary = json.loads(res.stdout)
        assert {k: quick[k] for k in SAME} == {k: ordinary[k] for k in SAME}
        assert quick["via"] == "coordinator" and quick["watch"] == "cluster"
        assert quick.keys() == ordinary.keys()
        assert quick["watchdog"] == ordinary["watchdog"], (quick, ordinary)
        for a, b in zip(quick["nodes"], ordinary["nodes"], strict=True):
            assert a.keys() == b.keys()  # procs: the sentinel's (their CPU moves); the count
            assert (a["node"], a["state"], a["live_procs"], a["connected"]) == (
                b["node"],
                b["state"],
                b["live_procs"],
                b["connected"],
            )
        assert [n["state"] for n in quick["nodes"]] == ["running", "running"]
        assert (state_dir() / MEMO).exists()  # the ordinary path remembered it again
        (state_dir() / MEMO).unlink()
        plain, loaded = status(path)  # the table, the ordinary way
        assert plain.returncode == 0, plain.stdout + plain.stderr
        assert "mntui.sessions.ssh.cluster" in loaded
        assert rows(text.stdout) == rows(plain.stdout) != []
        assert text.stdout.splitlines()[0] == plain.stdout.splitlines()[0]  # job, run, status
    finally:
        res = cfg.mntui(path, "kill")
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: not tagged_anywhere(job), 30, what="every process of the job gone")
