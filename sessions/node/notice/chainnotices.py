"""What each of the restart chain's decisions says: the manager's events and words.

Why a rule of its own: the coordinator's chain (chain.py) and this machine's watchdog
and supervisor tell the same decision, and the user reads one set of words whichever
took it. This is pure: the outbox (notifysend.py) sends what it says.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from mntui.sessions.node.rules.chainstates import OutcomeKind
from mntui.sessions.node.rules.judging import NodeTrigger
from mntui.sessions.node.rules.notifytext import (
    NotifyEvent,
    failed_summary,
    finished_summary,
    gave_up_summary,
    restart_summary,
    teardown_summary,
)
from mntui.sessions.node.rules.restarts import AttemptEnd, Decision
from mntui.sessions.node.rules.states import NodeState, Verdict


class Ended(Protocol):
    """How an attempt ended, as the chain has it (chain.Outcome)."""

    @property
    def kind(self) -> str: ...
    @property
    def trigger(self) -> NodeTrigger | None: ...
    @property
    def verdicts(self) -> dict[str, Verdict]: ...


def said(
    job: str,
    most: int,
    out: Ended,
    end: AttemptEnd,
    d: Decision | None,
    k: int,
    held: Sequence[tuple[str, str]] = (),
    stop: str | None = None,
) -> list[tuple[NotifyEvent, str, str]]:
    """The notices (event, summary, key) of attempt `k`'s end: it ended as `out` says
    (chain.Outcome: torn down, or ended by itself), brought the quarantines `held`
    (node, line) and the restart policy said `d` (None: restarts are off; `most`: its
    restart.max) — the notices this machine's watchdog and supervisor send for the same
    (a user's kill: none). `stop`: the placement ended the chain the policy would have
    restarted (the main must be replaced from this machine): a gave-up in its words, the
    user's to act on. `key` tells apart two notices of one event in one attempt."""
    notices: list[tuple[NotifyEvent, str, str]] = []
    if out.kind is OutcomeKind.TEARDOWN and out.trigger is not None:
        text = teardown_summary(out.trigger.node, out.trigger.why, end.cause)  # the first failure
        notices.append((NotifyEvent.TEARDOWN, text, ""))
    elif out.kind is OutcomeKind.ENDED:
        bad = [(n, v.why) for n, v in out.verdicts.items() if v.state is NodeState.FAILED]
        if bad:
            head = end.cause if end.culprit is not None else f"{bad[0][0]} {bad[0][1]}"
            notices.append((NotifyEvent.FAILED, failed_summary(head), ""))
        elif any(v.state is NodeState.FINISHED for v in out.verdicts.values()):
            notices.append((NotifyEvent.FINISHED, finished_summary(job), ""))
    notices += [(NotifyEvent.QUARANTINED, line, node) for node, line in held]
    if stop is not None:
        notices.append((NotifyEvent.GAVE_UP, gave_up_summary(stop, end.cause), ""))
    elif d is not None and d.restart:
        text = restart_summary(k + 1, most, d.delay, d.why, end.cause)
        notices.append((NotifyEvent.RESTART, text, ""))
    elif d is not None and d.gave_up:
        notices.append((NotifyEvent.GAVE_UP, gave_up_summary(d.why, end.cause), ""))
    return notices
