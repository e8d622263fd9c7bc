"""The watchdog's decision, as a pure function of a job's facts and a clock: the one
judge of the manager's watchdog (watch/judge.py wraps it) and of the coordinator on the
main node.

A failure is acted on at once; a freeze only after `frozen_after` (a py-spy dump or a
debugger stops a process for a moment) and an unreachable node only after
`unreachable_after` (a busy sshd misses polls); a notify-only problem is reported
once. A failure matters only while something else still runs or holds resources.

Deciding only at a regular poll made a freeze count up to one `interval` late; so the
judge also says when each state would turn into a decision if nothing changed
(`deadlines`), and `next_poll` puts a poll just after the earliest of them. A freeze
still needs evidence asked for after its deadline: a poll sent earlier that answers
later never decides it.

The rules are a plain `Rules` and an action a plain string (`kill_all`, `notify`):
the manager's WatchPolicy and its Action StrEnum compare equal to them, and a node
reads them from JSON without the manager's config code.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from .states import Facts, NodeState, Verdict, derive, may_still_run, stall_threshold

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

NOTIFY = "notify"  # the action that touches nothing: said once per problem


@dataclass(frozen=True)
class Rules:
    """What the judge needs of `watch:`: WatchPolicy's fields of the same names (their
    defaults and checks live there, once), sent to the coordinator as plain values."""

    frozen_after: float
    unreachable_after: float
    on_failure: str  # "kill_all" or "notify"
    on_stall: str
    stall_after: float | str  # seconds, or "auto": learnt from the job's pace


class Pace(Protocol):
    """How the job steps while healthy (steps.Pace, poll's Pace): what `auto` learns from."""

    @property
    def step_interval(self) -> float: ...
    @property
    def longest_gap(self) -> float: ...


@dataclass(frozen=True)
class NodeTrigger:
    node: str
    state: NodeState
    why: str
    action: str


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
    """Turns a stream of facts into at most one decision per problem."""

    rules: Rules
    since: dict[str, tuple[NodeState, float]] = field(default_factory=dict)
    notified: set[tuple[str, NodeState]] = field(default_factory=set)
    seen: dict[str, float] = field(default_factory=dict)  # up to when the last evidence counts
    pace: Pace | None = None  # the job's steps, for `stall_after: auto`
    gone: set[str] = field(default_factory=set)  # nodes that vanished while running

    @property
    def stall_after(self) -> float:
        """The stall threshold in force: the rules', or learnt from `pace`."""
        p = self.pace
        if p is None:
            return stall_threshold(self.rules.stall_after)
        return stall_threshold(self.rules.stall_after, p.step_interval, p.longest_gap)

    def learn(self, pace: Pace | None) -> bool:
        """Take the job's latest pace; True when that moves the threshold in force by
        more than a tenth (worth saying; smaller moves are the poll's own jitter)."""
        before = self.stall_after
        if pace is None or self.rules.stall_after != "auto":
            return False
        self.pace = pace
        return abs(self.stall_after - before) > 0.1 * before

    def verdicts(self, facts: Mapping[str, Facts]) -> dict[str, Verdict]:
        return {n: derive(s, self.stall_after) for n, s in facts.items()}

    def judge(
        self, facts: Mapping[str, Facts], now: float, asked: Mapping[str, float] | None = None
    ) -> tuple[dict[str, Verdict], list[NodeTrigger]]:
        """`now`: the round's end; `asked`: when each node's answer was asked for, the
        earliest moment it can describe (default `now`). A state counts from the end of
        the round that first saw it, and a freeze as held only up to `asked`."""
        verdicts = {n: self._vanished(n, v) for n, v in self.verdicts(facts).items()}
        triggers: list[NodeTrigger] = []
        r = self.rules
        for node, v in verdicts.items():
            held = self._held(node, v.state, now, (asked or {}).get(node, now))
            hold = self._hold(v.state)
            if v.state in (NodeState.FAILED, NodeState.ORPHANED) or (
                hold is not None and held >= hold
            ):
                action = r.on_failure
            elif v.state is NodeState.STALLED:
                action = r.on_stall
            else:
                continue
            if not self._matters(node, v.state, action):
                continue
            self.notified.add((node, v.state))
            triggers.append(NodeTrigger(node, v.state, v.why, action))
        # A failure only matters while something else still runs (or holds resources).
        if not may_still_run(v.state for v in verdicts.values()):
            triggers = [t for t in triggers if t.action == NOTIFY]
        return verdicts, triggers

    def _vanished(self, node: str, v: Verdict) -> Verdict:
        """A node seen running whose session and processes are gone with no exit code
        (its tmux server killed, the node's job wiped): a failure, not a node that is
        "not running". Without it the others waited in their collective for its
        timeout (a gloo/NCCL peer that vanished is no error they see at once)."""
        prev = self.since.get(node)
        gone = v.state is NodeState.NOT_RUNNING
        if gone and (node in self.gone or (prev is not None and prev[0].is_active)):
            self.gone.add(node)
            return Verdict(NodeState.FAILED, "its session and processes vanished, no exit code")
        return v

    def deadlines(
        self, facts: Mapping[str, Facts], verdicts: Mapping[str, Verdict], now: float
    ) -> tuple[Deadline, ...]:
        """After `judge(facts, now)`: the moments at which a state seen now would become
        a decision that acts, if nothing changes. Reads the judge, changes nothing."""
        return tuple(self._pending(facts, verdicts, now))

    def _pending(
        self, facts: Mapping[str, Facts], verdicts: Mapping[str, Verdict], now: float
    ) -> Iterator[Deadline]:
        r = self.rules
        for node, v in verdicts.items():
            hold = self._hold(v.state)
            if hold is not None and node in self.since:
                at = self.since[node][1] + hold
                if at > self.seen.get(node, now) and self._matters(node, v.state, r.on_failure):
                    yield Deadline(node, v.state, at)
            elif v.state is NodeState.RUNNING and node in facts:
                age = facts[node].output_age
                if age is not None and self._matters(node, NodeState.STALLED, r.on_stall):
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
            return self.rules.frozen_after
        if state is NodeState.UNREACHABLE:
            return self.rules.unreachable_after
        return None

    def _matters(self, node: str, state: NodeState, action: str) -> bool:
        """A kill always acts; a notification only the first time for this problem."""
        return action != NOTIFY or (node, state) not in self.notified
