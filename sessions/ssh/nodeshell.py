"""A node's shell: how a script reaches `sh` on any node and how its answer is read back.

Every kind of node runs the same scripts the same way, so this is shared: the local node
(`host: localhost`) runs `sh -s` itself, and ShellNode is the base of both SSH transports
(sessions/ssh/paramikonode.py, sessions/ssh/openssh.py). Design points, each learned the hard way:
- Scripts travel on stdin to `sh -s`, so the login shell (bash, zsh, fish...) never
  parses them, and the local keyboard is never read by a remote command.
- Login shells print noise (conda, pyenv): only output between our markers counts.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mntui.sessions.results import NodeError

if TYPE_CHECKING:  # a cold `status` frames its one script without the config's checks
    from mntui.sessions.config import SshPolicy

_TOKEN = os.urandom(6).hex()  # secrets.token_hex's, without hmac's OpenSSL load
BEGIN = f"__MNTUI_{_TOKEN}_BEGIN__"
END = f"__MNTUI_{_TOKEN}_END__"


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def frame(script: str, seq: int = 0) -> str:
    """Mark our output; run the script in a subshell so its `exit` ends only itself, with
    stdin from /dev/null because stdin is where the scripts come from.

    The answer is captured and printed in one write: sshd does not set TCP_NODELAY on
    exec channels, so a small END marker sent after the output would wait for a delayed
    ACK, 40 ms a command.
    """
    return (
        f"__mntui_o=$( (\n{script}\n) </dev/null; printf '\\n%s %s' {END}{seq} \"$?\")\n"
        f"printf '%s\\n%s\\n' {BEGIN}{seq} \"$__mntui_o\"\n"
    )


def find_end(raw: str, seq: int = 0) -> int:
    """Index just past our end marker, or -1 while it has not arrived."""
    marker = f"\n{END}{seq} "
    at = raw.rfind(marker)
    if at < 0:
        return -1
    nl = raw.find("\n", at + len(marker))
    return -1 if nl < 0 else nl + 1


def unwrap(node: str, raw: str, stderr: str, seconds: float, seq: int = 0) -> Result:
    begin, end = f"{BEGIN}{seq}\n", f"\n{END}{seq} "
    start = raw.find(begin)
    stop = raw.rfind(end)
    if start < 0 or stop < 0 or stop < start:
        tail = (stderr or raw).strip().splitlines()[-3:]
        raise NodeError(
            node, "no answer from the node's shell" + (f": {' | '.join(tail)}" if tail else "")
        )
    body = raw[start + len(begin) : stop]
    code = raw[stop + len(end) :].split(maxsplit=1)[0]
    return Result(int(code), body, stderr, seconds)


# mntui run from inside a job's pane inherits its tag, and from inside any tmux its
# $TMUX: a local node's scripts must neither carry the tag nor drive that other tmux
# server (`tmux -L work`), where the job's sessions would land and never be found.
_NOT_FOR_NODES = ("MNTUI_RUN", "MNTUI_RUN_DIR", "TMUX", "TMUX_PANE")


def untagged_env() -> dict[str, str]:
    """This process's environment less what marks it as ours (a local node's job must
    not carry our tag, nor our tmux's)."""
    return {k: v for k, v in os.environ.items() if k not in _NOT_FOR_NODES}


class LocalNode:
    """A node on this machine (`host: localhost`): same scripts, no SSH."""

    is_local = True

    def __init__(self, name: str, host: str, command_timeout: float) -> None:
        self.name, self.host, self.command_timeout = name, host, command_timeout

    def run(self, script: str, timeout: float | None = None) -> Result:
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                ["sh", "-s"],
                input=frame(script),
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout or self.command_timeout,
                start_new_session=True,
                env=untagged_env(),
            )
        except subprocess.TimeoutExpired:
            raise NodeError(
                self.name, f"command timed out after {timeout or self.command_timeout:.0f}s"
            ) from None
        return unwrap(self.name, proc.stdout, proc.stderr, time.monotonic() - t0)

    def close(self) -> None:
        pass


class ShellNode:
    """A remote node with one long-lived `sh` (either transport).

    Commands go to that shell, so a slow login shell (`pyenv init` is 150 ms here) is
    paid once per node, not once per command. A second command arriving while the shell
    is busy (a poll during a kill) gets a one-off exec of its own instead of waiting.
    """

    is_local = False

    def __init__(self, name: str, host: str, policy: SshPolicy) -> None:
        self.name, self.host, self.policy = name, host, policy
        self._lock = threading.Lock()
        self._shell_lock = threading.Lock()
        self._seq = 0

    def run(self, script: str, timeout: float | None = None) -> Result:
        timeout = timeout or self.policy.command_timeout
        if self._shell_lock.acquire(blocking=False):
            try:
                return self._run_on_shell(script, timeout)
            finally:
                self._shell_lock.release()
        return self._run_exec(script, timeout)

    def _run_on_shell(self, script: str, timeout: float) -> Result:
        raise NotImplementedError

    def _run_exec(self, script: str, timeout: float) -> Result:
        raise NotImplementedError
