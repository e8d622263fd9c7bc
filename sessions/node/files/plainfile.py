"""A run dir's files, opened as plain files only.

Why: everything in a run dir is the node user's, and so the job's (it runs as that
user). A FIFO put at `coord/kill` blocked the coordinator's judge in open() for good
(an open for reading waits for a writer) while its heartbeats told the sentinels all
was well, and a rank killed then was never torn down (issue 39, finding 2); a symlink
would point a read at /dev/zero or a write at any file of the user's. So each file of
a run dir this package opens goes through `plain` (as `open`'s opener): non-blocking
(a FIFO's open returns at once, or fails for a write with no reader), never through a
symlink at its last component, and then it must be a regular file, else NotPlain (an
OSError, so each caller's `except OSError` takes it as an unreadable file). The reads
stay bounded where they were. A regular file on a hung filesystem still blocks: the
coordinator's heartbeats stop then (coordinator.py `beat`), so the sentinels call it
lost instead of trusting it.
"""

from __future__ import annotations

import errno
import os
import stat


class NotPlain(OSError):
    """The path is there but is no regular file of its own (a FIFO, a device, a socket,
    a directory, a symlink)."""


def plain(path: str, flags: int) -> int:
    """`open(path, ..., opener=plain)`: the file's descriptor, if it is a regular file."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
            raise NotPlain(errno.ELOOP, "a symlink, not a regular file", path) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotPlain(errno.EINVAL, "not a regular file", path)
    return fd


def read_plain(path: str, limit: int) -> bytes | None:
    """At most `limit` bytes of a run dir's file, or None when it is missing, unreadable
    or no regular file."""
    try:
        with open(path, "rb", buffering=0, opener=plain) as f:
            parts, got = [], 0
            while got < limit:
                part = f.read(min(65536, limit - got))
                if not part:
                    break
                parts.append(part)
                got += len(part)
    except OSError:
        return None
    return b"".join(parts)
