"""The judge's schedule (node/rules/judging.py, the coordinator's): a look just after a deadline,
never a decision on stale data."""

from __future__ import annotations

import pytest
from snaps import judge_of
from snaps import snap as base_snap

from mntui.sessions.config import Action, WatchPolicy
from mntui.sessions.node.rules.judging import MIN_GAP, WAKE_MARGIN, Deadline, Judge, next_poll
from mntui.sessions.poll import NodeState
from mntui.sessions.poll.snapshot import JobProc, NodeSnapshot

RUNNING = (JobProc(10, 1, "S", None, 1.0, "x"), JobProc(11, 10, "S", None, 1.0, "x"))


def snap(node: str, **kw: object) -> NodeSnapshot:
    """A node running two processes, unless `kw` says otherwise."""
    return base_snap(node, **{"procs": RUNNING, **kw})


HEALTHY = snap("b")
FROZEN = {"a": snap("a", procs=(JobProc(10, 1, "T", None, 1.0, "x"),)), "b": HEALTHY}
GONE = {"a": snap("a", reachable=False, error="no answer"), "b": HEALTHY}


def due(j: Judge, snaps: dict[str, NodeSnapshot], now: float) -> tuple[Deadline, ...]:
    """The deadlines of node a (b's stall deadline is 300 s away)."""
    return tuple(d for d in j.deadlines(snaps, j.verdicts(snaps), now) if d.node == "a")


@pytest.mark.parametrize(
    "last, interval, deadlines, wake",
    [
        (10.0, 1.0, [], 11.0),  # nothing due: the regular tick
        (10.0, 1.0, [10.4], 10.4 + WAKE_MARGIN),  # due before the tick: just after it
        (10.0, 1.0, [12.0, 10.6, 10.5], 10.5 + WAKE_MARGIN),  # the earliest
        (10.0, 1.0, [10.98], 11.03),  # just after the tick: the tick waits, one round for both
        (10.0, 1.0, [11.15], 11.2),
        (10.0, 1.0, [11.3], 11.0),  # due later: the regular cadence
        (10.0, 1.0, [30.0], 11.0),
        (10.0, 1.0, [9.0], 10.0 + MIN_GAP),  # already due: at once, but never a spin
        (10.0, 0.05, [9.0], 10.05),  # an interval below the gap keeps its own pace
        (10.0, 5.0, [11.0], 11.0 + WAKE_MARGIN),
        (10.0, 5.0, [15.4], 15.45),  # within the merge window (capped at MERGE_MAX)
        (10.0, 60.0, [75.0], 70.0),  # a quarter of a long interval is too long to wait
    ],
)
def test_next_poll(last: float, interval: float, deadlines: list[float], wake: float) -> None:
    assert next_poll(last, interval, deadlines) == pytest.approx(wake)


def test_a_freeze_is_decided_by_the_first_poll_asked_after_frozen_after() -> None:
    j = judge_of(WatchPolicy(frozen_after=3, interval=1))
    assert j.judge(FROZEN, 100.0, {"a": 99.9, "b": 99.9})[1] == []  # first seen: 100.0
    assert due(j, FROZEN, 100.0) == (Deadline("a", NodeState.FROZEN, 103.0),)
    # The tick asked at 102.9 answers at 103.2: its evidence may predate the deadline.
    assert j.judge(FROZEN, 103.2, {"a": 102.9, "b": 102.9})[1] == []
    (frozen,) = due(j, FROZEN, 103.2)
    wake = next_poll(102.9, 1.0, [frozen.at])
    assert wake == pytest.approx(103.0 + WAKE_MARGIN)  # not the tick at 103.9
    assert next_poll(101.9, 1.0, [frozen.at]) == pytest.approx(103.0 + WAKE_MARGIN)  # one round
    triggers = j.judge(FROZEN, wake + 0.02, {"a": wake, "b": wake})[1]
    assert [(t.node, t.state, t.action) for t in triggers] == [
        ("a", NodeState.FROZEN, Action.KILL_ALL.value)
    ]
    assert due(j, FROZEN, wake + 0.02) == ()  # decided: nothing more due


def test_a_freeze_that_ends_before_its_deadline_is_forgotten() -> None:
    j = judge_of(WatchPolicy(frozen_after=3))
    j.judge(FROZEN, 100.0, {"a": 99.9})
    running = {"a": snap("a"), "b": HEALTHY}
    assert j.judge(running, 101.0, {"a": 100.9})[1] == []  # py-spy let go of it
    assert [d.state for d in due(j, running, 101.0)] == [NodeState.STALLED]
    j.judge(FROZEN, 102.0, {"a": 101.9})  # stopped again: counts anew
    assert due(j, FROZEN, 102.0) == (Deadline("a", NodeState.FROZEN, 105.0),)


def test_unreachable_counts_to_the_end_of_the_round() -> None:
    """Its evidence is the silence up to the round's end, however early the poll was sent."""
    j = judge_of(WatchPolicy(unreachable_after=3))
    j.judge(GONE, 10.0, {"a": 5.0})
    assert due(j, GONE, 10.0) == (Deadline("a", NodeState.UNREACHABLE, 13.0),)
    assert j.judge(GONE, 12.9, {"a": 5.0})[1] == []
    (t,) = j.judge(GONE, 13.05, {"a": 5.0})[1]
    assert t.state is NodeState.UNREACHABLE
    assert due(j, GONE, 13.05) == ()


def test_zero_hold_decides_at_first_sight() -> None:
    j = judge_of(WatchPolicy(frozen_after=0))
    assert [t.state for t in j.judge(FROZEN, 100.0, {"a": 99.9})[1]] == [NodeState.FROZEN]


def test_stall_deadline_from_the_output_age_and_only_while_it_would_act() -> None:
    quiet = {"a": snap("a", output_age=290.0), "b": snap("b", output_age=0.5)}
    j = judge_of(WatchPolicy(stall_after=300, on_stall=Action.NOTIFY))
    verdicts, _ = j.judge(quiet, 50.0)
    due = {d.node: d for d in j.deadlines(quiet, verdicts, 50.0)}
    assert due["a"] == Deadline("a", NodeState.STALLED, 60.0)
    assert due["b"].at == pytest.approx(349.5)  # far beyond the next tick: no extra poll
    stalled = {"a": snap("a", output_age=300.1), "b": snap("b", output_age=0.5)}
    verdicts, triggers = j.judge(stalled, 60.1)
    assert [(t.node, t.action) for t in triggers] == [("a", Action.NOTIFY.value)]
    verdicts, _ = j.judge(quiet, 61.0)  # it printed again, then went quiet again
    assert [d.node for d in j.deadlines(quiet, verdicts, 61.0)] == ["b"]  # told once already


def test_notify_only_failures_are_due_once() -> None:
    j = judge_of(WatchPolicy(frozen_after=3, on_failure=Action.NOTIFY))
    j.judge(FROZEN, 0.0)
    assert due(j, FROZEN, 0.0) == (Deadline("a", NodeState.FROZEN, 3.0),)
    assert [t.action for t in j.judge(FROZEN, 3.0)[1]] == [Action.NOTIFY.value]
    j.judge({"a": snap("a"), "b": HEALTHY}, 4.0)
    j.judge(FROZEN, 5.0)  # frozen again: already told, so no poll for it
    assert due(j, FROZEN, 5.0) == ()
