"""A sentinel's shipping of its node's new log bytes to the coordinator, while someone
follows the run (the app: tui/app/streaming.py) and only then.

Why here and bounded: the app of a run the cluster watches reads every node's log from
the coordinator over one connection instead of one poll per node, so each node sends
its own new bytes where they are written. Nobody following costs nothing (no read, no
frame); a follow is a lease the coordinator renews (feedwire.LEASE), tied to the channel
it came on, so a lost coordinator stops the shipping by itself. A node that prints
faster than RATE is shipped from near the end; a log that shrinks is read again from
its start. Every frame says its bytes' offset in the log (`at`) and whether this
shipper chose that start (`fresh`), so the coordinator places them (feedserve.Backlog):
a follow started again overlaps what it has (no line twice) or lies past it (the bytes
between said skipped, never dropped silently), whichever process or channel ships.
"""

from __future__ import annotations

import os
import time
from typing import Any

from mntui.sessions.node.files.plainfile import plain
from mntui.sessions.node.wire import feedwire

TICK = 0.25  # seconds between two reads of the log while following
BACK = 16 * 1024  # bytes before the end a new follow starts from (the pane's backlog)


class Shipper:
    """One per sentinel; `follow` and `ship` are called from its link's thread only."""

    def __init__(self, rate: int = feedwire.RATE) -> None:
        self.rate = rate
        self.until = 0.0  # monotonic: the follow's lease ends
        self.ch: Any = None  # the channel the lease came on
        self.path: str | None = None
        self.offset: int | None = None  # None: start near the end at the next read
        self.said: int | None = None  # the offset the last frame ended at; None: fresh
        self.allow = 0.0  # bytes the rate allows now
        self.at = 0.0  # monotonic: the last read
        self.malformed = 0  # `follow` frames of another shape

    def follow(self, ch: object, msg: dict[str, Any], now: float | None = None) -> None:
        """The coordinator's `follow`: ship for its lease's seconds from now (0: stop)."""
        try:
            lease = feedwire.check_follow(msg)
        except feedwire.Malformed:
            self.malformed += 1
            return
        now = time.monotonic() if now is None else now
        if lease <= 0:
            self.until, self.offset = 0.0, None
            return
        if self.ch is not ch or now >= self.until:
            self.offset = None  # a new follow: from near the end (the coordinator places it)
        self.ch, self.until = ch, now + lease

    def ship(self, ch: Any, path: str, run: str, now: float | None = None) -> int:
        """Sends what the log got since the last call, within the rate; bytes sent."""
        now = time.monotonic() if now is None else now
        if ch is not self.ch or now >= self.until:
            self.offset = None
            return 0
        if now - self.at < TICK:
            return 0
        self.allow = min(float(self.rate), self.allow + self.rate * min(1.0, now - self.at))
        self.at = now
        if path != self.path:
            self.path, self.offset = path, None
        if self.offset is None:
            self.said = None  # the next frame is fresh: its start is this shipper's choice
        got = self.read(path, int(min(self.allow, feedwire.CHUNK_MAX)))
        if got is None:
            return 0
        at, data = got
        if not data and at == self.said:
            return 0  # nothing new (a fresh start, a jump or a shrink is said, if empty)
        ch.send("log", **feedwire.log_fields(run, data, at, self.said is None))
        self.said = at + len(data)
        self.allow -= len(data)
        return len(data)

    def read(self, path: str, budget: int) -> tuple[int, bytes] | None:
        """(offset, at most `budget` new bytes from it); behind by more than a second's
        rate, the bytes up to `budget` before the end are passed over (the offset says
        it). None: no log to read."""
        try:
            with open(path, "rb", opener=plain) as f:
                size = os.fstat(f.fileno()).st_size
                if self.offset is None:
                    self.offset = _line_start(f, max(0, size - BACK))
                elif size < self.offset:  # a new file under the same name
                    self.offset = 0
                if size - self.offset > self.rate:
                    self.offset = size - budget
                f.seek(self.offset)
                data = f.read(max(0, budget))
        except OSError:
            return None
        at = self.offset
        self.offset += len(data)
        return at, data


def _line_start(f: Any, at: int) -> int:
    """The start of the first whole line at or after `at` (a pane starts on a line)."""
    if at == 0:
        return 0
    f.seek(at - 1)
    head = f.read(BACK)
    cut = head.find(b"\n")
    return at + cut if cut >= 0 else at
