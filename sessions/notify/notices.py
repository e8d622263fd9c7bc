"""What a notification says, and how it is put for a webhook and for a command.

The words and the webhook's body are one rule in the node package (node/notifytext.py,
node/notifyhook.py): the cluster's coordinator sends a run's notifications with it
from the main node, and this machine sends what it could not; this module re-exports
that rule and adds what only this machine does: a command's environment (the summary
through its environment only, never through its shell line) and the coordinator's part
of a policy (`for_coordinator`: the webhook, never the command, which runs here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mntui.sessions.node.notifyhook import NotifyRules, check_webhook_url, redact, webhook_body
from mntui.sessions.node.notifytext import (
    ALL_EVENTS,
    CHAT_TEXT,
    MAX_TEXT,
    Notice,
    NotifyEvent,
    clean,
    failed_summary,
    finished_summary,
    gave_up_summary,
    one_line,
    raw,
    restart_summary,
    teardown_summary,
)
from mntui.sessions.procs import TAG_VAR

__all__ = [
    "ALL_EVENTS",
    "CHAT_TEXT",
    "MAX_TEXT",
    "Notice",
    "NotifyEvent",
    "NotifyPolicy",
    "check_webhook_url",
    "clean",
    "command_env",
    "failed_summary",
    "finished_summary",
    "for_coordinator",
    "gave_up_summary",
    "one_line",
    "redact",
    "restart_summary",
    "teardown_summary",
    "webhook_body",
]

# A command started from inside a job's pane must not carry the job's tag, or the next
# kill of that job would count it as one of the job's processes.
_NOT_FOR_COMMANDS = frozenset({TAG_VAR.encode(), f"{TAG_VAR}_DIR".encode()})


@dataclass(frozen=True)
class NotifyPolicy:
    webhook: str | None = None
    command: str | None = None  # the user's own shell line, run with `sh -c`
    on: frozenset[NotifyEvent] = ALL_EVENTS
    timeout: float = 5.0  # the whole delivery: the POST (and its one retry) beside the command

    @property
    def active(self) -> bool:
        return bool(self.webhook or self.command) and bool(self.on)


def for_coordinator(policy: NotifyPolicy) -> NotifyRules | None:
    """What the cluster's coordinator does with the run's notices (None: nothing to
    notify): posts the webhook, and keeps each notice for this machine when it has a
    command, the user's line for this machine, run here at the next contact
    (watch/clusternotify.py), never on the main."""
    if not policy.active:
        return None
    hook = policy.webhook if policy.webhook and check_webhook_url(policy.webhook) is None else None
    on = frozenset(str(e) for e in policy.on)
    return NotifyRules(hook, on, policy.timeout, here=bool(policy.command))


def command_env(notice: Notice, base: Mapping[bytes, bytes]) -> dict[bytes, bytes]:
    env = {k: v for k, v in base.items() if k not in _NOT_FOR_COMMANDS}
    env[b"MNTUI_EVENT"] = str(notice.event).encode()
    env[b"MNTUI_JOB"] = raw(notice.job)
    env[b"MNTUI_RUN_ID"] = raw(notice.run_id)
    env[b"MNTUI_SUMMARY"] = raw(notice.summary)
    env[b"MNTUI_REPORT"] = raw(notice.report_path or "")
    return env
