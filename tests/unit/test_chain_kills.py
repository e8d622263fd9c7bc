"""Issue 28's findings on a user's kill and the restart chain, each as the review
reproduced it: a kill between the teardown and the `restarting` mark (1), the spare a
launch routed in for a quarantined node (2), a kill that rewrote earlier attempts (5), a
partial kill of a node the attempt does not use (6), and a partial kill in the backoff.

The records are real (private state dir) and so is the kill: the nodes are `localhost`,
so `mntui kill` runs its real kill script in a local shell, and the processes it must
reach are real ones this test starts, tagged as the job's. What is replaced is the
launch only (`supervise.launch`, `start._launch`): there is nothing to start a job on,
and these tests are about what the supervisor decides and watches, not how it starts.
"""

from __future__ import annotations

import contextlib
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
from mntui.sessions.errors import LaunchError, UsageError
from mntui.sessions.history import fold, ledgers, quarantines, scan
from mntui.sessions.launch import start, stop_job
from mntui.sessions.launch.plan import run_record
from mntui.sessions.poll import NodeState
from mntui.sessions.procs import TAG_VAR
from mntui.sessions.recover import supervise
from mntui.sessions.recover.restart import AttemptEnd
from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus, load_run
from mntui.sessions.ssh import Cluster
from mntui.sessions.watch import user_kills

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


def supervisor(cfg: JobConfig, rec: RunRecord, said: list[str]) -> supervise.Supervisor:
    reloaded = load_run(rec.job, rec.run_id)
    assert reloaded is not None
    return supervise.Supervisor(cfg, reloaded, on_event=lambda e: said.append(e.message))


def failed_on(node: str, run_id: str, attempt: int = 0) -> AttemptEnd:
    return AttemptEnd(attempt, run_id, NodeState.FAILED, node, (3,), 0.0, f"{node} exited 3")


# -- finding 1: a kill in the seconds between the teardown and the `restarting` mark ------


class Relaunched(Exception):
    pass


