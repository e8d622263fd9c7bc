"""A Ctrl+C during a headless launch ends in one true sentence (issue 29): before every
node runs, the launch stops what it had started and says so (exit 130)."""

from __future__ import annotations

import signal
import subprocess
import sys

from fakecluster import FakeCluster, tagged, wait_for
from helpers import Cfg

from mntui.sessions.runs import RunRecord, latest


def record(job: str) -> RunRecord:
    rec = latest(job)
    assert rec is not None
    return rec


def test_ctrl_c_before_every_node_runs_says_what_was_stopped(fake: FakeCluster, cfg: Cfg) -> None:
    job = "wsearly"
    path = cfg.write(f"""
    job: {job}
    nodes: [node0, node1]
    command: echo waiting forever; sleep 300
    launch: {{ready_timeout: 60}}
    """)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "launch", "--no-ui"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: tagged(job, "node0"), 20, what="the main started")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        f"mntui: interrupted: the launch stopped what it had started (run {record(job).run_id} "
        f"aborted); nothing of {job} runs"
    ), err
    assert not tagged(job)
