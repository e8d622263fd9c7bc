"""`mntui status` while this machine is cut off from every node (issue 38, item 4): it
took 40.7 s and said nothing of the cut but its exit code (30.8 s here, each lost host
asked six times in turn). Bounded now by two of the config's `ssh.connect_timeout` (5 s
here: the main, then the chain's other nodes for a successor that may lead) and a few
seconds, and it says the nodes are out of reach. Real sshd nodes, their sshd trees
stopped (a lost network: SSH hangs)."""

from __future__ import annotations

import time

from clusterwatch import cut_off, launched
from fakecluster import FakeCluster
from helpers import Cfg
from test_cluster_watch import cluster_job

SLACK = 8.0  # seconds past two connect timeouts: the command's own start, a loaded host


def test_status_during_a_cut_is_bounded_and_says_so(fake: FakeCluster, cfg: Cfg) -> None:
    job = "cut-status"
    path, _, _ = cluster_job(cfg, job, torch=False)
    launched(cfg, path, job, fake)
    with cut_off(fake):
        t0 = time.monotonic()
        res = cfg.mntui(path, "status", timeout=120)
        took = time.monotonic() - t0
    print(f"\nMEASURED status during a cut: {took:.1f} s, exit {res.returncode}")
    out = res.stdout + res.stderr
    assert took <= 2 * 5 + SLACK, f"{took:.1f} s: {out}"
    assert res.returncode == 1, out  # the job's state is unknown: a problem
    assert "out of reach" in out, out
    assert "Traceback" not in out, out
    assert cfg.mntui(path, "kill").returncode == 0
