"""Issue 39, finding 2: a FIFO at `coord/kill` (the job runs as the node's user and can
make one; a hung home filesystem blocks the same way) blocked the coordinator's judge
in open() for good, while its heartbeat thread kept the sentinels content: a rank
SIGKILLed then was never torn down, and `status` said the sentinels would tear their
nodes down "if it stays silent". The run dir's files are now opened non-blocking and
must be regular files (node/files/plainfile.py), so the judge goes on and decides; and the
heartbeats go only while the chain's thread works (coordinator.py `beat`).

Also the secret's exposure, which the review checked on the way: its file 0600 in a
0700 run dir, and in no process's command line or environment.
"""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import pytest
from clusterwatch import a_rank, launched, nothing_left
from fakecluster import FakeCluster, wait_for
from helpers import Cfg
from test_cluster_faults import decision, told_on_failure
from test_cluster_respawn import first_dir, job_config, journal

pytestmark = pytest.mark.integration


def _showing(secret: bytes) -> list[str]:
    """Every process whose command line or environment holds `secret` (those this user
    may read: the nodes' are)."""
    hits = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        for name in ("cmdline", "environ"):
            try:
                if secret in Path(f"/proc/{pid}/{name}").read_bytes():
                    hits.append(f"{pid}/{name}")
            except OSError:
                pass
    return hits


def test_a_fifo_at_coord_kill_neither_blocks_the_judge_nor_hides_a_dead_rank(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "node-fifo"
    path, port, wport = job_config(cfg, job)
    with told_on_failure(fake, job):
        launched(cfg, path, job, fake)
        d0 = first_dir(fake, job, "node0")
        for p, mode in ((d0, 0o700), (d0 / "coord", 0o700), (d0 / "secret", 0o600)):
            assert stat.S_IMODE(p.stat().st_mode) == mode, (p, oct(p.stat().st_mode))
        secret = (d0 / "secret").read_bytes().strip()
        assert not _showing(secret)
        os.mkfifo(d0 / "coord" / "kill")  # what a job (the same user) can do
        wait_for(lambda: journal(fake, job, "kill-ignored"), 10, what="the FIFO seen, ignored")
        os.kill(a_rank(job, "node1"), signal.SIGKILL)
        d = wait_for(lambda: decision(fake, job), 20, what="the coordinator's decision")
        assert d["node"] == "node1" and d["decided_by"] == "coordinator", d
        assert stat.S_ISFIFO((d0 / "coord" / "kill").stat().st_mode)  # not ours to delete
        st = cfg.mntui(path, "status")
        assert "tore the job down" in st.stdout and "node1" in st.stdout, st.stdout
        assert "if it stays silent" not in st.stdout, st.stdout
        assert cfg.mntui(path, "kill").returncode == 0
        nothing_left(fake, job, (port, wport))
