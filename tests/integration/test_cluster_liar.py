"""Issue 39, "also cover": a sentinel that lies, reporting its node clean when it is not
(a bug in it, or a process that took its place). The manager does not take a sentinel's
`clean` alone: `mntui kill` sweeps every node again from here by the same rule
(node/proc/killer.py), finds the ranks the lie left, stops them, and says which node's
sentinel was wrong; `status` says it too, from the run's record.

The liar is node1's own sentinel code (sessions/node/sentinel/sentinel.py) with its kill
replaced by a clean report that kills nothing, started on node1 in the place of the
real one (its guard and it stopped first, as bench/chaos_cluster.py does), connected
to the coordinator with the run's secret as a restarted sentinel would be."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import pytest
from clusterwatch import a_rank, launched, nothing_left, run_dir, watchers
from fakecluster import FakeCluster, alive, free_port, wait_for
from helpers import Cfg, steps_job
from test_cluster_faults import read_json, told_on_failure

pytestmark = pytest.mark.integration
NODES = ("node0", "node1")
WATCH = "watch: {{where: cluster, port: {port}, unreachable_after: 20, frozen_after: 2}}"
LIAR = """import sys
from mntui.sessions.node.sentinel import sentinel


def lie(self, why, grace=None):
    print("liar: reporting a clean kill, killing nothing", flush=True)
    self.killed = True
    return {"found": [], "sigkilled": [], "left": [], "session_killed": False,
            "port_holders": [], "holders": [], "seconds": 0.01, "phases": {}}


sentinel.Sentinel._kill = lie
sys.exit(sentinel.main(sys.argv[1:]))
"""


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _connected(fake: FakeCluster, job: str, node: str) -> bool:
    status = read_json(run_dir(fake, job, "node0") / "coord" / "status.json") or {}
    return bool(((status.get("nodes") or {}).get(node) or {}).get("connected"))


def test_a_sentinel_that_reports_its_node_clean_is_checked_by_the_kill(
    fake: FakeCluster, cfg: Cfg, tmp_path: Path
) -> None:
    job = "cw-liar"
    port, wport = free_port(), free_port()
    path = cfg.write(steps_job(job, port, extra=WATCH.format(port=wport)))
    liar = tmp_path / "liar.py"
    liar.write_text(LIAR)
    with told_on_failure(fake, job):
        launched(cfg, path, job, fake)
        d1 = run_dir(fake, job, "node1")
        rank = a_rank(job, "node1")
        honest = [p for p in (_pid(d1 / "sentinel.pid"), _pid(d1 / "guard.pid")) if p]
        assert len(honest) == 2 and alive(honest) == honest, honest
        for sig in (signal.SIGSTOP, signal.SIGKILL):  # neither starts the other again
            for pid in honest:
                os.kill(pid, sig)
        wait_for(lambda: not alive(honest), 10, what="node1's sentinel and guard gone")
        tag = f"{job}/{d1.parent.name}/node1/sentinel"
        started = fake.ssh("node1", f"MNTUI_RUN={tag} {sys.executable} {liar} {d1}")
        assert started.returncode == 0, started.stdout + started.stderr
        impostor = _pid(d1 / "sentinel.pid")
        try:
            assert impostor not in (None, *honest) and alive([impostor])
            wait_for(lambda: _connected(fake, job, "node1"), 20, what="the liar connected")
            k = cfg.mntui(path, "kill")
            said = k.stdout + k.stderr
            wait_for(lambda: not alive([rank]), 10, what=f"node1's rank {rank} gone")
            lines = [ln for ln in said.splitlines() if "sentinel reported it clean" in ln]
            assert len(lines) == 1 and "node1" in lines[0], said
            assert re.search(rf"\b{rank}\b", lines[0]), said  # the rank the lie left, named
            assert k.returncode == 0 and "clean:" in said, said
            assert "liar: reporting a clean kill" in (d1 / "sentinel.log").read_text()
            st = cfg.mntui(path, "status")
            text = st.stdout + st.stderr
            assert "Traceback" not in text, text
            missed = rf"node1's sentinel reported it clean, yet .* 3 process\(es\) .*\b{rank}\b"
            assert re.search(missed, text), text  # the pane's bash, the rank and its tee
        finally:
            for pid in alive([impostor] if impostor else []):
                os.kill(pid, signal.SIGKILL)
        nothing_left(fake, job, (port, wport))
        assert not watchers(job, "sentinel") and not watchers(job, "coord")
