"""The failure report's pure parts: parsing what nodes sent (strictly: it is data),
choosing the root cause, and the words a person reads first."""

from __future__ import annotations

import base64
import json

import pytest

from mntui.sessions.node.rules.firstfail import exit_text
from mntui.sessions.poll import NodeState
from mntui.sessions.report.evidence import flight_recorder_prefix, parse_evidence
from mntui.sessions.report.failure import (
    Change,
    Ending,
    build,
    killed_at,
    render,
    summarize_node,
)
from mntui.sessions.report.stacks import parse_capture


def b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


PYSPY = json.dumps([
    {"thread_name": "pt_elastic", "frames": [{"name": "sleep", "filename": "x.py", "line": 1}]},
    {
        "thread_name": "MainThread",
        "frames": [
            {"name": "all_reduce", "filename": "/v/site-packages/torch/distributed/c10d.py", "line": 9},
            {"name": "wrapper", "filename": "/v/site-packages/torch/distributed/log.py", "line": 83},
            {"name": "main", "filename": "/w/train.py", "line": 41},
        ],
    },
])  # fmt: skip


def test_stacks_are_parsed_strictly_and_summarized() -> None:
    out = "\n".join([
        "@N1RANK 10 0 S",
        "@N1RANK 11 1 T",
        "@N1RANK 12 2 R",
        f"@N1STACK 10 0 {b64(PYSPY)} ",
        f"@N1STACK 11 1  {b64('Error: Permission denied (os error 13)')}",
        "@N1STACK 12 124  ",
        "@N1STACK 13 0 not-base64!! x",  # forged/garbled: skipped and counted
        "@N2RANK 999999 0 T",  # a record of another capture: not this nonce
        "@XXRANK 14 5 T",
        "welcome to the node",
    ])  # fmt: skip
    got = parse_capture("g1", out, "N1")
    assert [s.rank for s in got.stacks] == [0, 1, 2] and got.malformed == 1
    s0, s1, s2 = got.stacks
    assert s0.summary == "waiting in `all_reduce` (train.py:41)"
    assert s1.summary.startswith("stopped (state T); no stack: ptrace not permitted")
    assert "time budget" in s2.summary
    assert parse_capture("g1", "@N1NOSPY", "N1").missing is not None


