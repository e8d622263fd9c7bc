"""The webhook: which URL may be posted to, what body it gets, and the rules the
coordinator notifies by (watch.json's `notify`: the webhook, the command, the events).

Why apart from the words (notifytext.py): the words are the same whoever tells them (a
command here, a webhook from the main); this is what only a webhook needs, shared by
both of its senders (the coordinator's outbox, notifysend.py, and this machine's, which
re-exports it from `mntui.sessions.notify`). A chat webhook gets the summary with
@-mentions defused, so a line printed by a job cannot ping a whole channel. A webhook
URL is a password: no message here ever repeats it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .notifytext import CHAT_TEXT, Notice, NotifyEvent, clean

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


COMMAND_MOST = 64 << 10  # characters of a notify.command the watch file carries


@dataclass(frozen=True)
class NotifyRules:
    """What the coordinator on the main does with a run's notices (watch.json's
    `notify`), for the events in `on`: posts them to `webhook` and runs `command` (the
    user's shell line, notifycommand.py), each within `timeout`; None: not that way."""

    webhook: str | None
    on: frozenset[str]
    timeout: float  # the whole delivery, its one retry included
    command: str | None = None


def rules_of(v: object, error: type[Exception] = ValueError) -> NotifyRules | None:
    """watch.json's `notify`, strictly (None: absent); `error` says what is wrong."""
    if v is None:
        return None
    if not isinstance(v, dict):
        raise error("watch.json: notify must be an object")
    hook, on, timeout, command = v.get("webhook"), v.get("on"), v.get("timeout"), v.get("command")
    if hook is not None and (not isinstance(hook, str) or check_webhook_url(hook) is not None):
        raise error("watch.json: notify.webhook is not a usable URL")
    events = {str(e) for e in NotifyEvent}
    if not isinstance(on, list) or not all(isinstance(e, str) and e in events for e in on):
        raise error("watch.json: notify.on must be a list of events")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise error("watch.json: notify.timeout must be a number")
    if not 0 < timeout <= 600:
        raise error("watch.json: notify.timeout out of range")
    if command is not None and (
        not isinstance(command, str) or not 0 < len(command) <= COMMAND_MOST or "\0" in command
    ):
        raise error("watch.json: notify.command must be a shell line")
    return NotifyRules(hook, frozenset(on), float(timeout), command)


def rules_json(r: NotifyRules | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"webhook": r.webhook, "on": sorted(r.on), "timeout": r.timeout, "command": r.command}


def check_webhook_url(url: str) -> str | None:
    """None if `url` can be posted to, else why not. The reason never repeats the URL:
    a chat webhook's URL is its password."""
    if _CONTROL.search(url) or any(c.isspace() for c in url):
        return "the URL contains spaces or control characters"
    try:
        parts = urlsplit(url)
        _port = parts.port  # raises on a bad port
    except ValueError as exc:
        return f"not a usable URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return "only http:// and https:// URLs are supported"
    if not parts.hostname:
        return "the URL has no host"
    return None


def redact(url: str) -> str:
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(unusable URL)"
    return f"{parts.scheme}://{parts.hostname}{port}/…"


def _defuse(text: str) -> str:
    """`@everyone`, `@channel`, `<!here>`, `<@U123>` stay readable but ping nobody."""
    return text.replace("@", "@\u200b").replace("<!", "<\u200b!")


def webhook_body(notice: Notice) -> bytes:
    """Slack and Mattermost read `text`, Discord `content`; the rest is for scripts."""
    summary = clean(notice.summary)
    chat = summary if len(summary) <= CHAT_TEXT else summary[: CHAT_TEXT - 1] + "…"
    body: dict[str, object] = {
        "text": _defuse(chat),
        "content": _defuse(chat),
        "allowed_mentions": {"parse": []},
        "event": str(notice.event),
        "job": clean(notice.job),
        "run_id": clean(notice.run_id),
        "summary": summary,
        "report": clean(notice.report_path) if notice.report_path is not None else None,
        "details": {clean(k): clean(v) for k, v in notice.details.items()},
    }
    return json.dumps(body, ensure_ascii=False).encode("utf-8")
