"""Issue 39, finding 4: the main's whole job side (coordinator, sentinel, ranks) frozen
past unreachable_after, with `restart.max: 2`. node1's sentinel heard nothing, tore its
node down and left (lost.json). Woken, the coordinator blamed node1 for its own freeze,
started attempt 1's rank 0 on the main 7.4 s later, then found no sentinel on node1 and
stopped it; `status` said `? ?: attempt 1 did not start`.

Now a coordinator that finds it was stopped (its own clock jumped between two ticks)
judges nobody until every node is heard from again, and a node that never comes back
ends the attempt with the main named and nothing restarted from there (only this
machine can replace the main); and no rank of a relaunch starts before every node's
sentinel is connected. Real parts as test_cluster_respawn.py.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
from clusterwatch import launched, nothing_left, watchers
from fakecluster import FakeCluster, environ_of, tagged, wait_for
from helpers import Cfg
from test_cluster_faults import decision, job_side, lost, told_on_failure
from test_cluster_respawn import first_dir, job_config, journal

pytestmark = pytest.mark.integration


def _runs(job: str, node: str) -> set[str]:
    """The run ids of the job's live processes on `node` (one per attempt)."""
    out = set()
    for pid in tagged(job, node):
        for e in environ_of(pid):
            if e.startswith(b"MNTUI_RUN="):
                out.add(e.decode().split("/")[1])
    return out


def test_a_main_woken_after_its_workers_left_restarts_nothing_on_itself(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "node-wake"
    path, port, wport = job_config(cfg, job, "restart: {max: 2, backoff: 1}")
    with told_on_failure(fake, job):
        launched(cfg, path, job, fake)
        first = _runs(job, "node0")
        stopped = []
        for pid in job_side(job, "node0"):
            try:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            except ProcessLookupError:
                pass
        wait_for(lambda: lost(fake, job, "node1"), 40, what="node1 lost.json")
        wait_for(lambda: not watchers(job, "sentinel", "node1"), 20, what="node1's sentinel gone")
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        d = wait_for(lambda: decision(fake, job), 30, what="the woken coordinator's decision")
        assert (d["node"], d["state"]) == ("node0", "unreachable"), d
        assert "its coordinator was stopped" in d["why"] and "node1 did not come back" in d["why"]
        wait_for(lambda: not watchers(job, "coord"), 30, what="the coordinator gone")
        assert _runs(job, "node0") <= first, "an attempt started on the main after the wake"
        chain = json.loads((first_dir(fake, job) / "coord" / "chain.json").read_text())
        assert len(chain["attempts"]) == 1, chain["attempts"]
        assert chain["status"] == "ended" and chain.get("main_here") is True, chain
        assert "this coordinator stands down and restarts nothing" in chain["why"], chain["why"]
        resumed = journal(fake, job, "resumed")
        assert resumed and resumed[-1]["data"]["lost"] is True, resumed
        st = cfg.mntui(path, "status")
        out = st.stdout + st.stderr
        assert "the coordinator tore the job down" in out and "node0 unreachable" in out, out
        assert "? ?" not in out and "did not start" not in out, out
        assert cfg.mntui(path, "kill").returncode == 0
        nothing_left(fake, job, (port, wport))
