"""What a notification says: the events, a notice, its words, and the entry the
coordinator keeps of it: the one rule, for both senders.

Why in the node package: the coordinator on the main node sends a run's notifications
when it decides (a laptop asleep would send them hours late), and this machine sends
what it could not, at its next contact; both must say the same words, so the words are
built here, with the standard library alone, and `mntui.sessions.notify` re-exports
them (the webhook's URL check, body and rules: notifyhook.py). The summary carries node
data (a log's error text): it is cleaned to text here, bounded wherever it is kept.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .restarts import attempt_label
from .termsafe import one_line as _one_line

__all__ = [
    "ALL_EVENTS",
    "ENTRY_TEXT",
    "Notice",
    "NotifyEvent",
    "clean",
    "entry_of",
    "finished_summary",
    "gave_up_summary",
    "notice_of",
    "one_line",
    "raw",
    "restart_summary",
    "teardown_summary",
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
_ID = re.compile(r"[0-9A-Za-z._-]{1,64}")


@dataclass(frozen=True)
class Notice:
    event: NotifyEvent
    job: str
    run_id: str
    summary: str  # one line; may hold node data
    report_path: str | None = None
    details: Mapping[str, str] = field(default_factory=dict)


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
    """Attempt `k` (0-based, restarts.attempt_label) of 1 + `most` (restart.max) starts
    after `delay` s; `why`: the policy's `restart k/max`; `cause`: the last end's."""
    said = f"{attempt_label(k, most)} in {delay:g}s ({why})" + (f"; {swapped}" if swapped else "")
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
