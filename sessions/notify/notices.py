"""What a notification says, and how it is put for a webhook and for a command.

The summary carries node data (a log's error text): the command gets it through its
environment only, never through its shell line, and chat webhooks get it with
@-mentions defused, so a line printed by a job cannot ping a whole channel. A webhook
URL is a password: no message here ever repeats it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import urlsplit

from mntui.sessions import termsafe
from mntui.sessions.procs import TAG_VAR

__all__ = [
    "ALL_EVENTS",
    "Notice",
    "NotifyEvent",
    "NotifyPolicy",
    "check_webhook_url",
    "command_env",
    "one_line",
    "redact",
    "webhook_body",
]


class NotifyEvent(StrEnum):
    TEARDOWN = "teardown"  # the watchdog took the job down
    FAILED = "failed"  # a node failed, or the job ended with a non-zero code
    FINISHED = "finished"  # every node exited 0
    RESTART = "restart"  # the job is being relaunched
    GAVE_UP = "gave-up"  # no restarts left
    SLOW = "slow"  # a straggler: below the median rate for a while
    QUARANTINED = "quarantined"  # restart.quarantine_after kept a node out


ALL_EVENTS = frozenset(NotifyEvent)
MAX_TEXT = 4000  # summary and detail values, in the environment and the JSON
CHAT_TEXT = 1900  # `text`/`content`: Discord refuses more than 2000 characters
# A command started from inside a job's pane must not carry the job's tag, or the next
# kill of that job would count it as one of the job's processes.
_NOT_FOR_COMMANDS = frozenset({TAG_VAR.encode(), f"{TAG_VAR}_DIR".encode()})
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


@dataclass(frozen=True)
class NotifyPolicy:
    webhook: str | None = None
    command: str | None = None  # the user's own shell line, run with `sh -c`
    on: frozenset[NotifyEvent] = ALL_EVENTS
    timeout: float = 5.0  # the whole delivery: the POST (and its one retry) beside the command

    @property
    def active(self) -> bool:
        return bool(self.webhook or self.command) and bool(self.on)


@dataclass(frozen=True)
class Notice:
    event: NotifyEvent
    job: str
    run_id: str
    summary: str  # one line; may hold node data
    report_path: str | None = None
    details: Mapping[str, str] = field(default_factory=dict)


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


def _raw(text: str) -> bytes:
    """Node text back to its bytes (undecodable bytes arrive surrogate-escaped); NUL,
    which no environment can hold, becomes U+FFFD."""
    try:
        data = text[:MAX_TEXT].encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        data = text[:MAX_TEXT].encode("utf-8", "replace")
    return data.replace(b"\0", "\ufffd".encode())


def _clean(text: str) -> str:
    return _raw(text).decode("utf-8", "replace")


def one_line(text: str, limit: int = 300) -> str:
    return termsafe.one_line(_clean(text), limit)


def _defuse(text: str) -> str:
    """`@everyone`, `@channel`, `<!here>`, `<@U123>` stay readable but ping nobody."""
    return text.replace("@", "@\u200b").replace("<!", "<\u200b!")


def webhook_body(notice: Notice) -> bytes:
    """Slack and Mattermost read `text`, Discord `content`; the rest is for scripts."""
    summary = _clean(notice.summary)
    chat = summary if len(summary) <= CHAT_TEXT else summary[: CHAT_TEXT - 1] + "…"
    body: dict[str, object] = {
        "text": _defuse(chat),
        "content": _defuse(chat),
        "allowed_mentions": {"parse": []},
        "event": str(notice.event),
        "job": _clean(notice.job),
        "run_id": _clean(notice.run_id),
        "summary": summary,
        "report": _clean(notice.report_path) if notice.report_path is not None else None,
        "details": {_clean(k): _clean(v) for k, v in notice.details.items()},
    }
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def command_env(notice: Notice, base: Mapping[bytes, bytes]) -> dict[bytes, bytes]:
    env = {k: v for k, v in base.items() if k not in _NOT_FOR_COMMANDS}
    env[b"MNTUI_EVENT"] = str(notice.event).encode()
    env[b"MNTUI_JOB"] = _raw(notice.job)
    env[b"MNTUI_RUN_ID"] = _raw(notice.run_id)
    env[b"MNTUI_SUMMARY"] = _raw(notice.summary)
    env[b"MNTUI_REPORT"] = _raw(notice.report_path or "")
    return env
