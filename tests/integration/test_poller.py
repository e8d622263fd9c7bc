"""The poller on real sshd nodes (an unwatched run's `status`, the app's own polls, a
live report): what a poll sees between its full scans, and a hung node that holds back
no other node."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from fakecluster import FakeCluster, alive, pids_with_env, process_tree, wait_for
from helpers import Cfg, free_port, listener_job

from mntui.sessions.config import load_config
from mntui.sessions.poll import NodeState, Poller, derive
from mntui.sessions.runs import latest
from mntui.sessions.ssh import Cluster


def tagged(job: str, node: str = "[^/]+") -> list[int]:
    return alive(pids_with_env(f"MNTUI_RUN={re.escape(job)}/[^/]+/{node}"))


def test_a_new_child_and_a_reparented_one_are_seen_on_the_next_poll(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path
) -> None:
    """Between full scans the poll walks the known PIDs' tree: a process the job starts
    shows on the next poll, and so does its parent's death (ORPHANED)."""
    job, go, stop = "reaction", tmp_path / "go", tmp_path / "stop"
    path = cfg.write(f"""
    job: {job}
    nodes: [node0]
    command: >-
      echo up; while [ ! -f {go} ]; do sleep 0.05; done; sleep 600 &
      while [ ! -f {stop} ]; do sleep 0.05; done; echo bye
    launch: {{ready: log, ready_pattern: up, ready_timeout: 20}}
    """)
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    config, record = load_config(path), latest(job)
    assert record is not None
    with Cluster(config.nodes, config.ssh) as cluster:
        poller = Poller(record, cluster, gpus=False)
        first = poller.poll()["node0"]  # the full scan
        go.touch()
        sleeper = wait_for(lambda: _sleep_600(job), 10, what="the new child")
        second = poller.poll()["node0"]
        assert sleeper in {p.pid for p in second.procs}, (first.procs, second.procs)
        stop.touch()  # the subshell exits: its `sleep 600` is reparented, still tagged
        wait_for(lambda: _ppid(sleeper) == 1 or _ppid(sleeper) not in _tagged_set(job), 10)
        third = poller.poll()["node0"]
        assert poller.polls == 3  # no full scan since the first
        verdict = derive(third, 300)
        assert verdict.state is NodeState.ORPHANED and str(sleeper) in verdict.why, third.procs
    assert cfg.mntui(path, "kill").returncode == 0


def test_a_hung_node_holds_back_no_other_node(fake: FakeCluster, cfg: Cfg) -> None:
    """A node whose sshd stopped answering is unreachable after `round_wait`, not after
    the 20 s command timeout, and is not asked again while its poll is still out."""
    job = "hung"
    path = cfg.write(listener_job(job, free_port(), nodes="[node0, node2]"))
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    config, record = load_config(path), latest(job)
    assert record is not None
    with Cluster(config.nodes, config.ssh) as cluster:
        poller = Poller(record, cluster, gpus=False)
        poller.round_wait = 1.0
        assert all(s.reachable for s in poller.poll().values())
        sshd = process_tree(fake.node("node2").proc.pid)  # type: ignore[union-attr]  # and our session
        try:
            for pid in sshd:
                os.kill(pid, signal.SIGSTOP)
            for _ in range(2):
                snaps = poller.poll()
                assert snaps["node0"].reachable and not snaps["node2"].reachable
                assert "poll still running" in (snaps["node2"].error or "")
            assert poller._state["node2"].polls == 2  # the hung poll was not sent again
        finally:
            for pid in sshd:
                os.kill(pid, signal.SIGCONT)
        wait_for(lambda: poller.poll()["node2"].reachable, 30, what="node2 back")
    assert cfg.mntui(path, "kill").returncode == 0


def _sleep_600(job: str) -> int | None:
    for pid in tagged(job):
        if Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x00600\x00":
            return pid
    return None


def _tagged_set(job: str) -> set[int]:
    return set(tagged(job))


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1
