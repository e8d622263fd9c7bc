"""The notifications of a run the cluster watches that this machine sends, once, at its
next contact: what the coordinator could not, and this machine's command.

Why: the coordinator on the main node posts the webhook when it decides
(node/notifysend.py); what it could not post (the main cannot reach the webhook's
host, its queue was full, it died before posting) is left in `coord/notify.json` with
why, and the user's `notify.command` is a line for this machine, never run on the
main. Each notice has an id, chosen on the main; this machine claims an id for a
channel (webhook, command) by creating a file of that name (O_EXCL) before it sends,
so two `status` calls at once, or one after another, send it once. A notice the
coordinator still means to post (pending while it lives) is left to it.
"""

from __future__ import annotations

import os
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mntui.sessions.launch.board import BoardView
    from mntui.sessions.node.notifytext import Notice
    from mntui.sessions.notify import NotifyPolicy
    from mntui.sessions.runs import RunRecord

__all__ = ["CLAIMS", "Channel", "due", "send_missed"]

CLAIMS = "notified"  # in the chain's local dir: one file per notice and channel sent
DRAIN = 10.0  # seconds a contact waits for what it sends, at most


class Channel(StrEnum):
    """How this machine sends a notice; its value names the claim file (`<id>.webhook`)."""

    WEBHOOK = "webhook"
    COMMAND = "command"


def due(view: BoardView | None) -> list[tuple[str, Notice, tuple[Channel, ...]]]:
    """The board's notices this machine may have to send, each with its channels: the
    webhook when the coordinator will not post it, the command when there is one."""
    data = view.notify if view is not None else None
    if not isinstance(data, dict) or view is None or not data.get("notices"):
        return []  # a cold status with nothing to send loads nothing more
    from mntui.sessions.node.notifytext import ABANDONED, DROPPED, FAILED, PENDING, notice_of

    unsent = {FAILED, DROPPED, ABANDONED} | (set() if view.alive else {PENDING})
    here = data.get("here") is True
    items = data.get("notices")
    out: list[tuple[str, Notice, tuple[Channel, ...]]] = []
    for item in items if isinstance(items, list) else []:
        got = notice_of(item)
        if got is None:
            continue
        channels: tuple[Channel, ...] = (Channel.WEBHOOK,) if item.get("webhook") in unsent else ()
        channels += (Channel.COMMAND,) if here else ()
        if channels:
            out.append((got[0], got[1], channels))
    return out


def _claims(record: RunRecord) -> Path:
    """One dir for the whole chain: the coordinator's notices are the chain's."""
    return record.dir.parent / (record.chain or record.run_id) / CLAIMS


def _claim(where: Path, nid: str, channel: Channel) -> bool:
    """True for the one caller that creates the claim: it sends; any other does not."""
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(where / f"{nid}.{channel}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    except OSError:
        return False  # no claim, no send: a second send is worse than a late one
    return True


def _policy(record: RunRecord) -> NotifyPolicy | None:
    """The run's notify policy, from its config file as it is now (the webhook is not
    on the main's board: a password stays in the config)."""
    from mntui.sessions.config import ConfigError, load_config

    try:
        return load_config(record.config).notify
    except (ConfigError, OSError, ValueError):
        return None


def send_missed(record: RunRecord, view: BoardView | None) -> int:
    """Sends, once, what is due on the board; the number of deliveries started. Loads
    the config only when something is due and not claimed yet."""
    where = _claims(record)
    todo = [
        (nid, n, [c for c in chans if not (where / f"{nid}.{c}").exists()])
        for nid, n, chans in due(view)
    ]
    todo = [t for t in todo if t[2]]
    if not todo:
        return 0
    policy = _policy(record)
    if policy is None:  # the config unreadable now: the next contact tries again
        return 0
    return _deliver(record, policy, where, todo)


def _deliver(record: RunRecord, policy: NotifyPolicy, where: Path, todo: list[Any]) -> int:
    """Each due channel is claimed, sent or not: one the config no longer asks for
    (its events, its webhook or command gone) is not looked at again."""
    from dataclasses import replace

    from mntui.sessions.errors import state_dir
    from mntui.sessions.notify import Notifier

    log = state_dir() / record.job / "notify.log"
    hook = Notifier(replace(policy, command=None), log) if policy.webhook else None
    run = Notifier(replace(policy, webhook=None), log) if policy.command else None
    started = 0
    for nid, notice, channels in todo:
        for channel, sender in ((Channel.WEBHOOK, hook), (Channel.COMMAND, run)):
            if channel not in channels or not _claim(where, nid, channel):
                continue
            if sender is not None and policy.active and notice.event in policy.on:
                sender.send(notice)
                started += 1
    deadline = time.monotonic() + DRAIN
    for sender in (hook, run):
        if sender is not None:  # what is not delivered by then is said in notify.log
            sender.close(max(0.0, deadline - time.monotonic()))
    return started
