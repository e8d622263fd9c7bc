"""The webhook notifications of a run the cluster watches that this machine posts, once,
at its next contact: what the coordinator could not.

Why: the coordinator on the main node posts the webhook and runs the user's
`notify.command` when it decides (node/notice/notifysend.py); what it could not post (the
main cannot reach the webhook's host, its queue was full, it died before posting) is
left in `coord/notify.json` with why. A command is not run from here: it is a line for
the main node, run there or not at all (the coordinator's log and journal say which).
Each notice has an id, chosen on the main; this machine claims an id by creating a
file of that name (O_EXCL) before it posts, so two `status` calls at once, or one
after another, post it once. A notice the coordinator still means to post (pending
while it lives) is left to it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mntui.sessions.launch.board import BoardView
    from mntui.sessions.node.rules.notifytext import Notice
    from mntui.sessions.notify import NotifyPolicy
    from mntui.sessions.runs import RunRecord

__all__ = ["CLAIMS", "due", "send_missed"]

CLAIMS = "notified"  # in the chain's local dir: one file per notice posted (`<id>.webhook`)
CHANNEL = "webhook"  # the claim file's suffix
DRAIN = 10.0  # seconds a contact waits for what it posts, at most


def due(view: BoardView | None) -> list[tuple[str, Notice]]:
    """The board's notices this machine may have to post: those the coordinator will not."""
    data = view.notify if view is not None else None
    if not isinstance(data, dict) or view is None or not data.get("notices"):
        return []  # a cold status with nothing to send loads nothing more
    from mntui.sessions.node.rules.notifytext import ABANDONED, DROPPED, FAILED, PENDING, notice_of

    unsent = {FAILED, DROPPED, ABANDONED} | (set() if view.alive else {PENDING})
    items = data.get("notices")
    out: list[tuple[str, Notice]] = []
    for item in items if isinstance(items, list) else []:
        got = notice_of(item)
        if got is not None and item.get("webhook") in unsent:
            out.append(got)
    return out


def _claims(record: RunRecord) -> Path:
    """One dir for the whole chain: the coordinator's notices are the chain's."""
    return record.dir.parent / (record.chain or record.run_id) / CLAIMS


def _claim(where: Path, nid: str) -> bool:
    """True for the one caller that creates the claim: it posts; any other does not."""
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(where / f"{nid}.{CHANNEL}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
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
    """Posts, once, what is due on the board; the number of posts started. Loads the
    config only when something is due and not claimed yet."""
    where = _claims(record)
    todo = [(nid, n) for nid, n in due(view) if not (where / f"{nid}.{CHANNEL}").exists()]
    if not todo:
        return 0
    policy = _policy(record)
    if policy is None:  # the config unreadable now: the next contact tries again
        return 0
    return _deliver(record, policy, where, todo)


def _deliver(
    record: RunRecord, policy: NotifyPolicy, where: Path, todo: list[tuple[str, Notice]]
) -> int:
    """Each due notice is claimed, posted or not: one the config no longer asks for
    (its events, its webhook gone) is not looked at again."""
    from dataclasses import replace

    from mntui.sessions.errors import state_dir
    from mntui.sessions.notify import Notifier

    log = state_dir() / record.job / "notify.log"
    hook = Notifier(replace(policy, command=None), log) if policy.webhook else None
    started = 0
    for nid, notice in todo:
        if not _claim(where, nid):
            continue
        if hook is not None and policy.active and notice.event in policy.on:
            hook.send(notice)
            started += 1
    if hook is not None:  # what is not delivered by then is said in notify.log
        hook.close(DRAIN)
    return started
