"""The first failure of an attempt (node/rules/firstfail.py): which node broke first and why,
read from each node's log and exit code, as the coordinator names it when it decides
and the report names it later. Logs are recorded real ones (tests/data/logs, each with
its source)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from mntui.sessions.node.rules import firstfail
from mntui.sessions.node.rules.firstfail import NodeCause, first_failure, from_wire, node_cause
from mntui.sessions.node.rules.logrules import Cause

LOGS = Path(__file__).parent.parent / "data" / "logs"


def run_dir(tmp: Path, name: str, log: str, code: int | None, at: float) -> str:
    d = tmp / name
    d.mkdir()
    (d / "output.log").write_text((LOGS / f"{log}.log").read_text())
    if code is not None:
        (d / "exit_code").write_text(f"{code}\n")
        os.utime(d / "exit_code", (at, at))
    return str(d)


def test_the_node_that_raised_is_first_though_the_other_exited_sooner(tmp_path: Path) -> None:
    """The main's rank fails on its closed gloo socket half a second before the worker's
    torchrun exits: the worker's own exception is the cause, the main's a consequence."""
    t = time.time()
    main = node_cause(run_dir(tmp_path, "n0", "gloo_connection_closed", 1, t), "n0", 0)
    worker = node_cause(run_dir(tmp_path, "n1", "python_exception", 1, t + 0.5), "n1", 1)
    assert main.secondary and main.cause is Cause.GLOO_CONNECTION
    assert not worker.secondary and worker.cause is Cause.TRACEBACK
    assert worker.at == pytest.approx(t + 0.5, abs=0.01)
    first = first_failure([main, worker], decided="n0")
    assert first is not None and first.node == "n1" and "KeyError" in first.why


def test_a_rank_killed_by_a_signal_is_named_by_the_signal(tmp_path: Path) -> None:
    c = node_cause(run_dir(tmp_path, "n0", "childfailed_sigkill", 1, time.time()), "n0", 0)
    assert c.cause is Cause.SIGNAL and "SIGKILL" in c.why, c
    assert c.exit_code == 1 and c.rank == 0
    bare = NodeCause("n0", 0, None, -9, None, None, None)
    assert bare.why == "exit code -9 (SIGKILL)"  # no log line: torchrun's code, by name


def test_with_no_primary_error_the_earliest_trouble_then_the_judges_node() -> None:
    a = NodeCause("a", 0, 20.0, 1, None, Cause.GLOO_CONNECTION, "gloo", secondary=True)
    b = NodeCause("b", 1, 10.0, 1, None, None, None)
    assert first_failure([a, b], decided="a") == b
    quiet = [NodeCause("a", 0, None, None, None, None, None)]
    assert first_failure(quiet, decided="a") == quiet[0]
    assert first_failure(quiet, decided=None) is None
    tie = [NodeCause("b", 1, 5.0, 1, None, None, "x"), NodeCause("a", 0, 5.0, 1, None, None, "y")]
    assert first_failure(tie, decided=None) == tie[1]  # the lower node rank


def test_a_node_that_finished_first_is_no_failure() -> None:
    """The main ran its last step and exited 0; its peer failed a moment after (exit 3,
    no error line): the peer broke first, not the main for exiting sooner."""
    done = NodeCause("main", 0, 10.0, 0, None, None, None)
    broke = NodeCause("worker", 1, 11.0, 3, None, None, None)
    assert not done.troubled and broke.troubled
    assert first_failure([done, broke], decided=None) == broke
    assert first_failure([done], decided=None) is None


def test_what_a_sentinel_sends_is_read_strictly() -> None:
    good = NodeCause("n1", 1, 1.5, 1, 3, Cause.CUDA_OOM, "CUDA out of memory").to_wire()
    assert from_wire("n1", 1, good, None) == NodeCause(
        "n1", 1, 1.5, 1, 3, Cause.CUDA_OOM, "CUDA out of memory"
    )
    for bad in (
        {**good, "at": float("nan")},
        {**good, "rank": -1},
        {**good, "exit_code": "1"},
        {**good, "cause": "made-up"},
        {**good, "summary": "x" * 5000},
        {**good, "secondary": 1},
        ["not", "a", "dict"],
    ):
        assert from_wire("n1", 1, bad, None) is None, bad
    hostile = {**good, "summary": "\x1b]52;c;AAAA\x07boom\r\n\x1b[2Jagain"}
    said = from_wire("n1", 1, hostile, None)
    assert said is not None and said.summary == "boom again", said
    assert from_wire("n1", 1, {**good, "at": None}, 7.0).at == 7.0  # type: ignore[union-attr]


def test_a_kept_first_failure_reads_back_only_for_the_attempts_nodes() -> None:
    kept = firstfail.plain(NodeCause("n1", 1, 1.0, 1, 1, Cause.TRACEBACK, "KeyError: 'x'"))
    assert kept["why"] == "KeyError: 'x'" and kept["node"] == "n1"
    assert firstfail.read(kept, {"n0": 0, "n1": 1}) == NodeCause(
        "n1", 1, 1.0, 1, 1, Cause.TRACEBACK, "KeyError: 'x'"
    )
    assert firstfail.read(kept, {"n0": 0}) is None
    assert firstfail.read({**kept, "node": ""}) is None
    assert firstfail.read("n1") is None


def test_a_fifo_for_a_log_blocks_nothing(tmp_path: Path) -> None:
    """The job (the same user) can put a FIFO where the log is: read, it would block
    the sentinel's kill report for ever."""
    d = tmp_path / "n0"
    d.mkdir()
    os.mkfifo(d / "output.log")
    os.mkfifo(d / "exit_code")
    t0 = time.monotonic()
    c = node_cause(str(d), "n0", 0)
    assert time.monotonic() - t0 < 1.0
    assert c == NodeCause("n0", 0, None, None, None, None, None)
