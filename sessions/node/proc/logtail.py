"""The node's own reading of its job's output: new bytes of output.log each sample,
cut into lines for the step tracker.

Why on the node: the coordinator must know the job trains on (steps advance) while
the manager is away, and reading a log where it is written costs a `read` of the new
bytes, not a round trip. The output is the job's, so it is data: bounded per sample
(`CHUNK`), a line longer than `MAX_LINE` is cut, bytes are decoded with replacement,
and a log that shrinks (truncated, replaced) is read again from its start.
"""

from __future__ import annotations

import os
import re
import time

from mntui.sessions.node.files.plainfile import plain
from mntui.sessions.node.rules.steps import DEFAULT_PATTERN, MAX_LINE, ProgressTracker

CHUNK = 64 * 1024  # bytes read a sample at most: a flood is read over several samples


class LogTail:
    def __init__(self, path: str, node: str, pattern: str | None = None) -> None:
        self.path, self.node = path, node
        self.offset = 0
        self.partial = b""
        self.tracker = ProgressTracker(re.compile(pattern or DEFAULT_PATTERN))

    def read(self) -> None:
        """Feeds what the log got since the last call (possibly nothing: an empty feed
        is what lets the rate fall when the job stops printing)."""
        data = b""
        try:
            with open(self.path, "rb", opener=plain) as f:
                size = os.fstat(f.fileno()).st_size
                if size < self.offset:  # a new file under the same name
                    self.offset, self.partial = 0, b""
                f.seek(self.offset)
                data = f.read(CHUNK)
        except OSError:
            pass
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()[-MAX_LINE:]
        text = [ln[:MAX_LINE].decode("utf-8", "replace") for ln in lines]
        pending = self.partial.decode("utf-8", "replace")
        self.tracker.feed(self.node, text, time.time(), pending)

    def steps(self) -> dict[str, float | int | None]:
        """The node's step and rate, and its pace (the step interval and the longest
        pause seen), from which the coordinator learns `stall_after: auto`."""
        p = self.tracker.snapshot().get(self.node)
        pace = self.tracker.pace()
        out: dict[str, float | int | None] = {
            "interval": round(pace.step_interval, 4) if pace else None,
            "longest": round(pace.longest_gap, 4) if pace else None,
            "gaps": pace.gaps if pace else None,
        }
        if p is None:
            return {"step": None, "rate": None, **out}
        return {"step": p.step, "rate": None if p.rate is None else round(p.rate, 3), **out}
