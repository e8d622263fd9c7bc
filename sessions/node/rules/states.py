"""What a node's facts mean: one state, derived by a pure function, and the stall
threshold it is judged by.

The manager's watchdog derives from a polled NodeSnapshot, the coordinator on the main
node from a sentinel's facts; both call `derive` here, so a node is never judged by two
rules. Order matters: a frozen or orphaned worker is the emergency even when other facts
(an exit code, a live pane) look normal, so those are checked first.

Python 3.9 and the standard library only (the package runs on a node's bare python3):
hence `(str, Enum)` where the manager would write StrEnum, with `__str__`/`__format__`
giving the value so that `str()`, f-strings, `%s` and json read exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from .termsafe import one_line

AUTO_FLOOR = 60.0
AUTO_STEPS = 10
AUTO_UNKNOWN = 300.0  # `auto` before the step interval is known: the fixed default


class NodeState(str, Enum):
    STARTING = "starting"  # running, nothing printed yet
    RUNNING = "running"
    FINISHED = "finished"  # exit 0
    FAILED = "failed"  # exit != 0, or the launcher died without an exit code
    ORPHANED = "orphaned"  # tagged processes alive whose parent is gone
    STALLED = "stalled"  # alive, no output for stall_after seconds
    FROZEN = "frozen"  # job processes stopped (state T)
    UNREACHABLE = "unreachable"
    NOT_RUNNING = "not-running"  # no session, no processes

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

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


class ProcFacts(Protocol):
    """One live job process, as /proc shows it (read-only: snapshots are frozen)."""

    @property
    def pid(self) -> int: ...
    @property
    def ppid(self) -> int: ...
    @property
    def state(self) -> str: ...  # the letter of /proc/P/stat: R S D T t Z ...


class Facts(Protocol):
    """What `derive` reads of a node: a polled NodeSnapshot (manager) or a sentinel's
    facts (coordinator) alike."""

    @property
    def reachable(self) -> bool: ...
    @property
    def error(self) -> str | None: ...
    @property
    def live_procs(self) -> Sequence[ProcFacts]: ...
    @property
    def pane_pid(self) -> int | None: ...
    @property
    def exit_code(self) -> int | None: ...
    @property
    def session(self) -> bool | None: ...
    @property
    def pane_dead(self) -> bool | None: ...
    @property
    def log_size(self) -> int | None: ...
    @property
    def output_age(self) -> float | None: ...


def derive(s: Facts, stall_after: float) -> Verdict:
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


def stall_threshold(
    stall_after: float | str, step: float | None = None, longest: float | None = None
) -> float:
    """Seconds without output that make a stall. `auto`: max(AUTO_FLOOR, AUTO_STEPS ×
    the step interval, 2 × the longest pause between steps seen), AUTO_UNKNOWN until
    the job's steps are known. A step AUTO_STEPS times slower than the median is no
    jitter; the floor keeps a fast job's short pauses (garbage collection, a loader's
    refill) from counting; a pause the job made once and came back from (an eval, a
    checkpoint) is not a stall when it comes again."""
    if not isinstance(stall_after, str):
        return stall_after
    if stall_after != "auto":
        raise ValueError(f"stall_after: a number of seconds or `auto`, not {stall_after!r}")
    if step is None:
        return AUTO_UNKNOWN
    return max(AUTO_FLOOR, AUTO_STEPS * step, 2 * (longest or 0.0))
