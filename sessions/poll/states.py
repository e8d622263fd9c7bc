"""What a node's snapshot means: one state, derived by a pure function.

Order matters: a frozen or orphaned worker is the emergency even when other facts
(an exit code, a live pane) look normal, so those are checked first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from mntui.sessions.termsafe import one_line

from .snapshot import NodeSnapshot


class NodeState(StrEnum):
    STARTING = "starting"  # running, nothing printed yet
    RUNNING = "running"
    FINISHED = "finished"  # exit 0
    FAILED = "failed"  # exit != 0, or the launcher died without an exit code
    ORPHANED = "orphaned"  # tagged processes alive whose parent is gone
    STALLED = "stalled"  # alive, no output for stall_after seconds
    FROZEN = "frozen"  # job processes stopped (state T)
    UNREACHABLE = "unreachable"
    NOT_RUNNING = "not-running"  # no session, no processes

    @property
    def is_problem(self) -> bool:
        return self in PROBLEMS

    @property
    def is_active(self) -> bool:
        return self in (
            NodeState.STARTING,
            NodeState.RUNNING,
            NodeState.STALLED,
            NodeState.FROZEN,
            NodeState.ORPHANED,
        )


def may_still_run(states: Iterable[NodeState]) -> bool:
    """Whether the job may still hold processes, ports or GPUs somewhere: a node is active,
    or one does not answer and no node finished cleanly. A silent node is never taken for
    an ended one (a watcher cut off from every node would call the job over and leave it
    running), unless another node's clean exit says the training completed: then the
    silence is the end of an allocation, not a reason to tear down and restart."""
    seen = set(states)
    if any(s.is_active for s in seen):
        return True
    return NodeState.UNREACHABLE in seen and NodeState.FINISHED not in seen


PROBLEMS = frozenset(
    {
        NodeState.FAILED,
        NodeState.ORPHANED,
        NodeState.STALLED,
        NodeState.FROZEN,
        NodeState.UNREACHABLE,
    }
)


@dataclass(frozen=True)
class Verdict:
    state: NodeState
    why: str


def derive(s: NodeSnapshot, stall_after: float) -> Verdict:
    if not s.reachable:  # the error may carry what the node's end said: shown, made safe
        return Verdict(NodeState.UNREACHABLE, one_line(s.error or "") or "no answer")
    live = s.live_procs
    stopped = [p for p in live if p.state in ("T", "t")]
    if stopped:
        return Verdict(
            NodeState.FROZEN, "stopped: " + ", ".join(f"pid {p.pid}" for p in stopped[:4])
        )
    # Every tagged process descends from the pane's process; one whose parent is not
    # tagged was reparented (torchrun died under it). A job that deliberately
    # daemonizes a helper shows here too, which is worth a look anyway.
    pids = {p.pid for p in live}
    orphans = [p for p in live if p.ppid not in pids and p.pid != s.pane_pid]
    if orphans:
        return Verdict(
            NodeState.ORPHANED,
            "launcher gone, still alive: " + ", ".join(f"pid {p.pid}" for p in orphans[:4]),
        )
    if s.exit_code is not None and not live:
        if s.exit_code == 0:
            return Verdict(NodeState.FINISHED, "exit 0")
        return Verdict(NodeState.FAILED, f"exit code {s.exit_code}")
    if not live:
        if s.session and s.pane_dead:
            return Verdict(NodeState.FAILED, "launcher died without an exit code")
        return Verdict(NodeState.NOT_RUNNING, "no session, no processes")
    if not s.log_size:
        return Verdict(NodeState.STARTING, "no output yet")
    if s.output_age is not None and s.output_age > stall_after:
        return Verdict(NodeState.STALLED, f"no output for {s.output_age:.0f}s")
    return Verdict(NodeState.RUNNING, f"{len(live)} process(es)")
