"""The chaos campaign's checks can fail: each one is shown a deliberate leftover (a
tagged process, a listening port, a session, a live run, a late attempt, a changed
file, a status without the supervisor's line, a restart decided after a user's kill, a
teardown that killed on a quarantined node instead of the spare, an attempt on a
quarantined node, a run's process left on the spare) and must name it, then pass once it
is gone. A checker that cannot fail would make the campaign's zero mean nothing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakecluster import free_port, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from chaos_checks import (
    check_chain,
    check_files,
    check_kill_recorded,
    check_no_restart_after,
    check_no_restart_after_kill,
    check_orphan_line,
    check_port,
    check_processes,
    check_quarantined_out,
    check_run_processes,
    check_sessions,
    check_teardown_nodes,
    snapshot_tree,
)

from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus


def test_a_leftover_tagged_process_is_a_violation_on_its_node() -> None:
    job = f"chk{os.getpid()}"
    env = {**os.environ, "MNTUI_RUN": f"{job}/20261124-000000-abcd/node1"}
    proc = subprocess.Popen(["sleep", "60"], env=env)
    try:
        wait_for(lambda: check_processes(job, ["node1"]), 10, what="the leftover seen")
        (v,) = check_processes(job, ["node0", "node1", "node2"])
        assert v.invariant == "processes" and v.node == "node1"
        assert str(proc.pid) in v.detail and "sleep 60" in v.detail
        assert check_processes(f"{job}x", ["node1"]) == []  # another job's tag is not ours
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert check_processes(job, ["node0", "node1", "node2"]) == []


def test_a_listening_port_and_a_left_session_are_violations() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        (v,) = check_port(port)
        assert v.invariant == "ports" and str(port) in v.detail
    assert check_port(port) == []
    (v,) = check_sessions({"node0": [], "node1": ["job-node1"]})
    assert (v.invariant, v.node) == ("sessions", "node1") and "job-node1" in v.detail
    assert check_sessions({"node0": [], "node1": []}) == []


def _rec(
    attempt: int, status: RunStatus, created: float, nodes: tuple[str, ...] = ("node0",)
) -> RunRecord:
    recs = [NodeRecord(n, "127.0.0.1", i, "s", "t", "d") for i, n in enumerate(nodes)]
    return RunRecord("job", f"20261124-00000{attempt}-abcd", "c.yaml", "127.0.0.1", 1, recs,
                     created_at=created, status=status, attempt=attempt)  # fmt: skip


def test_a_leftover_of_one_run_is_named_on_its_node_and_not_for_another_run() -> None:
    """After an attempt's teardown nothing of that attempt is left, the spare included;
    a later attempt's processes are not its leftovers."""
    job, run = f"chk{os.getpid()}", "20261124-000001-abcd"
    env = {**os.environ, "MNTUI_RUN": f"{job}/{run}/node2"}
    proc = subprocess.Popen(["sleep", "60"], env=env)
    try:
        wait_for(lambda: check_run_processes(job, run, ["node2"]), 10, what="the leftover seen")
        (v,) = check_run_processes(job, run, ["node0", "node1", "node2"])
        assert (v.invariant, v.node) == ("processes", "node2") and str(proc.pid) in v.detail
        assert run in v.detail
        assert check_run_processes(job, "20261124-000002-abcd", ["node2"]) == []
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert check_run_processes(job, run, ["node0", "node1", "node2"]) == []


def _torn(rec: RunRecord, killed_on: list[str]) -> RunRecord:
    rec.note("watchdog-teardown", node="node2", results=dict.fromkeys(killed_on, "clean"))
    return rec


def test_a_teardown_that_killed_on_the_quarantined_node_instead_of_the_spare() -> None:
    """Attempt 1 runs on node0 and the spare node2 (node1 is quarantined): its teardown
    must have killed on node0 and node2, not on node1."""
    ran = ("node0", "node2")
    (missing, extra) = check_teardown_nodes(_torn(_rec(1, RunStatus.TORN_DOWN, 1.0, ran),
                                                  ["node0", "node1"]))  # fmt: skip
    assert (missing.invariant, missing.node) == ("teardown", "node2")
    assert "never killed on it" in missing.detail and "node0,node1" in missing.detail
    assert (extra.invariant, extra.node) == ("teardown", "node1")
    assert check_teardown_nodes(_torn(_rec(1, RunStatus.TORN_DOWN, 1.0, ran), list(ran))) == []
    assert check_teardown_nodes(_rec(1, RunStatus.TORN_DOWN, 1.0, ran)) == []  # no teardown


def test_an_attempt_created_after_a_quarantine_must_not_run_on_the_node() -> None:
    on_it = _rec(1, RunStatus.RUNNING, 10.0, ("node0", "node1"))
    (v,) = check_quarantined_out(on_it, {"node1": 8.0})
    assert (v.invariant, v.node) == ("quarantine", "node1") and "2.0s after" in v.detail
    assert check_quarantined_out(on_it, {"node1": 11.0}) == []  # quarantined after its launch
    assert check_quarantined_out(_rec(1, RunStatus.RUNNING, 10.0, ("node0", "node2")),
                                 {"node1": 8.0}) == []  # fmt: skip


