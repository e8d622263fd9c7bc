"""One command on a node over one fresh `ssh`, started before the command is known.

Why: a cold `mntui status` of a run the cluster watches asks the main node one thing
(tui/cli/quickstatus.py). A persistent connection (either transport) costs its setup
for nothing then, and the handshake is most of the wait: started as soon as the host
is known, it runs while the caller loads what builds the script and reads the answer.
The script goes on stdin to `sh -s` and its answer is read between the markers, as on
every node (nodeshell.py: frame, unwrap). The ssh options are openssh.oneshot_argv's,
made when the config was loaded; this module imports neither the config nor paramiko.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .nodeshell import Result


class OneShotNode:
    """A node reached by one `ssh ... host sh -s`, connecting from construction on; it
    runs one script (`run`), and `close` stops whatever is left of it."""

    is_local = False

    def __init__(self, name: str, host: str, ssh: Sequence[str]) -> None:
        """OSError when there is no `ssh` to start."""
        self.name, self.host = name, host
        self._t0 = time.monotonic()
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [*ssh, "--", host, "sh -s"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def run(self, script: str, timeout: float | None = None) -> Result:
        """`timeout` counts from the connection's start: the handshake is in it. What
        frames and reads the script loads here, while ssh connects, not before it."""
        from mntui.sessions.results import NodeError

        from . import unreached
        from .nodeshell import frame, unwrap

        proc, self._proc = self._proc, None
        if proc is None:
            raise NodeError(self.name, "one command a connection, and it has run")
        left = None if timeout is None else max(0.1, self._t0 + timeout - time.monotonic())
        try:
            out, err = proc.communicate(frame(script).encode(), timeout=left)
        except subprocess.TimeoutExpired:
            _stop(proc)
            raise NodeError(self.name, f"no answer within {timeout:.0f}s") from None
        except BaseException:  # Ctrl+C: no ssh of ours is left behind
            _stop(proc)
            raise
        raw, errors = out.decode(errors="replace"), err.decode(errors="replace")
        # ssh's own exit and words for a host that did not answer (a slow reader is no
        # cut: its timeout above marks nothing)
        if proc.returncode == 255 and unreached.timed_out(errors):
            unreached.mark(self.host, errors.strip()[-200:], time.monotonic() - self._t0)
        return unwrap(self.name, raw, errors, time.monotonic() - self._t0)

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Our own ssh, by its Popen (never by name), reaped."""
    if proc.poll() is None:
        proc.kill()
    proc.communicate()