def test_evidence_is_parsed_strictly() -> None:
    log = "step 1\n[rank1]: Traceback (most recent call last):\n" + "\x00\xff" * 3
    out = "\n".join([
        "@E1EXIT 137 1795349622.933",
        f"@E1LOG {b64(log)}",
        f"@E1KERNEL {b64('[12.3] Out of memory: Killed process 4242 (python3)')}",
        f"@E1FR {b64('nccl_trace_rank_1')} {b64(b'dump')}",
        f"@E1FR {b64('../../.ssh/authorized_keys')} {b64(b'x')}",  # never a path
        "@E1EXIT 1; rm -rf / 5",
        "@E1LOG %%%",
    ])  # fmt: skip
    ev = parse_evidence("g1", out, "E1")
    assert ev.exit_code == 137 and ev.exited_at == 1795349622.933
    assert ev.lines[0] == "step 1" and ev.kernel == (
        "[12.3] Out of memory: Killed process 4242 (python3)",
    )
    assert ev.flight_records == {"nccl_trace_rank_1": b"dump"} and ev.malformed == 3
    assert (
        flight_recorder_prefix({"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}) == "/tmp/nccl_trace_rank_"
    )
    assert flight_recorder_prefix({"TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}) is None
    assert flight_recorder_prefix({
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "1", "TORCH_FR_DUMP_TEMP_FILE": "/scratch/fr_"
    }) == "/scratch/fr_"  # fmt: skip


def test_exit_codes_name_their_signals() -> None:
    assert exit_text(139) == "exit code 139 (SIGSEGV)"
    assert exit_text(-9) == "exit code -9 (SIGKILL)"
    assert exit_text(3) == "exit code 3"
    assert exit_text(255) == "exit code 255"


OOM = [
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "/w/train.py", line 88, in <module>',
    "[rank1]:     step()",
    "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
]
TIMEOUT = [
    "[rank0]:[E1122 03:12:09.1 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600081 milliseconds before timing out.",
]


def _evidence(lines: list[str], code: int | None, at: float | None) -> str:
    head = [f"@E1EXIT {code} {at}"] if code is not None else []
    return "\n".join([*head, f"@E1LOG {b64(chr(10).join(lines))}"])


def test_root_cause_is_the_earliest_primary_error_and_the_rest_are_consequences() -> None:
    # node0 noticed first (its poll came first) but only timed out; node1 ran out of memory.
    changes = [
        Change("g369", NodeState.FAILED, "exit code 1", 1000.0),
        Change("g375", NodeState.FAILED, "exit code 1", 1001.0),
    ]
    e0 = parse_evidence("g369", _evidence(TIMEOUT, 1, 999.5), "E1")
    e1 = parse_evidence("g375", _evidence(OOM, 1, 1000.9), "E1")
    nodes = [
        summarize_node("g369", 0, NodeState.FAILED, changes, e0, None, 0.0),
        summarize_node("g375", 1, NodeState.FAILED, changes, e1, None, 0.5),  # clock ahead
    ]
    # It exited at 1000.9 by its own clock, which runs 0.5 s ahead: 1000.4 by ours,
    # before the poll that saw it (1001.0).
    assert nodes[1].first_problem_at == pytest.approx(1000.4)
    rep = build(
        "j", "r", nodes, changes, trigger=("g369", NodeState.FAILED, "exit code 1"),
        ended_at=1002.7, ending=Ending.TORN_DOWN,
    )  # fmt: skip
    assert rep.cause_node == "g375"
    assert rep.headline.startswith("g375 rank 1 failed first at ")
    assert "CUDA out of memory" in rep.headline and rep.headline.endswith(
        "g369 torn down 2.3 s later"
    )
    assert rep.consequences and rep.consequences[0].startswith("g369 (node rank 0): ")
    assert rep.consequences[0].endswith("a consequence")
    text = render(rep)
    assert text.splitlines()[0] == rep.headline
    assert "| [rank1]: torch.OutOfMemoryError" in text


def test_a_report_written_while_the_kill_runs_gets_the_kills_end_after_it() -> None:
    # The teardown writes the report as soon as the evidence is in, the kill still running;
    # the kill's end then completes the headline, and it matches a report built after it.
    changes = [Change("g375", NodeState.FROZEN, "stopped: pid 7", 1000.0)]
    nodes = [
        summarize_node("g369", 0, NodeState.RUNNING, changes, None, None, None),
        summarize_node("g375", 1, NodeState.FROZEN, changes, None, None, None),
    ]
    trigger = ("g375", NodeState.FROZEN, "stopped: pid 7")
    early = build("j", "r", nodes, changes, trigger=trigger, ended_at=None, ending=Ending.TORN_DOWN)
    assert early.ended_at is None and "torn down" not in early.headline
    done = killed_at(early, 1003.25)
    after = build(
        "j", "r", nodes, changes, trigger=trigger, ended_at=1003.25, ending=Ending.TORN_DOWN
    )
    assert done == after and done.headline.endswith("g369 torn down 3.2 s later")
    assert killed_at(done, 2000.0) == done  # the first end stands
    live = build("j", "r", nodes, changes, trigger=None, ended_at=None, ending=Ending.LIVE)
    assert killed_at(live, 5.0).headline == live.headline


def test_no_primary_error_falls_back_to_the_earliest_problem_and_live_reports_say_so() -> None:
    changes = [Change("a", NodeState.FROZEN, "stopped: pid 7", 50.0)]
    nodes = [
        summarize_node("a", 0, NodeState.FROZEN, changes, None, None, None),
        summarize_node("b", 1, NodeState.RUNNING, changes, None, None, None),
    ]
    rep = build("j", "r", nodes, changes, trigger=None, ended_at=None, ending=Ending.LIVE)
    assert rep.cause_node == "a" and rep.headline.startswith("a (node rank 0) froze first")
    quiet = [summarize_node("b", 1, NodeState.RUNNING, [], None, None, None)]
    assert build("j", "r", quiet, [], trigger=None, ended_at=None, ending=Ending.LIVE).headline == (
        "no node has a problem yet"
    )


def test_a_saved_reports_progress_is_the_steps_the_coordinator_journaled() -> None:
    """Where the ranks stood at the end, from the journal's `steps` lines of that attempt
    only (a later attempt's are not its): the line a poll's tracker would have said."""
    from mntui.sessions.report.endreport import progress_of

    def steps(t: float, **at: int) -> dict[str, object]:
        return {"t": t, "kind": "steps", "node": None, "data": {"steps": at}}

    journal = [
        steps(100.0, a=1, b=1),
        steps(105.0, a=40, b=40),
        steps(110.0, a=41, b=40),  # b stopped at 40
        steps(115.0, a=41, b=40),
        {"t": 130.0, "kind": "attempt", "node": None, "data": {"run": "r2"}},
        steps(135.0, a=2, b=2),
    ]
    ranks = {"a": 0, "b": 1}
    assert (
        progress_of(journal, "r1", ranks, 129.0) == "rank 1 stopped at step 40; rank 0 reached 41"
    )
    assert progress_of(journal, "r2", ranks, 136.0) == "ranks 0-1 at step 2"
    assert progress_of([], "r1", ranks, None) == ""
