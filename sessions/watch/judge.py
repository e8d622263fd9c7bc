"""The watchdog's decision, as a pure function of snapshots and a clock.

A failure is acted on at once; a freeze only after `frozen_after` (a py-spy dump or a
debugger stops a process for a moment) and an unreachable node only after
`unreachable_after` (a busy sshd misses polls); a notify-only problem is reported
once. A failure matters only while something else still runs or holds resources.

Deciding only at a regular poll made a freeze count up to one `interval` late; so the
judge also says when each state would turn into a decision if nothing changed
(`deadlines`), and `next_poll` puts a poll just after the earliest of them. A freeze
still needs evidence asked for after its deadline: a poll sent earlier that answers
later never decides it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from mntui.sessions.config import AUTO_FLOOR, AUTO_STEPS, Action, WatchPolicy
from mntui.sessions.poll import NodeSnapshot, NodeState, Pace, Verdict, derive, may_still_run
from mntui.sessions.report import Finding

# A poll for a deadline is sent this long after it, so that it is asked strictly after
# (a stall's deadline mixes the wall clock of the output's age with the monotonic one).
WAKE_MARGIN = 0.05
# The least time between two rounds' starts (the `interval` floor): a deadline that keeps
# moving (a wall clock stepped back under a stall's age) never makes the watchdog spin.
MIN_GAP = 0.1
# A tick this fraction of `interval` or less before a deadline waits for it: one round
# serves both, instead of two rounds a few milliseconds apart. At most MERGE_MAX seconds:
# a waiting tick also delays seeing a failure, and intervals may be long.
MERGE = 0.25
MERGE_MAX = 0.5


@dataclass(frozen=True)
class Trigger:
    node: str
    state: NodeState
    why: str
    action: Action
    finding: Finding | None = None  # a straggler's: the sampler's finding it was decided on


@dataclass(frozen=True)
class Deadline:
    """When `node` turns into a decision (`state`) if nothing changes: a poll asked for
    at or after `at` decides a freeze or a stall, a round that ends after it an
    unreachable node (its evidence is the silence up to the round's end)."""

    node: str
    state: NodeState
    at: float  # the judge's clock (time.monotonic() for the watchdog)


def next_poll(
    last: float, interval: float, deadlines: Iterable[float], margin: float = WAKE_MARGIN
) -> float:
    """When to ask the nodes next, given when the last round was asked: the regular tick,
    or just after a deadline that comes sooner (or only a little later: the tick waits for
    it); never sooner than MIN_GAP after `last`."""
    regular = last + interval
    soonest = min((d + margin for d in deadlines), default=regular)
    wake = soonest if soonest <= regular + min(MERGE * interval, MERGE_MAX) else regular
    return max(wake, last + min(interval, MIN_GAP))


@dataclass
class Judge:
    """Turns a stream of snapshots into at most one decision per problem."""

    policy: WatchPolicy
    since: dict[str, tuple[NodeState, float]] = field(default_factory=dict)
    notified: set[tuple[str, NodeState]] = field(default_factory=set)
    seen: dict[str, float] = field(default_factory=dict)  # up to when the last evidence counts
    pace: Pace | None = None  # the job's steps, for `stall_after: auto`

    @property
    def stall_after(self) -> float:
        """The stall threshold in force: the config's, or learnt from `pace`."""
        p = self.pace
        if p is None:
            return self.policy.stall_threshold()
        return self.policy.stall_threshold(p.step_interval, p.longest_gap)

    def learn(self, pace: Pace | None) -> bool:
        """Take the job's latest pace; True when that moves the threshold in force by
        more than a tenth (worth saying; smaller moves are the poll's own jitter)."""
        before = self.stall_after
        if pace is None or self.policy.stall_after != "auto":
            return False
        self.pace = pace
        return abs(self.stall_after - before) > 0.1 * before

    def verdicts(self, snaps: dict[str, NodeSnapshot]) -> dict[str, Verdict]:
        return {n: derive(s, self.stall_after) for n, s in snaps.items()}

    def judge(
        self, snaps: dict[str, NodeSnapshot], now: float, asked: Mapping[str, float] | None = None
    ) -> tuple[dict[str, Verdict], list[Trigger]]:
        """`now`: the round's end; `asked`: when each node's answer was asked for, the
        earliest moment it can describe (default `now`). A state counts from the end of
        the round that first saw it, and a freeze as held only up to `asked`."""
        verdicts = self.verdicts(snaps)
        triggers: list[Trigger] = []
        p = self.policy
        for node, v in verdicts.items():
            held = self._held(node, v.state, now, (asked or {}).get(node, now))
            hold = self._hold(v.state)
            if v.state in (NodeState.FAILED, NodeState.ORPHANED) or (
                hold is not None and held >= hold
            ):
                action = p.on_failure
            elif v.state is NodeState.STALLED:
                action = p.on_stall
            else:
                continue
            if not self._matters(node, v.state, action):
                continue
            self.notified.add((node, v.state))
            triggers.append(Trigger(node, v.state, v.why, action))
        # A failure only matters while something else still runs (or holds resources).
        if not may_still_run(v.state for v in verdicts.values()):
            triggers = [t for t in triggers if t.action is Action.NOTIFY]
        return verdicts, triggers

    def deadlines(
        self, snaps: Mapping[str, NodeSnapshot], verdicts: Mapping[str, Verdict], now: float
    ) -> tuple[Deadline, ...]:
        """After `judge(snaps, now)`: the moments at which a state seen now would become
        a decision that acts, if nothing changes. Reads the judge, changes nothing."""
        return tuple(self._pending(snaps, verdicts, now))

    def _pending(
        self, snaps: Mapping[str, NodeSnapshot], verdicts: Mapping[str, Verdict], now: float
    ) -> Iterator[Deadline]:
        p = self.policy
        for node, v in verdicts.items():
            hold = self._hold(v.state)
            if hold is not None and node in self.since:
                at = self.since[node][1] + hold
                if at > self.seen.get(node, now) and self._matters(node, v.state, p.on_failure):
                    yield Deadline(node, v.state, at)
            elif v.state is NodeState.RUNNING and node in snaps:
                age = snaps[node].output_age
                if age is not None and self._matters(node, NodeState.STALLED, p.on_stall):
                    yield Deadline(node, NodeState.STALLED, now + self.stall_after - age)

    def _held(self, node: str, state: NodeState, now: float, asked: float) -> float:
        """How long `state` has held: from the end of the round that first saw it to the
        moment this evidence was asked for (to the round's end for an unreachable node:
        its evidence is a silence that lasts until then)."""
        prev = self.since.get(node)
        start = prev[1] if prev and prev[0] is state else now
        self.since[node] = (state, start)
        seen = now if state is NodeState.UNREACHABLE else min(asked, now)
        self.seen[node] = seen
        return max(0.0, seen - start)

    def _hold(self, state: NodeState) -> float | None:
        """How long a state must hold before it is a failure; None: not one of those."""
        if state is NodeState.FROZEN:
            return self.policy.frozen_after
        if state is NodeState.UNREACHABLE:
            return self.policy.unreachable_after
        return None

    def _matters(self, node: str, state: NodeState, action: Action) -> bool:
        """A kill always acts; a notification only the first time for this problem."""
        return action is not Action.NOTIFY or (node, state) not in self.notified


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