def relaunches(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The attempts the supervisor launches: each stops it there (nothing to start)."""
    launched: list[object] = []

    def relaunch(*args: object, **kw: object) -> None:
        launched.append(kw.get("attempt"))
        raise Relaunched

    monkeypatch.setattr(supervise, "launch", relaunch)
    return launched


@pytest.mark.parametrize("ended", [RunStatus.TORN_DOWN, RunStatus.FAILED])
def test_a_kill_between_the_teardown_and_the_restart_mark_ends_the_chain(
    monkeypatch: pytest.MonkeyPatch, ended: RunStatus
) -> None:
    """Finding 1 (high): the watchdog marked the run `torn-down`/`failed`; the user's kill
    found no live run, said "nothing to kill", and the chain relaunched. Now the kill's
    word is on the run and the supervisor ends the chain; the run keeps its ending."""
    cfg = config("ck1", "restart: {max: 3, backoff: 0}\n")
    rec = record("ck1", R0, ("n0", "n1"), ended, chain=R0)
    kill(cfg)
    launched = relaunches(monkeypatch)
    said: list[str] = []
    with contextlib.suppress(Relaunched):
        assert supervisor(cfg, rec, said)._next((failed_on("n1", R0),)) is None
    after = load_run("ck1", R0)
    assert not launched, f"the chain was relaunched after the user's kill: {said}"
    assert after is not None and after.status is ended and after.stopped_by_user
    assert "no restart: the user killed the chain" in said


def test_a_kill_after_a_relaunch_that_did_not_start_ends_the_chain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Finding 1 once finding 5 holds (a kill marks the chain's latest run only): after a
    relaunch that did not start, the aborted attempt is the latest, so the next restart is
    decided on it; decided on the attempt before, the kill would go unseen."""
    cfg = config("ck1b", "restart: {max: 3, backoff: 0}\n")
    first = record("ck1b", R0, ("n0", "n1"), RunStatus.TORN_DOWN, chain=R0, created_at=1.0)
    launches: list[int] = []

    def aborts(cfg_: JobConfig, *, on_event: Any, attempt: start.Attempt) -> None:
        launches.append(attempt.number)
        record("ck1b", R1, ("n0", "n1"), RunStatus.ABORTED, chain=R0, attempt=attempt.number)
        kill(cfg)  # the user, right after the relaunch failed
        raise LaunchError("n1: could not start tmux session")

    monkeypatch.setattr(supervise, "launch", aborts)
    assert supervisor(cfg, first, [])._next((failed_on("n1", R0),)) is None
    assert launches == [1], "relaunched after the user's kill"
    assert [r.status for r in (load_run("ck1b", i) for i in (R0, R1)) if r] == [
        RunStatus.RESTARTING,  # attempt 0 failed for real: history keeps it
        RunStatus.ABORTED,
    ]


def test_a_kill_while_a_relaunch_starts_and_then_fails_ends_the_chain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The review's order: the kill comes while the relaunch connects (no new record yet,
    so it marks the run in its backoff), then the relaunch aborts; deciding on the aborted
    record alone, which has no kill note, restarted again."""
    cfg = config("ck1c", "restart: {max: 3, backoff: 0}\n")
    first = record("ck1c", R0, ("n0", "n1"), RunStatus.TORN_DOWN, chain=R0, created_at=1.0)
    launches: list[int] = []

    def aborts(cfg_: JobConfig, *, on_event: Any, attempt: start.Attempt) -> None:
        launches.append(attempt.number)
        kill(cfg)  # the user, while the relaunch still connects
        rid = f"20260101-00020{attempt.number}-cccc"
        record("ck1c", rid, ("n0", "n1"), RunStatus.ABORTED, chain=R0, attempt=attempt.number)
        raise LaunchError("n0: not ready within 90s")

    monkeypatch.setattr(supervise, "launch", aborts)
    assert supervisor(cfg, first, [])._next((failed_on("n1", R0),)) is None
    assert launches == [1], "relaunched after the user's kill"


# -- finding 2: the supervised attempt runs where the launch put it -----------------------


def routed_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """launch() as it is, route_around included, up to the nodes: the record is made
    from the plan it would start."""

    def planned(
        cfg: JobConfig, cluster: Cluster, on_event: Any, restart: bool, plan: Any, attempt: Any
    ) -> start.LaunchResult:
        r = run_record(plan, cfg.path)
        r.chain, r.attempt, r.status = attempt.chain, attempt.number, RunStatus.RUNNING
        r.create()
        return start.LaunchResult(plan, r, {}, 0.0)

    monkeypatch.setattr(start, "_launch", planned)


@pytest.mark.parametrize("out", ["n1", "n0"])
def test_the_supervised_attempt_watches_the_nodes_it_was_launched_on(
    monkeypatch: pytest.MonkeyPatch, out: str
) -> None:
    """Finding 2 (high): once a quarantine routed spare n2 in, the attempt ran on it but
    its watchdog and teardown used the pre-route nodes (and `record.node(out)` could
    crash the supervisor). A routed-out main hands the master over, as in a swap."""
    quarantine = "quarantine_after: {count: 1, within: 1h, for: 1h}"
    cfg = config("ck2", f"master_addr: 10.9.9.9\nrestart: {{max: 3, backoff: 0, {quarantine}}}\n")
    rec = record("ck2", R0, ("n0", "n1"), RunStatus.TORN_DOWN, chain=R0)
    routed_launch(monkeypatch)
    sup = supervisor(cfg, rec, [])
    quarantines.quarantine_node(out, 3600, "XID 79")  # by the policy, or a user in the backoff
    nxt = sup._next((failed_on(out, R0),))
    assert nxt is not None
    ran_on = [n.node for n in nxt.record.nodes]
    watched = [n.name for n in nxt.cfg.nodes]
    assert ran_on == [n if n != out else "n2" for n in ("n0", "n1")]
    assert watched == ran_on, f"attempt runs on {ran_on} but its watchdog/teardown use {watched}"
    main = next(n.node for n in nxt.record.nodes if n.rank == 0)
    assert nxt.cfg.main == main
    assert nxt.cfg.master_addr == ("10.9.9.9" if out != "n0" else None)


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
    killed, _ = user_kills(attempt1)
    assert killed == [], f"attempt 1 runs on n0,n2 but counts as partly killed: {killed}"
    assert attempt0.killed_nodes == [], "attempt 0 had ended: its failure is not the user's"
    kill(cfg, ["n2"])  # a node the attempt does run on: the user's doing
    assert user_kills(attempt1)[0] == ["n2"]


def test_a_kill_of_a_node_an_older_record_wrote_down_is_not_the_runs() -> None:
    """Finding 6, for records written before the fix: the run's own nodes only."""
    rec = record("ck6b", R1, ("n0", "n2"), RunStatus.RUNNING, killed_nodes=["n1"])
    assert user_kills(rec) == ([], None)


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
    assert user_kills(rec) == ([], None)


def test_a_full_kill_in_the_backoff_still_ends_the_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chain's latest run in its backoff is live: the kill marks it `killed`, and the
    supervisor's wait ends without a relaunch."""
    rec = record("ck8", R0, ("n0", "n1"), RunStatus.RESTARTING, chain=R0)
    kill(config("ck8"))
    assert not supervise.wait_backoff(rec, 5.0)
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
