"""One set of rules on both sides: the node package's rules are what the manager derives
a poll's states with (poll/states.py and config's stall threshold only adapt them), and
the coordinator's judge decides on a sentinel's plain facts exactly as on a polled
NodeSnapshot."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Literal

import pytest
from snaps import judge_of, snap

from mntui.sessions.config import Action, WatchPolicy
from mntui.sessions.node.rules import judging, steps
from mntui.sessions.node.rules import states as rules
from mntui.sessions.poll import NodeSnapshot, progress, states
from mntui.sessions.poll.snapshot import JobProc


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str


@dataclass(frozen=True)
class Facts:
    """What a sentinel knows of its node: no NodeSnapshot, no manager code."""

    reachable: bool = True
    error: str | None = None
    live_procs: tuple[Proc, ...] = (Proc(10, 1, "S"), Proc(11, 10, "S"))
    pane_pid: int | None = 10
    exit_code: int | None = None
    session: bool = True
    pane_dead: bool = False
    log_size: int | None = 100
    output_age: float | None = 1.0


def as_snapshot(node: str, f: Facts) -> NodeSnapshot:
    """The same node as the manager's poll would have seen it."""
    procs = tuple(JobProc(p.pid, p.ppid, p.state, None, 1.0, "x") for p in f.live_procs)
    return snap(
        node,
        reachable=f.reachable,
        error=f.error,
        procs=procs,
        pane_pid=f.pane_pid,
        exit_code=f.exit_code,
        session=f.session,
        pane_dead=f.pane_dead,
        log_size=f.log_size,
        output_age=f.output_age,
    )


def test_the_manager_imports_the_node_rules_not_a_copy() -> None:
    assert states.NodeState is rules.NodeState
    assert states.derive is rules.derive and states.Verdict is rules.Verdict
    assert states.may_still_run is rules.may_still_run and states.PROBLEMS is rules.PROBLEMS
    assert progress.ProgressTracker is steps.ProgressTracker and progress.Pace is steps.Pace


@pytest.mark.parametrize("s", list(rules.NodeState))
def test_a_state_reads_as_its_value_everywhere(s: rules.NodeState) -> None:
    """A node's Python has no StrEnum: the `(str, Enum)` must print as the StrEnum did."""
    assert str(s) == f"{s}" == "%s" % s == format(s) == s.value  # noqa: UP031
    assert f"{s:>14}" == f"{s.value:>14}"
    assert json.dumps(s) == json.dumps(s.value)
    assert json.dumps({s: 1}) == json.dumps({s.value: 1})
    assert rules.NodeState(s.value) is s and s == s.value


@pytest.mark.parametrize(
    "facts, state, why",
    [
        (Facts(), rules.NodeState.RUNNING, "2 process(es)"),
        (Facts(log_size=0), rules.NodeState.STARTING, "no output yet"),
        (Facts(output_age=400.0), rules.NodeState.STALLED, "no output for 400s"),
        (Facts(live_procs=(Proc(10, 1, "T"),)), rules.NodeState.FROZEN, "stopped: pid 10"),
        (
            Facts(live_procs=(Proc(11, 1, "S"),)),
            rules.NodeState.ORPHANED,
            "launcher gone, still alive: pid 11",
        ),
        (Facts(live_procs=(), exit_code=0), rules.NodeState.FINISHED, "exit 0"),
        (Facts(live_procs=(), exit_code=3), rules.NodeState.FAILED, "exit code 3"),
        (
            Facts(live_procs=(), pane_dead=True),
            rules.NodeState.FAILED,
            "launcher died without an exit code",
        ),
        (
            Facts(live_procs=(), session=False),
            rules.NodeState.NOT_RUNNING,
            "no session, no processes",
        ),
        (
            Facts(reachable=False, error="refused\x1b]52;c;aGk=\x07\nagain"),
            rules.NodeState.UNREACHABLE,
            "refused again",
        ),
    ],
)
def test_plain_facts_derive_as_a_snapshot_does(
    facts: Facts, state: rules.NodeState, why: str
) -> None:
    v = rules.derive(facts, 300.0)
    assert (v.state, v.why) == (state, why)
    assert states.derive(as_snapshot("a", facts), 300.0) == v


