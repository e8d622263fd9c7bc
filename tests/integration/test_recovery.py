"""The recovery layer keeps mntui's two promises under failures of mntui itself: a kill
reaches every node the chain ever used (a spare swapped in, with its supervisor dead),
a user's partial kill is the user's doing (never restarted, never blamed), a supervisor
that dies is shown and resumed, and every ending closes the job's sessions. Real sshd
nodes, real tmux, real torchrun (the spare swap and the resumed chain: test_restart's
failures without torch, tests/jobs/faulty_steps.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from fakecluster import FakeCluster, tagged, wait_for
from helpers import Cfg, step_count
from test_restart import chain, start

from mntui.sessions.runs import RunRecord, latest


def supervisor_pid(rec: RunRecord) -> int:
    first = rec.dir.parent / (rec.chain or rec.run_id)
    return int((first / "supervisor.lock").read_text().split()[0])


def sigkill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def test_a_direct_kill_after_a_spare_swap_reaches_the_spare(fake: FakeCluster, cfg: Cfg) -> None:
    """Finding 2: with the supervisor dead, `mntui kill` takes the nodes from the chain's
    records (node2, the spare), and `mntui kill node2` is a known node."""
    job = "rspare"
    # listen=False: these nodes share one host, where node0's listener would hold the port
    # `mntui kill node2` checks on node2 (torchrun's node0 went once its peer was gone)
    path = start(cfg, job, "--fail-if-env BREAK_HERE --fail-step 2 --how exit3 --steps 100000",
                 "restart: {max: 3, backoff: 1}\nspares: [node2]\n"
                 "overrides: {node1: {env: {BREAK_HERE: '1'}}}",
                 light=True, listen=False)  # fmt: skip

    def on_spare() -> bool:
        rec = latest(job)
        return bool(rec and rec.attempt == 2 and rec.status.value == "running"
                    and step_count(fake.node("node2").log(job)) >= 2)  # fmt: skip

    wait_for(on_spare, 300, interval=0.5, what="attempt 2 training on the spare node2")
    rec = latest(job)
    assert rec is not None and [n.node for n in rec.nodes] == ["node0", "node2"]
    sigkill(supervisor_pid(rec))
    status = cfg.mntui(path, "status")
    assert "supervisor: gone since" in status.stdout and "`mntui watch` resumes" in status.stdout
    assert "node2" in status.stdout
    part = cfg.mntui(path, "kill", "node2")
    assert part.returncode == 0, part.stdout + part.stderr
    assert not tagged(job, "node2")
    res = cfg.mntui(path, "kill")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not tagged(job), f"`mntui kill` said {res.stderr.strip()!r} but the job runs on"
    assert [
        s for n in ("node0", "node1", "node2") for s in fake.node(n).sessions() if job in s
    ] == []


def test_a_users_partial_kill_is_not_restarted_nor_blamed(fake: FakeCluster, cfg: Cfg) -> None:
    """Finding 3: `mntui kill node1` is written to the record; the supervisor does not
    relaunch, and the report names the user's kill, not node0's lost peer."""
    job = "rpartial"
    path = start(cfg, job, "", "restart: {max: 3, backoff: 1}")
    wait_for(lambda: step_count(fake.node("node1").log(job)) >= 2, 90, what="training")
    first = latest(job)
    assert first is not None
    res = cfg.mntui(path, "kill", "node1")
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: (r := latest(job)) is not None and not r.status.is_live, 60,
             interval=0.3, what="the run to end")  # fmt: skip
    wait_for(lambda: not tagged(job), 30, what="node0 torn down after its peer was killed")
    rec = latest(job)
    assert rec is not None and rec.run_id == first.run_id, "relaunched after the user's kill"
    assert rec.status.value == "killed" and rec.killed_nodes == ["node1"]
    log = rec.dir / "watch.log"
    wait_for(lambda: "no restart: the user killed node1" in log.read_text(), 30, what="the word")
    report = cfg.mntui(path, "report").stdout
    assert report.splitlines()[0].startswith("node1 killed by the user"), report
    assert "node0 ended as a consequence" in report.splitlines()[0]
    status = cfg.mntui(path, "status").stdout
    assert "killed by the user: node1" in status


def _watch(path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "watch"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def test_a_supervisor_killed_in_the_backoff_is_shown_and_resumed(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """status says the chain is orphaned; `mntui watch` resumes it where it stood (the
    backoff), and the next attempt runs to the end."""
    job = "rresume"
    path = start(cfg, job, "--fail-rank 1 --fail-step 2 --how exit3 --fail-attempts 1 --steps 6",
                 "restart: {max: 3, backoff: 4}", light=True)  # fmt: skip
    wait_for(lambda: chain(job) and chain(job)[0].status.value == "restarting", 120,
             interval=0.2, what="the backoff")  # fmt: skip
    sigkill(supervisor_pid(chain(job)[0]))
    status = cfg.mntui(path, "status").stdout
    assert "supervisor: gone since" in status, status
    watcher = _watch(path)
    try:
        wait_for(lambda: [r.status.value for r in chain(job)] == ["restarting", "finished"], 180,
                 interval=0.5, what="the resumed chain's attempt 1 finished")  # fmt: skip
        out, _ = watcher.communicate(timeout=60)
    finally:
        watcher.kill()
    assert "resuming chain" in out and "supervisor: gone" not in cfg.mntui(path, "status").stdout
    assert not tagged(job)


def test_a_run_that_fails_by_itself_closes_its_sessions(fake: FakeCluster, cfg: Cfg) -> None:
    """Finding 11: no teardown (on_failure: notify), torchrun exits on every node: the run
    is `failed`, and no node keeps a session with a dead pane."""
    job = "rself"
    path = start(cfg, job, "--fail-rank 1 --fail-step 2 --how exit3", "",
                 watch=", on_failure: notify")  # fmt: skip
    wait_for(lambda: (r := latest(job)) is not None and r.status.value == "failed", 120,
             interval=0.3, what="the run to fail by itself")  # fmt: skip
    wait_for(lambda: not any(job in s for n in ("node0", "node1") for s in fake.node(n).sessions()),
             30, what="the sessions closed")  # fmt: skip
    assert not tagged(job)
    relaunch = cfg.mntui(path, "launch", "--no-ui")
    assert relaunch.returncode == 0, relaunch.stdout + relaunch.stderr
    assert cfg.mntui(path, "kill").returncode == 0
