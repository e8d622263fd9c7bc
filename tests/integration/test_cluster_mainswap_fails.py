"""A next attempt the stand-by could not start (recover/mainswap.py) ends the chain
with the failure's words: a record left "restarting" would have nobody acting on it,
and `status` would say nothing of why."""

from __future__ import annotations

from dataclasses import replace

from clusterwatch import SPARE_JOB, runs_on
from fakecluster import FakeCluster, free_port, wait_for
from helpers import Cfg

from mntui.sessions.config import load_config
from mntui.sessions.events import Event
from mntui.sessions.launch import ChainView, run_config
from mntui.sessions.node.restarts import AttemptEnd
from mntui.sessions.poll import NodeState
from mntui.sessions.recover.mainswap import Next, _relaunch
from mntui.sessions.runs import RunStatus, latest, load_run
from mntui.sessions.watch.standbyhint import LOST_NOTE


def test_a_relaunch_that_fails_ends_the_chain_saying_why(fake: FakeCluster, cfg: Cfg) -> None:
    job = "cw-swapfails"
    path = cfg.write(SPARE_JOB.format(job=job, port=free_port(), wport=free_port()))
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    try:
        wait_for(lambda: runs_on(job, "node0") and runs_on(job, "node1"), 30, what="both ranks")
        rec = latest(job)
        assert rec is not None
        empty = cfg.tmp / "no_hosts_config"
        empty.write_text("")
        good = load_config(path)  # as a host gone: no node can be reached for the launch
        config = replace(good, ssh=replace(good.ssh, config=str(empty), connect_timeout=2))
        said: list[Event] = []
        nxt = Next(("node0", "node1"), "test", 0.0, (), 1)
        rcfg = run_config(config, ChainView((rec,)))
        ended = [AttemptEnd(0, rec.run_id, NodeState.UNREACHABLE, "node0", (), 0.0, "lost")]
        assert _relaunch(config, rcfg, rec, ended, nxt, said.append) is None
        after = load_run(job, rec.run_id)
        assert after is not None and after.status is RunStatus.TORN_DOWN, after
        note = [h for h in after.history if h.get("what") == LOST_NOTE]
        assert note and "attempt 1 did not start" in str(note[-1].get("why")), after.history
    finally:
        cfg.mntui(path, "kill")
    wait_for(lambda: not runs_on(job, "node0") and not runs_on(job, "node1"), 20,
             what="the kill leaving nothing")  # fmt: skip
