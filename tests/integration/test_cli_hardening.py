"""The command line against real fake-sshd nodes: `-c` after the verb, numeric flags
refused before any node is touched, whole progress lines from parallel node threads."""

from __future__ import annotations

import re
import subprocess
import sys

from fakecluster import FakeCluster, tagged
from helpers import Cfg, free_port, listener_job

NODES = "[node0, node1, node2]"


def mntui(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_config_after_the_verb_launches_and_kills(fake: FakeCluster, cfg: Cfg) -> None:
    """As a new user types it: `mntui launch --no-ui -c job.yaml`."""
    path = cfg.write(listener_job("tafter", free_port(), nodes=NODES))
    res = mntui("launch", "--no-ui", "--no-watch", "-c", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert len(tagged("tafter")) >= 3
    res = mntui("status", "--config", str(path))
    assert res.returncode == 0 and "tafter" in res.stdout, res.stdout + res.stderr
    res = mntui("kill", "-c", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert not tagged("tafter")


def test_bad_grace_touches_no_node(fake: FakeCluster, cfg: Cfg) -> None:
    path = cfg.write(listener_job("tgrace", free_port(), nodes=NODES))
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    before = sorted(tagged("tgrace"))
    for value in ("nan", "-100", "inf", "1e999"):
        res = cfg.mntui(path, "kill", "--grace", value)
        assert res.returncode == 2, (value, res.stdout, res.stderr)
        assert res.stdout == "" and res.stderr.count("\n") == 1, res.stderr
        assert "--grace" in res.stderr and "Traceback" not in res.stderr
    assert sorted(tagged("tgrace")) == before  # nothing was sent anywhere
    res = cfg.mntui(path, "kill", "--grace", "0.5")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not tagged("tgrace")


EVENT = re.compile(r"\+\s*\d+\.\d\ds (node\d\[\d\]|job)\s+[a-z]+( .*)?\Z")


def test_kill_progress_lines_are_whole(fake: FakeCluster, cfg: Cfg) -> None:
    path = cfg.write(listener_job("tlines", free_port(), nodes=NODES))
    for _ in range(3):
        assert cfg.mntui(path, "launch", "--no-ui", "--restart").returncode == 0
        res = cfg.mntui(path, "kill")
        assert res.returncode == 0, res.stdout + res.stderr
        *events, summary = res.stdout.splitlines()
        assert all(EVENT.match(line) for line in events), res.stdout
        phases = sorted(tuple(line.split()[2:4]) for line in events)
        assert phases == sorted(
            (f"node{i}[{i}]", p) for i in range(3) for p in ("killing", "killed")
        ), res.stdout
        assert re.fullmatch(
            r"clean: \d+ process\(es\) of tlines stopped on 3 node\(s\) \(.*\)", summary
        )
