"""The chaos campaign's checks can fail: each one is shown a deliberate leftover (a
tagged process, a listening port, a session, a live run, a late attempt, a changed
file, a status without the supervisor's line) and must name it, then pass once it is
gone. A checker that cannot fail would make the campaign's zero mean nothing."""

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
    check_no_restart_after,
    check_orphan_line,
    check_port,
    check_processes,
    check_sessions,
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


def _rec(attempt: int, status: RunStatus, created: float) -> RunRecord:
    node = NodeRecord("node0", "127.0.0.1", 0, "s", "t", "d")
    return RunRecord("job", f"20261124-00000{attempt}-abcd", "c.yaml", "127.0.0.1", 1, [node],
                     created_at=created, status=status, attempt=attempt)  # fmt: skip


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
