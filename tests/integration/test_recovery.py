"""The recovery layer keeps mntui's two promises under failures of mntui itself: a kill
reaches every node the chain ever used (a spare the coordinator swapped in, with the
coordinator itself gone), a user's partial kill is refused while the cluster watches
the run (the coordinator would take it for a failure) and is the user's doing on an
unwatched one, and every ending closes the job's sessions. Real sshd nodes, real tmux,
real torchrun (the spare swap: test_restart's failures without torch,
tests/jobs/faulty_steps.py)."""

from __future__ import annotations

import os
import re
import signal

from clusterwatch import watchers
from fakecluster import FakeCluster, alive, tagged, wait_for
from helpers import Cfg, free_port, step_count, tagged_anywhere
from test_restart import chain, start

from mntui.sessions.runs import latest


def test_a_direct_kill_after_a_spare_swap_reaches_the_spare(fake: FakeCluster, cfg: Cfg) -> None:
    """Once the coordinator swapped the spare node2 in and then died with the main's
    sentinel (nothing to ask), `mntui kill` takes the nodes from the chain's records
    (synced by a look) and kills node2 directly too."""
    job = "rspare"
    path = start(cfg, job, "--fail-if-env BREAK_HERE --fail-step 2 --how exit3 --steps 100000",
                 "restart: {max: 3, backoff: 1}\nspares: [node2]\n"
                 "overrides: {node1: {env: {BREAK_HERE: '1'}}}",
                 light=True)  # fmt: skip

    def on_spare() -> bool:
        runs = chain(cfg, job)  # a look: the chain's attempts into the records
        rec = runs[-1] if runs else None
        return bool(rec and rec.status.value == "running" and "node2" in [n.node for n in rec.nodes]
                    and step_count(fake.node("node2").log(job)) >= 2)  # fmt: skip

    wait_for(on_spare, 300, interval=1.0, what="an attempt training on the spare node2")
    rec = latest(job)
    assert rec is not None and [n.node for n in rec.nodes] == ["node0", "node2"]
    main = watchers(job, "coord") + watchers(job, "sentinel", "node0")
    for sig in (signal.SIGSTOP, signal.SIGKILL):  # stopped first: no respawn between
        for pid in main:
            os.kill(pid, sig)
    wait_for(lambda: not alive(main), 10, what="the main's watchers gone")
    assert "node2" in cfg.mntui(path, "status").stdout
    res = cfg.mntui(path, "kill")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "node2" in res.stdout, res.stdout
    wait_for(lambda: not tagged_anywhere(job), 20, what="every process of the job gone")
    assert [
        s for n in ("node0", "node1", "node2") for s in fake.node(n).sessions() if job in s
    ] == []


def test_a_users_partial_kill_is_refused_while_the_cluster_watches(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """Issue 37 item 18 is to come: today a node's kill under the cluster's watch is
    refused in one line (its coordinator would take it for a failure, tear down and
    restart), nothing is killed; `mntui kill` stops the whole job."""
    job = "rpartial"
    path = start(cfg, job, "", "restart: {max: 3, backoff: 1}")
    wait_for(lambda: step_count(fake.node("node1").log(job)) >= 2, 90, what="training")
    before = tagged(job, "node1")
    res = cfg.mntui(path, "kill", "node1")
    assert res.returncode == 2, res.stdout + res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert "not killing node1 alone: the cluster watches" in line, line
    assert set(before) <= set(tagged(job, "node1")), "node1 was killed all the same"
    assert cfg.mntui(path, "kill").returncode == 0
    wait_for(lambda: not tagged_anywhere(job), 30, what="the job gone")


def test_an_unwatched_runs_partial_kill_is_the_users_doing(fake: FakeCluster, cfg: Cfg) -> None:
    """Nothing watches the run: `mntui kill node1` kills node1 alone, writes it in the
    record, and `status` says the user killed it; node0 runs on."""
    job = "rpartial2"
    # no listener: these nodes share one host, where node0's would hold the port that
    # `mntui kill node1` checks on node1
    path = cfg.write(f"""
    job: {job}
    nodes: [node0, node1]
    master_port: {free_port()}
    command: echo "up {{node}}"; exec sleep 600
    launch: {{ready: log, ready_pattern: up, ready_timeout: 20}}
    kill: {{grace: 2}}
    """)
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0  # --no-watch
    res = cfg.mntui(path, "kill", "node1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not tagged(job, "node1") and tagged(job, "node0")
    rec = latest(job)
    assert rec is not None and rec.killed_nodes == ["node1"]
    status = cfg.mntui(path, "status").stdout
    assert "killed by the user: node1" in status and "unwatched" in status, status
    assert re.search(r"node0\s+0\s+(running|starting)", status), status
    assert cfg.mntui(path, "kill").returncode == 0


def test_a_run_that_fails_by_itself_closes_its_sessions(fake: FakeCluster, cfg: Cfg) -> None:
    """Finding 11: no teardown (on_failure: notify), torchrun exits on every node: the run
    is `failed`, and no node keeps a session with a dead pane (the coordinator closes
    them at the end it saw)."""
    job = "rself"
    path = start(cfg, job, "--fail-rank 1 --fail-step 2 --how exit3", "",
                 watch=", on_failure: notify")  # fmt: skip
    wait_for(lambda: [r.status.value for r in chain(cfg, job)] == ["failed"], 120,
             interval=1.0, what="the run to fail by itself")  # fmt: skip
    wait_for(lambda: not any(job in s for n in ("node0", "node1") for s in fake.node(n).sessions()),
             30, what="the sessions closed")  # fmt: skip
    wait_for(lambda: not tagged_anywhere(job), 30, what="nothing left")
    relaunch = cfg.mntui(path, "launch", "--no-ui")
    assert relaunch.returncode == 0, relaunch.stdout + relaunch.stderr
    assert cfg.mntui(path, "kill").returncode == 0
