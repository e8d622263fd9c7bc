"""The manager's watchdog judge: node/judging.py's Judge, the one the coordinator on the
main node runs, fed from a WatchPolicy and NodeSnapshots.

What stays here is the manager's side of it: a trigger carries the config's Action
(the core's plain string, converted) and, for a straggler, the sampler's Finding, and
the threshold is said to people (`threshold_text`). The deciding is all the core's, so
a node is judged the same wherever the judge runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mntui.sessions.config import AUTO_FLOOR, AUTO_STEPS, Action, WatchPolicy
from mntui.sessions.node import judging
from mntui.sessions.node.judging import MERGE, MERGE_MAX, MIN_GAP, WAKE_MARGIN, Deadline, next_poll
from mntui.sessions.poll import NodeSnapshot, NodeState, Pace, Verdict
from mntui.sessions.report import Finding

__all__ = [
    "MERGE",
    "MERGE_MAX",
    "MIN_GAP",
    "WAKE_MARGIN",
    "Deadline",
    "Judge",
    "Trigger",
    "next_poll",
    "threshold_text",
    "trigger_kind",
]


@dataclass(frozen=True)
class Trigger:
    node: str
    state: NodeState
    why: str
    action: Action
    finding: Finding | None = None  # a straggler's: the sampler's finding it was decided on


def rules_of(policy: WatchPolicy) -> judging.Rules:
    """The judge's part of `watch:`, as the coordinator also receives it."""
    return judging.Rules(
        frozen_after=policy.frozen_after,
        unreachable_after=policy.unreachable_after,
        on_failure=policy.on_failure.value,
        on_stall=policy.on_stall.value,
        stall_after=policy.stall_after,
    )


@dataclass
class Judge:
    """Turns a stream of snapshots into at most one decision per problem (node/judging.py)."""

    policy: WatchPolicy
    core: judging.Judge = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.core = judging.Judge(rules_of(self.policy))

    @property
    def pace(self) -> judging.Pace | None:
        """The job's pace the threshold in force was learnt from; None: not learnt."""
        return self.core.pace

    @property
    def stall_after(self) -> float:
        """The stall threshold in force: the config's, or learnt from the job's pace."""
        return self.core.stall_after

    def learn(self, pace: Pace | None) -> bool:
        """Take the job's latest pace; True when that moves the threshold by more than a tenth."""
        return self.core.learn(pace)

    def verdicts(self, snaps: Mapping[str, NodeSnapshot]) -> dict[str, Verdict]:
        return self.core.verdicts(snaps)

    def judge(
        self,
        snaps: Mapping[str, NodeSnapshot],
        now: float,
        asked: Mapping[str, float] | None = None,
    ) -> tuple[dict[str, Verdict], list[Trigger]]:
        """The core's decisions (judging.Judge.judge), with the config's Action."""
        verdicts, found = self.core.judge(snaps, now, asked)
        return verdicts, [Trigger(t.node, t.state, t.why, Action(t.action)) for t in found]

    def deadlines(
        self, snaps: Mapping[str, NodeSnapshot], verdicts: Mapping[str, Verdict], now: float
    ) -> tuple[Deadline, ...]:
        """After `judge(snaps, now)`: when a state seen now would become a decision that acts."""
        return self.core.deadlines(snaps, verdicts, now)


def threshold_text(judge: Judge, short: bool = False) -> str:
    """The stall threshold in force, for people: `300 s`; with auto, how it was learnt
    (`60 s (auto: max(60 s, 10 × 0.41 s a step, 2 × the longest pause 1.0 s))`), or, for a
    header (`short`), `60 s (auto)`."""
    p = judge.policy
    seconds = judge.stall_after
    if p.stall_after != "auto":
        return f"{seconds:g} s"
    if short:
        return f"{seconds:.0f} s (auto)"
    if judge.pace is None:
        return f"{seconds:g} s (auto: the job's steps not known yet)"
    pace = judge.pace
    return (
        f"{seconds:.0f} s (auto: max({AUTO_FLOOR:g} s, {AUTO_STEPS} × {pace.step_interval:.2f} s "
        f"a step, 2 × the longest pause {pace.longest_gap:.1f} s))"
    )


def trigger_kind(t: Trigger) -> str:
    return "stall" if t.state is NodeState.STALLED else "failure"
