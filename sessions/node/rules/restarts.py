"""Whether and when to bring a failed job back: the restart policy's pure decisions,
used by the manager's supervisor and by the coordinator on the cluster alike.

A restart turns "woke up to a dead job" into "woke up to a job that lost 5 minutes",
but a job that can never work must not be relaunched forever: the policy restarts
only for the causes and exit codes it is given (never a clean exit, never by default
the codes that mean the command or config is wrong), backs off exponentially, gives
up after `max` attempts in a row, and forgets old failures once an attempt has made
progress for `reset_after` seconds.

The policy is anything with RestartPolicy's fields (the manager's config, or the
coordinator's `RestartRules` read from its watch file): one rule, both sides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

from .states import NodeState


class Policy(Protocol):
    @property
    def max(self) -> int: ...
    @property
    def backoff(self) -> float: ...
    @property
    def backoff_max(self) -> float: ...
    @property
    def on(self) -> frozenset[str]: ...
    @property
    def exit_codes(self) -> frozenset[int] | None: ...
    @property
    def not_on(self) -> frozenset[int]: ...
    @property
    def reset_after(self) -> float: ...


@dataclass(frozen=True)
class RestartRules:
    """RestartPolicy's fields as plain values, for the coordinator (its defaults and
    checks live in the config, once)."""

    max: int
    backoff: float
    backoff_max: float
    on: frozenset[str]
    exit_codes: frozenset[int] | None
    not_on: frozenset[int]
    reset_after: float


@dataclass(frozen=True)
class AttemptEnd:
    """How one attempt of a chain ended, as the supervisor saw it."""

    attempt: int  # 0 for the first launch
    run_id: str | None  # None: the launch itself failed
    state: NodeState  # what ended it
    culprit: str | None  # the node that caused it, when one did
    exit_codes: tuple[int, ...] = ()  # the nodes' non-zero exit codes
    progressed_for: float = 0.0  # seconds the attempt kept making progress
    cause: str = ""

    def plain(self) -> dict[str, Any]:
        """As the record keeps it (JSON): a supervisor that resumes reads it back."""
        out = asdict(self)
        out["state"] = self.state.value
        out["exit_codes"] = list(self.exit_codes)
        return out


def ends_from(items: object) -> tuple[AttemptEnd, ...]:
    """Attempts' ends read back from a record, skipping what this version cannot read."""
    out = []
    for e in items if isinstance(items, list) else []:
        try:
            end = AttemptEnd(**e)
            out.append(replace(end, state=NodeState(e["state"]), exit_codes=tuple(end.exit_codes)))
        except (TypeError, ValueError, KeyError):
            continue
    return tuple(out)


def attempt_label(k: int, most: int | None = None) -> str:
    """Attempt `k` (0: the launch itself) as people read it: one numbering everywhere
    (status, history, report, the app, the webhook, the docs), counted from 1, of
    1 + `most` (restart.max) when given. Restart k/max starts attempt k + 1."""
    return f"attempt {k + 1}" + (f"/{most + 1}" if most is not None else "")


@dataclass(frozen=True)
class Decision:
    restart: bool
    why: str
    delay: float = 0.0
    counted: int = 0  # failures in a row that count against `max`
    gave_up: bool = False  # the policy would restart this, but `max` is spent


def counted_failures(policy: Policy, history: Sequence[AttemptEnd]) -> int:
    """Failures since the last attempt that made progress for `reset_after` (that
    attempt's own failure counts as the first again)."""
    count = 0
    for end in history:
        reset = policy.reset_after > 0 and end.progressed_for >= policy.reset_after
        count = 1 if reset else count + 1
    return count


def repeat_culprit(history: Sequence[AttemptEnd]) -> str | None:
    """The node that caused the last two teardowns, if one did both: it is swapped for
    a spare (here by the supervisor, on the cluster by the coordinator, node/rules/placing.py)."""
    if len(history) < 2:
        return None
    a, b = history[-2].culprit, history[-1].culprit
    return a if a is not None and a == b else None


def decide(policy: Policy, history: Sequence[AttemptEnd]) -> Decision:
    if not history:
        return Decision(False, "nothing has ended")
    last = history[-1]
    if policy.max <= 0:
        return Decision(False, "restart is off (restart.max is 0)")
    if last.state.value not in policy.on:
        return Decision(False, f"{last.state.value} is not in restart.on")
    codes = [c for c in last.exit_codes if c != 0]
    if last.state is NodeState.FAILED and last.exit_codes and not codes:
        return Decision(False, "the job exited 0")
    if policy.exit_codes is not None and codes and not set(codes) & policy.exit_codes:
        return Decision(False, f"exit code {codes[0]} is not in restart.exit_codes")
    if blocked := sorted(set(codes) & policy.not_on):
        return Decision(False, f"exit code {blocked[0]} is in restart.not_on")
    count = counted_failures(policy, history)
    if count > policy.max:
        why = f"gave up after {policy.max} restart(s) in a row"
        return Decision(False, why, counted=count, gave_up=True)
    delay = min(policy.backoff * 2 ** (count - 1), policy.backoff_max)
    return Decision(True, f"restart {count}/{policy.max}", delay=delay, counted=count)
