"""The chaos campaign's checks can fail: each one is shown a deliberate leftover (a
tagged process, a listening port, a session, a live run, a late attempt, a changed
file, a status without the supervisor's line, a restart decided after a user's kill, a
teardown that killed on a quarantined node instead of the spare, an attempt on a
quarantined node, a run's process left on the spare; for the watch on the cluster: a
sentinel left, a teardown with no fault of the job, a decision naming another node or too
early, a sentinel that gave up early, a job that did not train on, a status that does not
say torn-down) and must name it, then pass once it is gone. A checker that cannot fail would make the campaign's zero mean nothing."""

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
    check_account,
    check_chain,
    check_decision,
    check_files,
    check_kill_recorded,
    check_lost,
    check_no_decision,
    check_no_restart_after,
    check_no_restart_after_kill,
    check_orphan_line,
    check_port,
    check_processes,
    check_quarantined_out,
    check_run_processes,
    check_sessions,
    check_status_torn_down,
    check_steps_advanced,
    check_teardown_nodes,
    check_watchers,
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


# -- the watch on the cluster (issue 30) ----------------------------------------------------


def test_a_left_sentinel_is_a_violation_that_the_ranks_check_does_not_see() -> None:
    """A sentinel's tag has a fourth part (`.../node1/sentinel`): `check_processes` (the
    job's ranks) never matches it, so the watchers have their own check."""
    job = f"chk{os.getpid()}"
    env = {**os.environ, "MNTUI_RUN": f"{job}/20261124-000000-abcd/node1/sentinel"}
    proc = subprocess.Popen(["sleep", "60"], env=env)
    try:
        wait_for(lambda: check_watchers(job, ["node1"]), 10, what="the sentinel seen")
        (v,) = check_watchers(job, ["node0", "node1"])
        assert (v.invariant, v.node) == ("watchers", "node1") and str(proc.pid) in v.detail
        assert check_processes(job, ["node1"]) == []
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert check_watchers(job, ["node0", "node1"]) == []


def _decision(
    node: str = "node1", state: str = "failed", by: str = "coordinator"
) -> dict[str, object]:
    return {"decided_by": by, "node": node, "state": state, "why": "exit code 1",
            "decided_at": 100.0, "kill": {}, "ended_at": 101.0}  # fmt: skip


def test_a_teardown_without_a_fault_of_the_job_is_a_violation() -> None:
    (v,) = check_no_decision(_decision(state="unreachable"), "a partition of the manager")
    assert (v.invariant, v.node) == ("decision", "node1") and "touched no rank" in v.detail
    assert check_no_decision(None, "x") == []
    assert check_no_decision(_decision(by="user"), "x") == []  # the user's kill
    assert check_no_decision({"ended": {"node0": "finished"}, "ended_at": 1.0}, "x") == []


def test_a_decision_must_name_the_injected_node_and_state_and_be_complete() -> None:
    assert check_decision(_decision(), "node1", ("failed", "orphaned")) == []
    (v,) = check_decision(None, "node1", ("frozen",))
    assert v.invariant == "decision" and "no decision.json" in v.detail
    (v,) = check_decision(_decision(node="node0"), "node1", ("failed",))
    assert "naming node0 failed, not node1 failed" in v.detail
    (v,) = check_decision(_decision(state="stalled"), "node1", ("frozen",))
    assert "not node1 frozen" in v.detail
    (v,) = check_decision({"ended": {"node0": "failed", "node1": "failed"}}, "node1", ("failed",))
    assert "end by itself" in v.detail
    half = {k: x for k, x in _decision().items() if k != "ended_at"}
    (v,) = check_decision(half, "node1", ("failed",))
    assert "never finished" in v.detail
    (v,) = check_decision(_decision(state="unreachable"), "node1", ("unreachable",), 3.0, 4.5)
    assert "3.0s after the fault, before 4.5s" in v.detail
    assert check_decision(_decision(state="unreachable"), "node1", ("unreachable",), 5.2, 4.5) == []


def test_a_sentinel_that_gave_up_early_or_said_nothing_is_a_violation() -> None:
    ok = {"lost_at": 106.0, "why": "no word from the coordinator"}
    assert check_lost({"node0": ok, "node1": ok}, 100.0, 4.5) == []
    missing, early = check_lost(
        {"node0": None, "node1": {"lost_at": 102.0, "why": "x"}}, 100.0, 4.5
    )
    assert (missing.invariant, missing.node) == (
        "lost",
        "node0",
    ) and "no lost.json" in missing.detail
    assert (early.invariant, early.node) == ("lost", "node1") and "before 4.5s" in early.detail


def test_a_job_that_did_not_train_on_through_the_partition_is_a_violation() -> None:
    (v,) = check_steps_advanced({"node0": 10, "node1": 10}, {"node0": 40, "node1": 12}, 10)
    assert (v.invariant, v.node) == ("steps", "node1") and "2 step(s)" in v.detail
    assert check_steps_advanced({"node0": 10}, {"node0": 20}, 10) == []


def test_status_must_say_torn_down_naming_the_node() -> None:
    said = ("job x  run 20261125-000000-abcd  (torn-down)\n"
            "the coordinator tore the job down at 21:50:43: node1 failed: exit code 1\n")  # fmt: skip
    assert check_status_torn_down(said, "node1") == []
    (v,) = check_status_torn_down(said, "node0")
    assert (v.invariant, v.node) == ("status", "node0")
    (v,) = check_status_torn_down(said.replace("(torn-down)", "(running)"), "node1")
    assert v.invariant == "status"
    assert check_status_torn_down("job x (running)\nwatch: the cluster", "node1")


def test_the_coordinators_port_is_named_as_such() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        (v,) = check_port(port, "coordinator port")
        assert v.detail == f"coordinator port {port} still listening"


def test_the_account_check_names_each_mismatch_with_the_journal() -> None:
    """Issue 37: the kill must name the coordinator's last attempt's nodes, history count
    its failures, each failed attempt have a saved report naming its first failure."""
    end = {"state": "failed", "culprit": "n1"}
    chain = {"attempts": [
        {"attempt": 0, "run": "r0", "nodes": ["n0", "n1"], "end": end, "first": {"node": "n1"}},
        {"attempt": 1, "run": "r1", "nodes": ["n0", "n2"]},
    ]}  # fmt: skip
    kill = "+  0.40s n0[0]            killed     4 process(es)\n+  0.41s n2[1]  killed  2\n"
    assert check_account(chain, kill, True, 1, {"r0": "n1"}) == []
    found = check_account(chain, kill.replace("n2[1]", "n1[1]"), True, 1, {"r0": "n1"})
    assert [v.invariant for v in found] == ["account"] and "n2" in found[0].detail
    assert "counts 0 failure" in check_account(chain, kill, True, 0, {"r0": "n1"})[0].detail
    assert "no saved report" in check_account(chain, kill, True, 1, {"r0": None})[0].detail
    wrong = check_account(chain, kill, True, 1, {"r0": "n0"})
    assert wrong and "names n0" in wrong[0].detail
    assert check_account(None, kill, True, 1, {})[0].invariant == "account"
    assert check_account(chain, "", False, 1, {"r0": "n1"}) == []  # no answer: direct kill