def _kill_note(rec: RunRecord, at: float) -> RunRecord:
    rec.history.append({"at": at, "what": "kill", "by": "user"})
    return rec


def test_a_restart_decided_or_started_after_a_users_kill_is_a_violation() -> None:
    """The kill landed between the teardown (attempt 0 torn down) and the supervisor's
    `restarting` mark: the mark must not come after the kill's note, nor a new attempt."""
    first = _kill_note(_rec(0, RunStatus.RESTARTING, 1.0), 5.0)
    first.history.append({"at": 5.2, "what": "restart", "attempt": 1})
    relaunched = _rec(1, RunStatus.RUNNING, 9.5)
    found = check_no_restart_after_kill([first, relaunched])
    assert [v.invariant for v in found] == ["restart", "restart"]
    assert "marked `restarting` 0.20s after the user's kill" in found[0].detail
    assert "created 4.50s after the user's kill, and running" in found[1].detail
    # the mark before the kill (the kill then lands in the backoff), and a relaunch caught
    # mid-start and killed: the user's word held
    held = _kill_note(_rec(0, RunStatus.KILLED, 1.0), 5.0)
    held.history.insert(0, {"at": 4.9, "what": "restart", "attempt": 1})
    assert check_no_restart_after_kill([held, _rec(1, RunStatus.KILLED, 5.1)]) == []
    assert check_no_restart_after_kill([_rec(0, RunStatus.TORN_DOWN, 1.0)]) == []  # no kill
    # a partial kill (`mntui kill node1`) is not the chain's end
    partial = _rec(0, RunStatus.RESTARTING, 1.0)
    partial.history += [{"at": 5.0, "what": "kill", "by": "user", "nodes": ["node1"]},
                        {"at": 6.0, "what": "restart", "attempt": 1}]  # fmt: skip
    assert check_no_restart_after_kill([partial]) == []


def test_a_users_kill_that_left_no_mark_on_the_chain_is_a_violation() -> None:
    torn = _rec(0, RunStatus.TORN_DOWN, 1.0)
    (v,) = check_kill_recorded([torn], 4.0)
    assert v.invariant == "kill" and "attempt 0 torn-down" in v.detail
    assert check_kill_recorded([_kill_note(_rec(0, RunStatus.TORN_DOWN, 1.0), 4.1)], 4.0) == []
    assert check_kill_recorded([_rec(0, RunStatus.KILLED, 1.0)], 4.0) == []
    (v,) = check_kill_recorded([_kill_note(_rec(0, RunStatus.TORN_DOWN, 1.0), 3.0)], 4.0)
    assert v.invariant == "kill"  # an earlier kill's note is not this one's


def test_a_chain_is_ended_only_when_its_last_attempt_is_terminal() -> None:
    ended = [_rec(0, RunStatus.RESTARTING, 1.0), _rec(1, RunStatus.KILLED, 2.0)]
    assert check_chain(ended) == []
    (v,) = check_chain([_rec(0, RunStatus.RESTARTING, 1.0), _rec(1, RunStatus.RUNNING, 2.0)])
    assert v.invariant == "chain" and "(attempt 1) is running" in v.detail
    (v,) = check_chain([_rec(0, RunStatus.RESTARTING, 1.0)])  # a backoff nobody finishes
    assert "restarting" in v.detail
    assert [v.invariant for v in check_chain([])] == ["chain"]
    (v,) = check_no_restart_after(ended, 1.5, "the kill")
    assert v.invariant == "restart" and "attempt 1" in v.detail
    assert check_no_restart_after(ended, 2.5, "the kill") == []


def test_status_must_say_the_supervisor_died() -> None:
    table = (
        "job x  run 20261124-000000-abcd  (running)\nNODE  STATE\nnode1  orphaned  launcher gone"
    )
    (v,) = check_orphan_line(table)  # a node's `orphaned` state is not the supervisor's line
    assert v.invariant == "orphan-line"
    said = table + "\nsupervisor pid 123 died at 12:00:01: `mntui watch` resumes, `mntui kill` ends"
    assert check_orphan_line(said) == []


@pytest.mark.parametrize("change", ["add", "remove", "modify"])
def test_a_file_changed_in_the_home_is_a_violation_but_not_under_mntui(
    tmp_path: Path, change: str
) -> None:
    home = tmp_path / "home"
    (home / ".mntui" / "runs").mkdir(parents=True)
    (home / "proj").mkdir()
    (home / ".bashrc").write_text("x\n")
    (home / "proj" / "a.py").write_text("a\n")
    before = snapshot_tree(home)
    (home / ".mntui" / "runs" / "log").write_text("ours\n")
    assert check_files("node0", before, snapshot_tree(home)) == []
    target = home / "proj" / "a.py"
    if change == "add":
        (home / ".cache").mkdir()
    elif change == "remove":
        target.unlink()
    else:
        time.sleep(0.01)  # a later mtime, same size
        target.write_text("b\n")
    (v,) = check_files("node0", before, snapshot_tree(home))
    assert v.invariant == "files" and v.node == "node0"
    assert (".cache" if change == "add" else "proj/a.py") in v.detail