RULES_OF = [
    WatchPolicy(),
    WatchPolicy(on_failure=Action.NOTIFY, on_stall=Action.KILL_ALL, stall_after=20),
    WatchPolicy(frozen_after=0, unreachable_after=2, stall_after="auto"),
]
# node a over time; b keeps running, so a failure still matters.
TIMELINE = [
    Facts(),
    *[Facts(live_procs=(Proc(10, 1, "T"),))] * 4,  # held past the default frozen_after
    Facts(output_age=350.0),
    Facts(output_age=351.0),
    Facts(reachable=False, error="timeout"),
    Facts(reachable=False, error="timeout"),
    Facts(reachable=False, error="timeout"),
    Facts(reachable=False, error="timeout"),
    Facts(live_procs=(), exit_code=1),
    Facts(live_procs=(), exit_code=1),
]


@pytest.mark.parametrize("policy", RULES_OF)
def test_the_judge_decides_on_a_snapshot_what_it_decides_on_plain_facts(
    policy: WatchPolicy,
) -> None:
    """The coordinator's judge over polled snapshots and over a sentinel's plain facts:
    the same verdicts, triggers (each action one of the config's) and deadlines, round
    after round, asked a little before each round's end."""
    manager = judge_of(policy)
    node = judge_of(policy)
    pace = steps.Pace(step_interval=0.5, longest_gap=40.0, gaps=9)
    assert manager.learn(pace) == node.learn(pace)
    assert manager.stall_after == node.stall_after
    for i, a in enumerate(TIMELINE):
        now, asked = 100.0 + 1.5 * i, {"a": 99.8 + 1.5 * i}
        facts = {"a": a, "b": Facts()}
        snaps = {n: as_snapshot(n, f) for n, f in facts.items()}
        mv, mt = manager.judge(snaps, now, asked)
        nv, nt = node.judge(facts, now, asked)
        assert mv == nv
        assert [(t.node, t.state, t.why, t.action) for t in mt] == [
            (t.node, t.state, t.why, t.action) for t in nt
        ]
        assert all(Action(t.action) in Action for t in mt)
        assert manager.deadlines(snaps, mv, now) == node.deadlines(facts, nv, now)


def test_an_ended_job_keeps_only_its_notifications() -> None:
    """Every node finished or failed: nothing is left to kill, on either side."""
    j = judge_of()
    ended = {"a": Facts(live_procs=(), exit_code=1), "b": Facts(live_procs=(), exit_code=0)}
    verdicts, triggers = j.judge(ended, 10.0)
    assert verdicts["a"].state is rules.NodeState.FAILED and triggers == []


@pytest.mark.parametrize(
    "stall_after, step, longest, seconds",
    [
        (300.0, None, None, 300.0),
        (20, 0.5, 3.0, 20),
        ("auto", None, None, rules.AUTO_UNKNOWN),
        ("auto", 0.5, 3.0, rules.AUTO_FLOOR),
        ("auto", 9.0, 3.0, 90.0),
        ("auto", 0.5, 45.0, 90.0),
    ],
)
def test_the_stall_threshold_is_one_rule(
    stall_after: float | Literal["auto"], step: float | None, longest: float | None, seconds: float
) -> None:
    assert rules.stall_threshold(stall_after, step, longest) == seconds
    policy = replace(WatchPolicy(), stall_after=stall_after)
    assert policy.stall_threshold(step, longest) == seconds


def test_rules_take_plain_strings_as_a_node_reads_them_from_json() -> None:
    sent = judge_of().rules
    r = judging.Rules(**json.loads(json.dumps(sent.__dict__)))
    assert r == sent
    assert r.on_failure == Action.KILL_ALL and r.on_stall == Action.NOTIFY
    with pytest.raises(ValueError, match="auto"):
        rules.stall_threshold("sometimes")
