"""Restarts on the cluster (issue 30, done-when 3): with this machine cut off from
every node (a laptop asleep: nothing of ours runs here, and SSH to the nodes hangs), a
rank that dies is restarted by the coordinator, main first then the workers, from the
scripts the launch left; once this machine looks again, `status` and `history` show
both attempts, and a crash loop gives up after `restart.max`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal

from fakecluster import FakeCluster, alive, cmdline, environ_of, pids_with_env, wait_for
from helpers import Cfg, step_count, tagged_anywhere
from test_cluster_watch import cluster_job, cut_off, launched, nothing_left

RESTART = "restart: {max: 2, backoff: 1}"


def ranks_of(job: str, node: str) -> dict[str, list[int]]:
    """The run id of each attempt with live ranks on `node`, and their PIDs."""
    out: dict[str, list[int]] = {}
    for pid in alive(pids_with_env(f"MNTUI_RUN={re.escape(job)}/[^/]+/{re.escape(node)}")):
        if "train.py" in cmdline(pid) and "torch.distributed.run" not in cmdline(pid):
            tag = next(e for e in environ_of(pid) if e.startswith(b"MNTUI_RUN=")).decode()
            out.setdefault(tag.split("/")[1], []).append(pid)
    return out


def test_a_rank_dies_while_this_machine_sleeps_and_the_coordinator_restarts_the_job(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "cw-restart"
    path, port, wport = cluster_job(cfg, job, RESTART)
    launched(cfg, path, job, fake)
    first = next(iter(ranks_of(job, "node1")))
    with cut_off(fake):
        os.kill(ranks_of(job, "node1")[first][0], signal.SIGKILL)
        wait_for(  # attempt 1 trains on both nodes before this machine wakes
            lambda: all(set(ranks_of(job, n)) - {first} for n in ("node0", "node1")),
            90,
            what="attempt 1 running on both nodes, started by the coordinator",
        )
        second = next(iter(set(ranks_of(job, "node1")) - {first}))
        assert not ranks_of(job, "node1").get(first), "attempt 0 is gone"
        wait_for(
            lambda: step_count(fake.node("node1").log(job)) >= 3, 60, what="attempt 1 training"
        )
    res = cfg.mntui(path, "status", "--json")
    data = json.loads(res.stdout)

    assert data["run_id"] == second and data["attempt"] == 1, data
    assert data["chain"] == first and data["via"] == "coordinator", data
    text = cfg.mntui(path, "status").stdout
    assert "attempt 2/3" in text and "(running)" in text, text
    hist = cfg.mntui(path, "history").stdout
    assert f"attempt 0 ({first})" in hist and "node1 failed" in hist, hist
    # A crash loop: whichever attempt runs now dies too, until the policy gives up
    # (max 2: three attempts in all, whether or not one also ended by itself).
    killed = {first}
    for _ in range(3):
        wait_for(
            lambda: (set(ranks_of(job, "node1")) - killed) or not tagged_anywhere(job),
            90,
            what="the next attempt's rank on node1, or the end of the chain",
        )
        fresh = set(ranks_of(job, "node1")) - killed
        if not fresh:
            break
        run = fresh.pop()
        with contextlib.suppress(ProcessLookupError, IndexError, KeyError):
            os.kill(ranks_of(job, "node1")[run][0], signal.SIGKILL)
        killed.add(run)
    nothing_left(fake, job, (port, wport))
    text = cfg.mntui(path, "status").stdout
    assert "(gave-up)" in text and "gave up after 2 restart(s) in a row" in text, text
    hist = cfg.mntui(path, "history").stdout
    assert "gave-up after 3 attempt(s)" in hist, hist
    assert "training 0.0s" not in hist, hist  # the coordinator clocked the steps
