"""A live report says "ended" only on a poll that proves it (report/ended.py): answers as
the real poll script prints them, read by the real parser, derived by the real rule."""

from __future__ import annotations

from mntui.sessions.poll import NodeSnapshot, NodeState, Verdict, derive, may_still_run
from mntui.sessions.poll.pollstate import PollState, parse_poll
from mntui.sessions.report.ended import proven_ended
from mntui.sessions.runs import NodeRecord

STAT = "S {ppid} 10 10 0 -1 4194304 0 0 0 0 100 50 0 0 20 0 1 0 100 1000 2560 0"
TAIL = "@LOAD 0.50 0.40 0.30 1/100 99\n@PORTS\n@NOSMI\n@LOGSTAT 29 995\n@END\n"
HEAD = "@NOW 1000.0\n@SYS 100 4096 8\n@UP 500.0\n"  # a fresh poller's first poll

# tmux has forked the pane (pid 4242) and its shell has not yet run
# `exec env MNTUI_RUN=... bash ./launch.sh`: no process carries the tag.
STARTING = HEAD + "@PANE 0 4242 \n" + TAIL
RUNNING = HEAD + "@PANE 0 4242 \n" + f"@P 4242 {STAT.format(ppid=1)}\n" + TAIL
FAILED = HEAD + "@PANE 1 4242 3\n@EXIT 3\n" + TAIL
FINISHED = HEAD + "@PANE 1 4242 0\n@EXIT 0\n" + TAIL
GONE = HEAD + "@PANE   \n" + TAIL  # no session, no process (tmux 3.3's empty fields)
# A tagged process whose name held a newline: its stat line is no stat line (lib.sh:
# alive, unreadable), skipped and counted; nothing else of the job was seen.
UNREADABLE = HEAD + "@PANE   \n@P 4242 ) S 1 2\n" + TAIL


def _seen(**answers: str | None) -> tuple[dict[str, NodeSnapshot], dict[str, Verdict]]:
    """node -> its answer (None: it did not answer within the round)."""
    snaps = {}
    for rank, (node, out) in enumerate(answers.items()):
        rec = NodeRecord(node, "h", rank, f"j-{node}", f"j/r/{node}", f".mntui/runs/j/r/{node}")
        if out is None:
            snaps[node] = NodeSnapshot(node, rank, 0.0, reachable=False, error="no answer")
        else:
            snaps[node] = parse_poll(rec, out, PollState(), 0.01)
    return snaps, {n: derive(s, 300) for n, s in snaps.items()}


def test_a_node_just_started_is_no_end() -> None:
    """The report once said "ended" of a run whose nodes had just started: one poll saw
    live panes and no tagged process yet, and nothing may run, per may_still_run."""
    snaps, verdicts = _seen(node0=STARTING, node1=STARTING)
    assert {v.state for v in verdicts.values()} == {NodeState.NOT_RUNNING}
    assert not may_still_run(v.state for v in verdicts.values())  # the one-poll rule's "ended"
    assert not proven_ended(snaps, verdicts)
    snaps, verdicts = _seen(node0=FINISHED, node1=STARTING)
    assert not proven_ended(snaps, verdicts)


def test_a_silent_or_unreadable_node_is_no_end() -> None:
    """A node slow to answer (a first connection on a loaded machine) beside one that
    finished, and an answer with a line that could not be read, prove nothing."""
    snaps, verdicts = _seen(node0=FINISHED, node1=None)
    assert not may_still_run(v.state for v in verdicts.values())
    assert not proven_ended(snaps, verdicts)
    snaps, verdicts = _seen(node0=UNREADABLE, node1=GONE)
    assert snaps["node0"].malformed == 1 and verdicts["node0"].state is NodeState.NOT_RUNNING
    assert not may_still_run(v.state for v in verdicts.values())
    assert not proven_ended(snaps, verdicts)
    assert not proven_ended({}, {})


def test_an_end_seen_on_every_node_is_an_end() -> None:
    snaps, verdicts = _seen(node0=FAILED, node1=FINISHED, node2=GONE)
    assert [v.state for v in verdicts.values()] == [
        NodeState.FAILED,
        NodeState.FINISHED,
        NodeState.NOT_RUNNING,
    ]
    assert proven_ended(snaps, verdicts)
    snaps, verdicts = _seen(node0=FAILED, node1=RUNNING)
    assert verdicts["node1"].state is NodeState.RUNNING and not proven_ended(snaps, verdicts)
