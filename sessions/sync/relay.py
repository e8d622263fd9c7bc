"""`python -m mntui.sessions.sync.relay MARKER ssh ...`: ssh for rsync's `-e` and git's
GIT_SSH_COMMAND, minus what a node's login shell prints on stdout before the remote
command starts (conda, pyenv): that noise would break their protocols.
"""

from __future__ import annotations

import os
import subprocess
import sys


def relay(marker: bytes, command: list[str]) -> int:
    """Run `command` (ssh) with our stdin and stderr, and copy its stdout from just after
    `marker`: what a login shell printed before it never reaches rsync or git."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    fd, tail, found = proc.stdout.fileno(), b"", False
    try:
        while chunk := os.read(fd, 1 << 16):
            if found:
                _write(chunk)
                continue
            tail += chunk
            at = tail.find(marker)
            if at >= 0:
                found = True
                _write(tail[at + len(marker) :])
            else:
                tail = tail[-len(marker) :]
    except (BrokenPipeError, KeyboardInterrupt):
        proc.terminate()
    return proc.wait()


def _write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


if __name__ == "__main__":
    sys.exit(relay(sys.argv[1].encode(), sys.argv[2:]))
