"""An unauthenticated flood of a TCP port (issue 39): hold HOLD idle connections, each
reopened the moment the server drops it, and never send a byte: nothing here knows the
run's secret. Before the coordinator's door (node/coord/door.py), 40 of them held every
handshake slot and a coordinator started again never heard its sentinels.

    python3 tests/portflood.py HOST PORT HOLD SECONDS

prints one line at its end (or at SIGTERM): how many connections it opened, how many the
server dropped within half a second, and how long it held one at most. A port that is
not listening yet is tried again every 20 ms (a flood started before a launch).
The tests and bench/chaos_attack.py run it as a process of its own (`flooding`), and
stop it by its PID."""

from __future__ import annotations

import errno
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FAST = 0.5  # seconds: a connection dropped sooner was turned away, not timed out


def flood(host: str, port: int, hold: int, seconds: float) -> str:
    sel = selectors.DefaultSelector()
    opened = fast = 0
    longest = 0.0
    end = [time.monotonic() + seconds]
    signal.signal(signal.SIGTERM, lambda *_: end.__setitem__(0, 0.0))
    while time.monotonic() < end[0]:
        while len(sel.get_map()) < hold:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            if s.connect_ex((host, port)) not in (0, errno.EINPROGRESS):
                s.close()
                time.sleep(0.02)  # not listening (yet): no spin
                break
            sel.register(s, selectors.EVENT_READ, time.monotonic())
            opened += 1
        refused = False
        for key, _ in sel.select(timeout=0.005):
            s: Any = key.fileobj
            try:
                data = s.recv(1)
            except OSError:  # refused: the port closed (a coordinator started again)
                data, refused = b"", True
            if not data:  # dropped by the server
                held = time.monotonic() - key.data
                fast += held < FAST
                longest = max(longest, held)
                sel.unregister(s)
                s.close()
        if refused:
            time.sleep(0.02)  # no spin while nothing listens
    return (
        f"flood: {opened} connections opened, {fast} dropped within {FAST:g} s, "
        f"held {longest:.1f} s at most"
    )


@contextmanager
def flooding(port: int, hold: int = 40, seconds: float = 600.0) -> Iterator[list[str]]:
    """The flood at 127.0.0.1:`port` while the block runs; its line in the list after."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__)), "127.0.0.1", str(port), str(hold), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    said: list[str] = []
    try:
        yield said
    finally:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        said.append(out.strip())


if __name__ == "__main__":
    print(flood(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])), flush=True)
