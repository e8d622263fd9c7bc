"""Losing the main node of a run the cluster watches (issue 30): the coordinator runs on
the main, so the cluster cannot go on without it; this machine, attached by `mntui
watch` (the process the app hands a run over to, started here as the app starts it), sees the main silent and the
workers' sentinels say they lost it, stops what is left of the attempt on the nodes it
reaches, and starts the next attempt with the spare as the main, watched by the
cluster again."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

from clusterwatch import SPARE_JOB, runs_on, watchers
from fakecluster import FakeCluster, alive, free_port, process_tree, wait_for
from helpers import Cfg

from mntui.sessions.config import load_config
from mntui.sessions.launch.tmux import session_name
from mntui.sessions.runs import latest
from mntui.sessions.watch import start_detached

REACHED = ("node1", "node2")


def _lose_main(fake: FakeCluster) -> list[int]:
    """node0 as a dead host: its sshd stopped (no answer), everything it ran killed."""
    node = fake.node("node0")
    assert node.proc is not None
    held = process_tree(node.proc.pid)
    for pid in held:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    node.kill_all(keep=held)  # all at once: no watcher starts its partner again
    return held


def _release(stand: int, held: list[int]) -> None:
    """A test's end: its stand-by (by PID) gone, the sshd it stopped going again."""
    if alive([stand]):
        os.kill(stand, signal.SIGKILL)
    for pid in held:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def _said(log: Path, text: str) -> bool:
    return text in log.read_text(errors="replace") if log.exists() else False


def test_a_lost_main_is_replaced_by_the_spare_from_the_attached_machine(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """2 nodes + 1 spare, `restart: {max: 2}`, this machine attached as the app attaches
    it (start_detached: `mntui watch` in a tmux session here): node0 (the main)
    dies as a host does; node1's sentinel tears its rank down and says so; this machine
    starts attempt 1 on node2 (the new main, with a coordinator of its own) + node1, the
    records say so, and `mntui kill` leaves nothing on the nodes it reaches."""
    job = "cw-mainswap"
    port, wport = free_port(), free_port()
    path = cfg.write(SPARE_JOB.format(job=job, port=port, wport=wport))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "spare node2: its sentinel is up" in res.stdout, res.stdout
    wait_for(lambda: runs_on(job, "node0") and runs_on(job, "node1"), 30, what="both ranks")
    first = next(iter(runs_on(job, "node0")))
    record = latest(job)
    assert record is not None and record.run_id == first
    stand = start_detached(load_config(path), record)  # as the app hands a run over
    log = record.dir / "watch.log"
    held: list[int] = []
    try:
        held = _lose_main(fake)
        t0 = time.monotonic()
        wait_for(lambda: runs_on(job, "node2"), 45, what="attempt 1 on node2, the new main")
        took = time.monotonic() - t0
        new = next(iter(runs_on(job, "node2")))
        wait_for(lambda: new in runs_on(job, "node1"), 20, what="attempt 1 on node1 too")
        assert new != first and first not in runs_on(job, "node1"), runs_on(job, "node1")
        wait_for(lambda: watchers(job, "coord", "node2"), 10, what="node2's coordinator")
        wait_for(lambda: _said(log, f"run {new}"), 20, what="attempt 1 launched")
        text = log.read_text(errors="replace")
        assert "standing by" in text, text
        assert "node0 cannot be reached" in text, text
        assert "node0 is lost: replaced by spare node2 (rank 0)" in text, text
        data = json.loads(cfg.mntui(path, "status", "--json").stdout)
        assert data["run_id"] == new and data["attempt"] == 1 and data["chain"] == first, data
        assert [(n["node"], n["rank"]) for n in data["nodes"]] == [("node2", 0), ("node1", 1)]
        status = cfg.mntui(path, "status").stdout
        assert "coordinator on node2" in status, status
        res = cfg.mntui(path, "kill")
        assert res.returncode in (0, 1), res.stdout + res.stderr  # 1: node0 cannot be reached
        assert "Traceback" not in res.stderr, res.stderr  # the lost main is one line
        wait_for(lambda: not any(runs_on(job, n) for n in REACHED), 20, what="nothing on node1/2")
        wait_for(
            lambda: not watchers(job, "(sentinel|coord)", "node[12]"), 20, what="watchers gone"
        )
        left = [s for n in REACHED if (s := session_name(job, n)) in fake.node(n).sessions()]
        assert not left, f"tmux sessions of the job left: {left}"
        wait_for(lambda: not alive([stand.pid]), 20, what="the stand-by's end")
        print(f"main lost -> attempt 1 running on node2 in {took:.1f} s")
    finally:
        _release(stand.pid, held)
