"""Hosts this process could not reach a moment ago: asked again, they fail at once.

Why: one `mntui status` during a cut of this machine's network reached the same lost
hosts six times in turn, one connect timeout each (the cold path's board, the main's
board again, a successor's epoch, the direct poll, the coordinator's word for the
lines, a successor again): 30.8 s with `ssh.connect_timeout: 5` (issue 38). A host that
did not answer within the timeout is taken for unreachable for HOLD timeouts more, in
this process only (a command's life; a later look, or the app's next poll after it,
tries again). Only a timeout counts: a refused connection or a failed login is quick
and is said as itself each time.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from mntui.sessions.results import NodeError

if TYPE_CHECKING:
    from mntui.sessions.config import SshPolicy

HOLD = 3.0  # connect timeouts a host that timed out stays unreachable here
_LOCK = threading.Lock()
_HELD: dict[str, tuple[float, float, str]] = {}  # host -> (since, until, why)


def mark(host: str, why: str, timeout: float) -> None:
    now = time.monotonic()
    with _LOCK:
        _HELD[host] = (now, now + HOLD * max(1.0, timeout), why)


def check(name: str, host: str) -> None:
    """NodeError at once when `host` timed out here a moment ago."""
    now = time.monotonic()
    with _LOCK:
        held = _HELD.get(host)
        if held is not None and now >= held[1]:
            del _HELD[host]
            held = None
    if held is not None:
        raise NodeError(name, f"{held[2]} (no answer {now - held[0]:.0f} s ago: not tried again)")


NO_ANSWER = ("timed out", "Connection timeout", "Error reading SSH protocol banner")


def failed(host: str, why: str, took: float, policy: SshPolicy, said: str = "") -> None:
    """A connection that failed: marked when it got no answer, by ssh's words (`said`,
    or ours in `why`) or by its time (it took the whole timeout: under load the words
    paramiko chooses vary)."""
    timeout = policy.connect_timeout
    if timed_out(said or why) or took >= 0.9 * timeout:
        mark(host, why, timeout)


def timed_out(text: str) -> bool:
    """ssh's own words (OpenSSH's stderr, paramiko's exception as we said it) for a
    host that got no answer: nothing on the way, or an sshd that never spoke."""
    return any(words in text for words in NO_ANSWER)
