"""Issue 28's findings on a user's kill and a restart chain's records, each as the review
reproduced it: a kill that rewrote earlier attempts (5), a partial kill of a node the
attempt does not use (6), and a partial kill in the backoff. (Findings 1 and 2 were this
machine's supervisor's, gone with it: the coordinator's chain is tested in
tests/unit/test_node_chain*.py and tests/integration/test_cluster_restart.py.)

The records are real (private state dir) and so is the kill: the nodes are `localhost`,
so `mntui kill` runs its real kill script in a local shell, and the processes it must
reach are real ones this test starts, tagged as the job's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakecluster import free_port, wait_for

from mntui.sessions.config import JobConfig
from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.errors import UsageError
from mntui.sessions.history import fold, ledgers, scan
from mntui.sessions.launch import stop_job
from mntui.sessions.procs import TAG_VAR
from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus, load_run
from mntui.sessions.ssh import Cluster

R0, R1 = "20260101-000000-aaaa", "20260101-000100-bbbb"


def config(job: str, extra: str = "") -> JobConfig:
    local = ", ".join(f"{{name: n{i}, host: localhost}}" for i in range(2))
    return parse_config(
        f"job: {job}\nnodes: [{local}]\nspares: [{{name: n2, host: localhost}}]\n"
        f"master_port: {free_port()}\ncommand: sleep 1\nkill: {{grace: 1}}\n{extra}"
    )


def record(
    job: str, run_id: str, names: tuple[str, ...], status: RunStatus, **kw: Any
) -> RunRecord:
    nodes = [NodeRecord(n, "localhost", i, "s", "t", "/d") for i, n in enumerate(names)]
    rec = RunRecord(job, run_id, "c.yaml", "127.0.0.1", free_port(), nodes, status=status, **kw)
    rec.create()
    return rec


def kill(cfg: JobConfig, names: list[str] | None = None) -> None:
    """The user's `mntui kill [NODE]`, as the CLI makes it."""
    with Cluster(cfg.nodes, cfg.ssh) as cluster:
        stop_job(cfg, cluster, names=names)


@pytest.fixture
def tagged() -> Iterator[Any]:
    """Starts a process tagged as the job's on a node (as a launch tags it), so a real kill
    has something of the job to reach; whatever is left is stopped by PID."""
    started: list[subprocess.Popen[bytes]] = []

    def spawn(job: str, run_id: str, node: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, TAG_VAR: f"{job}/{run_id}/{node}"}
        proc = subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)
        started.append(proc)
        return proc

    yield spawn
    for proc in started:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


# -- finding 5: only the chain's latest run is live --------------------------------------


def caused(node: str) -> int:
    h = next((h for h in fold(scan()) if h.node == node), None)
    return len(h.caused) if h else 0


def test_killing_the_running_attempt_keeps_the_earlier_attempts_failure() -> None:
    """Finding 5 (medium): a full kill rewrote attempt 0 (`restarting`, it failed by
    itself on n1) to `killed`, and n1's failure left `mntui history`, `nodes --history`,
    quarantine_after's count and the goodput ledger."""
    now = time.time()
    day = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    r0, r1 = f"{day}-aaaa", f"{day}-bbbb"
    first = record("ck5", r0, ("n0", "n1"), RunStatus.RESTARTING, chain=r0, created_at=now - 60)
    first.update(lambda r: r.note("restart", attempt=1, why="restart 1/3"))
    report = {"cause_node": "n1", "cause": "n1 exited 3", "first_at": now - 30, "ending": "ended"}
    (first.dir / "report.json").write_text(json.dumps(report))
    record("ck5", r1, ("n0", "n1"), RunStatus.RUNNING, chain=r0, attempt=1, created_at=now - 20)
    assert caused("n1") == 1
    before = [len(c.losses) for c in ledgers(scan(), now)]

    kill(config("ck5"))

    after = [len(c.losses) for c in ledgers(scan(), now)]
    assert caused("n1") == 1, "n1's earlier failure disappeared from its history after the kill"
    assert after == before, f"the chain's losses went {before} -> {after}"
    statuses = [r.status for r in (load_run("ck5", r0), load_run("ck5", r1)) if r]
    assert statuses == [RunStatus.RESTARTING, RunStatus.KILLED]


# -- finding 6 and the backoff: a partial kill is the attempt's only where it runs -------


