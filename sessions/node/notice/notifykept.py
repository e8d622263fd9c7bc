"""What the coordinator keeps of its notices: `coord/notify.json`, within a bound the
manager's read always takes whole, and a predecessor's file read back.

Why apart from the outbox (notifysend.py): the file outlives the coordinator that
wrote it. The manager reads it at its next contact (launch/board.py, BOARD_READ bytes),
and a coordinator started again (resume.py) reads its predecessor's: each entry is node
data then, checked field by field and cut as this version cuts its own, so the file
stays within the manager's read whatever the predecessor wrote, and a notice the
predecessor left pending, which it will never post, is the manager's to send.
"""

from __future__ import annotations

import json
from typing import Any

from mntui.sessions.node.files.plainfile import plain
from mntui.sessions.node.rules.notifytext import (
    ABANDONED,
    ENTRY_TEXT,
    JOB_TEXT,
    PENDING,
    RUN_TEXT,
    Notice,
    WebhookState,
    entry_of,
    notice_of,
    one_line,
)

FILE = "notify.json"  # in coord/: every notice and what became of it
BOARD_READ = 256 << 10  # bytes of the file the manager's board read takes (launch/board.py)
WHY_TEXT = 300  # what became of a notice: one line (an HTTP reason phrase may be 64 KiB)
# The most one entry takes in the file: write_json escapes non-ASCII, and a character
# beyond the BMP is two \uXXXX escapes, 12 bytes; its ids, times and keys fit in 512.
ENTRY_MOST = 12 * (ENTRY_TEXT + JOB_TEXT + RUN_TEXT + WHY_TEXT) + 512
KEEP = (BOARD_READ - 512) // ENTRY_MOST  # the latest notices kept: the file always fits


def earlier(path: str) -> list[dict[str, Any]]:
    """A predecessor's notices (a coordinator started again, resume.py): the ones it
    left pending will never be posted by it, so they are the manager's now. Each is
    kept as this version keeps its own (its texts cut as `entry_of` cuts them), so the
    file stays within the manager's read whatever the predecessor wrote."""
    try:
        with open(path, encoding="utf-8", opener=plain) as f:
            data = json.loads(f.read(4 << 20))
    except (OSError, ValueError, RecursionError):
        return []
    items = data.get("notices") if isinstance(data, dict) else None
    out = []
    for e in items[-KEEP:] if isinstance(items, list) else []:
        got = notice_of(e)
        if got is None:
            continue
        nid, n = got
        kept = entry_of(Notice(n.event, n.job, n.run_id, n.summary), nid, _time(e.get("at")))
        state, why = _state(e.get("webhook")), e.get("why")
        if state is PENDING:
            state, why = ABANDONED, "the coordinator was started again before it sent"
        kept.update(
            webhook=state.value, why=one_line(why, WHY_TEXT) if isinstance(why, str) else None
        )
        if isinstance(e.get("done_at"), (int, float)):
            kept["done_at"] = _time(e["done_at"])
        out.append(kept)
    return out


def _state(v: object) -> WebhookState:
    try:
        return WebhookState(v)
    except ValueError:
        return ABANDONED  # unknown to this version: the manager's to send


def _time(v: object) -> float:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e12
    return float(v) if ok and isinstance(v, (int, float)) else 0.0
