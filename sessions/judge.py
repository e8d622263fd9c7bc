"""The watchdog's decision, as a pure function of snapshots and a clock.

A failure is acted on at once; a freeze only after `frozen_after` (a py-spy dump or a
debugger stops a process for a moment) and an unreachable node only after
`unreachable_after` (a busy sshd misses polls); a notify-only problem is reported
once. A failure matters only while something else still runs or holds resources.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .poll import NodeSnapshot
from .settings import Action, WatchPolicy
from .states import NodeState, Verdict, derive


@dataclass(frozen=True)
class Trigger:
    node: str
    state: NodeState
    why: str
    action: Action


@dataclass
class Judge:
    """Turns a stream of snapshots into at most one decision per problem."""

    policy: WatchPolicy
    since: dict[str, tuple[NodeState, float]] = field(default_factory=dict)
    notified: set[tuple[str, NodeState]] = field(default_factory=set)

    def verdicts(self, snaps: dict[str, NodeSnapshot]) -> dict[str, Verdict]:
        return {n: derive(s, self.policy.stall_after) for n, s in snaps.items()}

    def judge(
        self, snaps: dict[str, NodeSnapshot], now: float
    ) -> tuple[dict[str, Verdict], list[Trigger]]:
        verdicts = self.verdicts(snaps)
        triggers: list[Trigger] = []
        for node, v in verdicts.items():
            prev = self.since.get(node)
            start = prev[1] if prev and prev[0] is v.state else now
            self.since[node] = (v.state, start)
            held = now - start
            p = self.policy
            failing = (
                v.state in (NodeState.FAILED, NodeState.ORPHANED)
                or (v.state is NodeState.FROZEN and held >= p.frozen_after)
                or (v.state is NodeState.UNREACHABLE and held >= p.unreachable_after)
            )
            if failing:
                action = p.on_failure
            elif v.state is NodeState.STALLED:
                action = p.on_stall
            else:
                continue
            if action is Action.NOTIFY and (node, v.state) in self.notified:
                continue
            self.notified.add((node, v.state))
            triggers.append(Trigger(node, v.state, v.why, action))
        # A failure only matters while something else still runs (or holds resources).
        if not any(v.state.is_active for v in verdicts.values()):
            triggers = [t for t in triggers if t.action is Action.NOTIFY]
        return verdicts, triggers


def trigger_kind(t: Trigger) -> str:
    return "stall" if t.state is NodeState.STALLED else "failure"