def test_a_partial_kill_of_a_node_the_attempt_does_not_use_is_not_the_attempts(
    tagged: Any,
) -> None:
    """Finding 6 (medium): `mntui kill n1` (the culprit spare n2 replaced, cleaned up)
    was written into attempt 1's killed_nodes: its own later failure would then never be
    restarted nor notified, and be blamed on the user. The leftover on n1 is still killed."""
    cfg = config("ck6")
    record("ck6", R0, ("n0", "n1"), RunStatus.RESTARTING, chain=R0, created_at=1.0)
    record("ck6", R1, ("n0", "n2"), RunStatus.RUNNING, chain=R0, attempt=1, created_at=2.0)
    leftover = tagged("ck6", R0, "n1")
    kill(cfg, ["n1"])
    assert leftover.wait(10) is not None, "the leftover on n1 was not killed"
    attempt1, attempt0 = load_run("ck6", R1), load_run("ck6", R0)
    assert attempt1 is not None and attempt0 is not None
    killed = attempt1.killed_nodes
    assert killed == [], f"attempt 1 runs on n0,n2 but counts as partly killed: {killed}"
    assert attempt0.killed_nodes == [], "attempt 0 had ended: its failure is not the user's"
    kill(cfg, ["n2"])  # a node the attempt does run on: the user's doing
    assert (after := load_run("ck6", R1)) is not None and after.killed_nodes == ["n2"]


def mntui(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), *args],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_partial_kill_in_the_backoff_is_refused_with_the_reason(
    tagged: Any, tmp_path: Path
) -> None:
    """The relaunch after the backoff would put the node straight back: `mntui kill n1`
    there said nothing and did nothing that lasted. It is refused in one line that names
    the verbs that do what the user wants; nothing is killed. A node the next attempt does
    not use (one a spare replaced) is still cleaned up."""
    path = tmp_path / "c.yaml"
    path.write_text(
        "job: ck7\nnodes: [{name: n0, host: localhost}, {name: n1, host: localhost}]\n"
        f"spares: [{{name: n2, host: localhost}}]\nmaster_port: {free_port()}\n"
        "command: sleep 1\nrestart: {max: 3}\n"
    )
    record("ck7", R0, ("n0", "n2"), RunStatus.TORN_DOWN, chain=R0, created_at=1.0)
    rec = record("ck7", R1, ("n0", "n1"), RunStatus.RESTARTING, chain=R0, attempt=1)
    before = load_run("ck7", R1)
    on_n1 = tagged("ck7", R0, "n1")
    res = mntui(path, "kill", "n1")
    assert res.returncode == 2, res.stdout + res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert "not killing n1" in line and "backoff" in line, line
    assert "mntui quarantine n1" in line and "`mntui kill` ends the chain" in line, line
    assert on_n1.poll() is None, "n1 was killed all the same"
    assert load_run("ck7", R1) == before
    with pytest.raises(UsageError):
        kill(parse_config(path.read_text(), str(path)), ["n1"])
    on_n2 = tagged("ck7", R0, "n2")
    res = mntui(path, "kill", "n2")
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: on_n2.poll() is not None, 10, what="the leftover on n2 killed")
    assert (after := load_run("ck7", rec.run_id)) is not None and after.killed_nodes == []


def test_a_full_kill_in_the_backoff_still_ends_the_chain() -> None:
    """The chain's latest run in its backoff is live: the kill marks it `killed`."""
    record("ck8", R0, ("n0", "n1"), RunStatus.RESTARTING, chain=R0)
    kill(config("ck8"))
    after = load_run("ck8", R0)
    assert after is not None and after.status is RunStatus.KILLED


def test_a_kill_in_the_backoff_keeps_the_failure_that_caused_the_restart() -> None:
    """The run in its backoff failed by itself (n1 exited 3, no teardown); the user's kill
    then marks it `killed`, and that must not take n1's failure out of its history."""
    now = time.time()
    rid = time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + "-cccc"
    rec = record("ck9", rid, ("n0", "n1"), RunStatus.RESTARTING, chain=rid, created_at=now - 9)
    rec.update(lambda r: r.note("restart", attempt=1, why="restart 1/3"))
    report = {"cause_node": "n1", "cause": "n1 exited 3", "first_at": now - 5, "ending": "ended"}
    (rec.dir / "report.json").write_text(json.dumps(report))
    kill(config("ck9"))
    assert (after := load_run("ck9", rid)) is not None and after.status is RunStatus.KILLED
    assert caused("n1") == 1, "the kill in the backoff erased the failure that caused it"
