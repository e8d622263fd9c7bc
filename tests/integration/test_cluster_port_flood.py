"""Issue 39, finding 1: a peer that never knows the secret must not get a healthy job
torn down. The coordinator's port listens on every address; before its door
(node/coord/door.py) it had one pool of 2N+8 handshake slots, 2 s each, and 40 idle
connections reopened as each was dropped (tests/portflood.py) held them all: the
coordinator started again after a SIGKILL never heard its sentinels, node1 tore its
ranks down and the new coordinator tore the job down, blaming the main (`its sentinel
never connected`). Now only a hello that proves the secret gets a slot, and the flood's
connections wait at the door, bounded, making room for the newcomers.

On the fake cluster every node is 127.0.0.1, and so is the flood: the address alone
cannot tell the nodes' connections from it. Real parts as test_cluster_respawn.py.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from clusterwatch import NODES, a_rank, launched, nothing_left, run_dir
from fakecluster import FakeCluster, wait_for
from helpers import Cfg
from portflood import flooding
from test_cluster_faults import decision, read_json, told_on_failure
from test_cluster_respawn import job_config, killed_and_back, steps, trains_on

pytestmark = pytest.mark.integration


def _board(fake: FakeCluster, job: str) -> dict:
    return read_json(run_dir(fake, job, "node0") / "coord" / "status.json") or {}


def _all_back(fake: FakeCluster, job: str, coordinator: int) -> bool:
    """Every sentinel connected to the coordinator `coordinator`, as its board says."""
    b = _board(fake, job)
    nodes = b.get("nodes") or {}
    return b.get("pid") == coordinator and all(nodes.get(n, {}).get("connected") for n in NODES)


def test_a_flood_keeps_no_sentinel_from_a_coordinator_started_again(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """The review's reproduction, then a rank killed under the same flood: the watch
    still decides, naming that node."""
    job = "node-loris"
    path, port, wport = job_config(cfg, job)
    with told_on_failure(fake, job):
        launched(cfg, path, job, fake)
        with flooding(wport, hold=40) as said:
            wait_for(lambda: _board(fake, job).get("refused"), 10, what="the flood at the door")
            before = steps(fake, job)
            t0 = time.monotonic()
            new, took = killed_and_back(fake, job, "coord")
            wait_for(lambda: _all_back(fake, job, new), 10, what="both sentinels back")
            back = time.monotonic() - t0
            trains_on(fake, job, t0, before)
            t1 = time.monotonic()
            os.kill(a_rank(job, "node1"), signal.SIGKILL)
            d = wait_for(lambda: decision(fake, job), 20, what="the decision under the flood")
            decided = time.monotonic() - t1
        print(f"under {said[0]}: coordinator back in {took:.2f} s, both sentinels in "
              f"{back:.2f} s; a rank's SIGKILL decided in {decided:.2f} s")  # fmt: skip
        assert d["node"] == "node1" and d["state"] in ("failed", "orphaned"), d
        refused = _board(fake, job).get("refused") or {}
        assert sum(refused.values()) >= 40, refused  # the flood counted, never served
        assert set(refused) <= {"handshake-timeout", "busy"}, refused
        assert cfg.mntui(path, "kill").returncode == 0
        nothing_left(fake, job, (port, wport))


def test_a_flood_from_before_the_launch_keeps_no_sentinel_out(fake: FakeCluster, cfg: Cfg) -> None:
    """The sentinels' first connections meet the flood as the coordinator starts
    listening: every one connects, the launch says so, and the job trains."""
    job = "node-lorislaunch"
    path, port, wport = job_config(cfg, job)
    with told_on_failure(fake, job):
        with flooding(wport, hold=40) as said:
            launched(cfg, path, job, fake)  # 2 of 2 sentinels connected, both nodes training
            wait_for(lambda: _all_back(fake, job, _board(fake, job).get("pid")), 10,
                     what="both sentinels on the board")  # fmt: skip
            assert decision(fake, job) is None
        assert said[0].startswith("flood: "), said
        assert cfg.mntui(path, "kill").returncode == 0
        nothing_left(fake, job, (port, wport))
