"""What a notification says, and how it is put for a webhook and for a command.

The words, the webhook's body and a command's environment are one rule in the node
package (node/rules/notifytext.py, node/rules/notifyhook.py,
node/notice/notifycommand.py): the cluster's coordinator sends a run's notifications
with it from the main node, webhook and command, and this machine posts the webhooks
it could not; this module re-exports that rule and adds the config's policy and the
coordinator's part of it (`for_coordinator`).
"""

from __future__ import annotations

from dataclasses import dataclass

from mntui.sessions.node.notice.notifycommand import command_env
from mntui.sessions.node.rules.notifyhook import (
    NotifyRules,
    check_webhook_url,
    redact,
    webhook_body,
)
from mntui.sessions.node.rules.notifytext import (
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
    restart_summary,
    teardown_summary,
)

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
    notify): posts the webhook and runs the command, on the main node, when it decides
    (node/notice/notifysend.py)."""
    if not policy.active:
        return None
    hook = policy.webhook if policy.webhook and check_webhook_url(policy.webhook) is None else None
    on = frozenset(str(e) for e in policy.on)
    return NotifyRules(hook, on, policy.timeout, policy.command or None)
