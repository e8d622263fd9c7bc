"""What a notification says and how a webhook gets it: the one rule, for both senders.

Why in the node package: the coordinator on the main node sends a run's notifications
when it decides (a laptop asleep would send them hours late), and this machine sends
what it could not, at its next contact; both must say the same words in the same body,
so the words and the body are built here, with the standard library alone, and
`mntui.sessions.notify` re-exports them. The summary carries node data (a log's error
text): chat webhooks get it with @-mentions defused, so a line printed by a job cannot
ping a whole channel. A webhook URL is a password: no message here ever repeats it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any
from urllib.parse import urlsplit

from .termsafe import one_line as _one_line

__all__ = [
    "ALL_EVENTS",
    "ENTRY_TEXT",
    "Notice",
    "NotifyEvent",
    "NotifyRules",
    "check_webhook_url",
    "clean",
    "entry_of",
    "finished_summary",
    "gave_up_summary",
    "notice_of",
    "one_line",
    "raw",
    "redact",
    "restart_summary",
    "rules_json",
    "rules_of",
    "teardown_summary",
    "webhook_body",
]


class NotifyEvent(str, Enum):
    TEARDOWN = "teardown"  # the watchdog took the job down
    FAILED = "failed"  # a node failed, or the job ended with a non-zero code
    FINISHED = "finished"  # every node exited 0
    RESTART = "restart"  # the job is being relaunched
    GAVE_UP = "gave-up"  # no restarts left
    SLOW = "slow"  # a straggler: below the median rate for a while
    QUARANTINED = "quarantined"  # restart.quarantine_after kept a node out

    def __str__(self) -> str:
        return str(self.value)


ALL_EVENTS = frozenset(NotifyEvent)
MAX_TEXT = 4000  # summary and detail values, in the environment and the JSON
CHAT_TEXT = 1900  # `text`/`content`: Discord refuses more than 2000 characters
ENTRY_TEXT = 1000  # a summary as the coordinator keeps it for this machine (its board)
JOB_TEXT, RUN_TEXT = 256, 128  # a job's name and a run id, as an entry keeps them
MAX_DETAILS = 16  # a notice's details, as a coordinator's entry may carry them
MAX_ID = 64


class WebhookState(str, Enum):
    """A notice's webhook on the main's board (notifysend.py): what this machine does."""

    PENDING = "pending"  # queued or under way on the main
    SENT = "sent"
    FAILED = "failed"  # the main could not post it: this machine sends it
    DROPPED = "dropped"  # the main's queue was full: this machine sends it
    ABANDONED = "abandoned"  # its coordinator ended or died first: this machine sends it
    OFF = "off"  # no webhook configured

    def __str__(self) -> str:
        return str(self.value)


PENDING, SENT, FAILED, DROPPED, ABANDONED, OFF = tuple(WebhookState)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_ID = re.compile(r"[0-9A-Za-z._-]{1,64}")


@dataclass(frozen=True)
class Notice:
    event: NotifyEvent
    job: str
    run_id: str
    summary: str  # one line; may hold node data
    report_path: str | None = None
    details: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NotifyRules:
    """What the coordinator on the main does with a run's notices (watch.json's
    `notify`): posts them to `webhook` (None: no webhook, this machine's command alone),
    for the events in `on`; `here`: this machine has a command to run for each."""

    webhook: str | None
    on: frozenset[str]
    timeout: float  # the whole delivery, its one retry included
    here: bool = False


def rules_of(v: object, error: type[Exception] = ValueError) -> NotifyRules | None:
    """watch.json's `notify`, strictly (None: absent); `error` says what is wrong."""
    if v is None:
        return None
    if not isinstance(v, dict):
        raise error("watch.json: notify must be an object")
    hook, on, timeout, here = v.get("webhook"), v.get("on"), v.get("timeout"), v.get("here")
    if hook is not None and (not isinstance(hook, str) or check_webhook_url(hook) is not None):
        raise error("watch.json: notify.webhook is not a usable URL")
    events = {str(e) for e in NotifyEvent}
    if not isinstance(on, list) or not all(isinstance(e, str) and e in events for e in on):
        raise error("watch.json: notify.on must be a list of events")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise error("watch.json: notify.timeout must be a number")
    if not 0 < timeout <= 600 or type(here) is not bool:
        raise error("watch.json: notify.timeout or notify.here out of range")
    return NotifyRules(hook, frozenset(on), float(timeout), here)


def rules_json(r: NotifyRules | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"webhook": r.webhook, "on": sorted(r.on), "timeout": r.timeout, "here": r.here}


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


def raw(text: str) -> bytes:
    """Node text back to its bytes (undecodable bytes arrive surrogate-escaped); NUL,
    which no environment can hold, becomes U+FFFD."""
    try:
        data = text[:MAX_TEXT].encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        data = text[:MAX_TEXT].encode("utf-8", "replace")
    return data.replace(b"\0", "\ufffd".encode())


def clean(text: str) -> str:
    return raw(text).decode("utf-8", "replace")


def one_line(text: str, limit: int = 300) -> str:
    return _one_line(clean(text), limit)


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


# -- the summaries: what each decision says, whoever makes it ---------------------------


def teardown_summary(node: str, why: str, headline: str | None = None, tail: str = "") -> str:
    """The watch took the job down: the report's headline when one was built (this
    machine's), else the culprit and why; `tail` is the chain's line, when it ends."""
    return (headline or f"{node} {why}") + tail


def failed_summary(headline: str | None, tail: str = "") -> str:
    """The job ended by itself and a node failed."""
    return (headline or "job is no longer running (failed)") + tail


def finished_summary(job: str, tail: str = "") -> str:
    return f"{job} finished{tail}"


def restart_summary(
    k: int, most: int, delay: float, why: str, cause: str, swapped: str = ""
) -> str:
    """Attempt `k` of `most` restarts starts after `delay` s; `cause`: the last end's."""
    said = f"attempt {k}/{most} in {delay:g}s ({why})" + (f"; {swapped}" if swapped else "")
    return f"{said}; last: {cause}"


def gave_up_summary(why: str, cause: str, tail: str = "") -> str:
    return f"gave up: {why}; last: {cause}{tail}"


# -- a notice as the coordinator keeps it on the main (node data for this machine) -----


def entry_of(notice: Notice, nid: str, at: float) -> dict[str, Any]:
    """A notice and its id, as JSON: what the manager reads back with `notice_of`."""
    return {
        "id": nid,
        "at": at,
        "event": str(notice.event),
        "job": clean(notice.job)[:JOB_TEXT],
        "run": clean(notice.run_id)[:RUN_TEXT],
        "summary": clean(notice.summary)[:ENTRY_TEXT],
        "report": notice.report_path,
        "details": {clean(k)[:64]: clean(v) for k, v in list(notice.details.items())[:MAX_DETAILS]},
    }


def notice_of(d: object) -> tuple[str, Notice] | None:
    """An entry read back from the main (`entry_of`'s shape, checked field by field: it
    is node data), as (id, Notice); None for anything else."""
    if not isinstance(d, dict):
        return None
    nid, job, run, summary = d.get("id"), d.get("job"), d.get("run"), d.get("summary")
    report, details = d.get("report"), d.get("details", {})
    try:
        event = NotifyEvent(d.get("event"))
    except ValueError:
        return None
    texts = (job, run, summary)
    if not (isinstance(nid, str) and _ID.fullmatch(nid)) or not all(
        isinstance(t, str) and len(t) <= MAX_TEXT for t in texts
    ):
        return None
    if report is not None and not (isinstance(report, str) and len(report) <= MAX_TEXT):
        return None
    if not isinstance(details, dict) or len(details) > MAX_DETAILS:
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in details.items()):
        return None
    got = {k[:64]: v[:MAX_TEXT] for k, v in details.items()}
    return nid, Notice(event, str(job), str(run), str(summary), report, got)
