"""`ssh.transport: paramiko` (the default): one persistent in-process connection per node.

Opening a connection costs 25-80x a command on it, so each node keeps one, reopened once
if it dropped, and commands go to one long-lived `sh` on it (sessions/ssh/nodeshell.py).
`ssh.password: prompt` is asked once a process and lives in memory only: never in a
record, a log line or an error message.
"""

from __future__ import annotations

import getpass
import select
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from mntui.sessions.config import PasswordMode, SshPolicy
from mntui.sessions.errors import MntuiError
from mntui.sessions.results import NodeError

from . import unreached
from .nodeshell import Result, ShellNode, find_end, frame, unwrap
from .paramikoconnect import connect
from .sshresolve import SshSettings, resolve


class RemoteNode(ShellNode):
    """A node behind one persistent paramiko connection, reopened once if it dropped."""

    def __init__(
        self, name: str, host: str, policy: SshPolicy, prompt: Callable[[str], str] | None = None
    ) -> None:
        super().__init__(name, host, policy)
        self._prompt = prompt
        self._conn: Any = None
        self._shell: Any = None
        self.settings: SshSettings | None = None

    def open(self) -> None:
        with self._lock:
            if self._transport() is None:
                unreached.check(self.name, self.host)
                self.settings = resolve(self.host, self.policy.config)
                try:
                    password = password_for(self.policy, self._prompt)
                except MntuiError as exc:
                    raise NodeError(self.name, str(exc)) from None
                t0 = time.monotonic()
                try:
                    self._conn = connect(self.name, self.settings, self.policy, password)
                except NodeError as exc:
                    unreached.failed(self.host, exc.message, time.monotonic() - t0, self.policy)
                    raise

    @property
    def is_open(self) -> bool:
        """A connection is up (a caller with one command to run may use a fresh ssh
        rather than open this one: coordkill.py)."""
        return self._conn is not None

    def _transport(self) -> Any:
        client = getattr(self._conn, "client", None)
        transport = client.get_transport() if client is not None else None
        return transport if transport is not None and transport.is_active() else None

    def _channel(self, command: str) -> Any:
        import paramiko

        transport = self._transport()
        if transport is None:
            self.open()
            transport = self._transport()
        try:
            chan = transport.open_session(timeout=self.policy.connect_timeout)
            chan.exec_command(command)
            return chan
        except (paramiko.SSHException, OSError, EOFError, AttributeError) as exc:
            self.close()
            raise NodeError(self.name, f"connection lost: {exc}") from None

    def _run_on_shell(self, script: str, timeout: float) -> Result:
        if self._shell is None or self._shell.closed or self._shell.exit_status_ready():
            self._shell = self._channel("sh -s")
        self._seq += 1
        seq, chan = self._seq, self._shell
        t0 = time.monotonic()
        try:
            chan.sendall(frame(script, seq).encode())
            out, err = self._read(chan, t0 + timeout, lambda tail: find_end(tail, seq) >= 0)
        except NodeError:
            self._shell = None
            chan.close()
            raise
        return unwrap(self.name, out, err, time.monotonic() - t0, seq)

    def _run_exec(self, script: str, timeout: float) -> Result:
        chan = self._channel("sh -s")
        t0 = time.monotonic()
        try:
            chan.sendall(frame(script).encode())
            chan.shutdown_write()
            out, err = self._read(chan, t0 + timeout, None)
        finally:
            chan.close()
        return unwrap(self.name, out, err, time.monotonic() - t0)

    def _read(
        self, chan: Any, deadline: float, done: Callable[[str], bool] | None
    ) -> tuple[str, str]:
        """Read both streams until `done(tail of stdout)` (shell mode) or EOF (exec mode)."""
        import paramiko

        out, err = bytearray(), bytearray()
        try:
            while True:
                got = False
                while chan.recv_ready():
                    out += chan.recv(65536)
                    got = True
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                if done is not None and got and done(out[-256:].decode(errors="replace")):
                    break
                if chan.eof_received and not chan.recv_ready() and not chan.recv_stderr_ready():
                    if done is not None:
                        raise NodeError(
                            self.name,
                            "the node's shell exited"
                            + (f": {err.decode(errors='replace').strip()[-300:]}" if err else ""),
                        )
                    break
                if chan.closed and not chan.eof_received:  # closed here (Ctrl+C) or the
                    # transport died: no EOF comes, and waiting for the deadline held the exit
                    raise NodeError(self.name, "connection lost: the channel was closed")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise NodeError(self.name, "command timed out")
                select.select([chan], [], [], min(left, 1.0))
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise NodeError(self.name, f"connection lost: {exc}") from None
        return out.decode(errors="replace"), err.decode(errors="replace")

    def close(self) -> None:
        shell, self._shell = self._shell, None
        if shell is not None:
            shell.close()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


# -- ssh.password: prompt -------------------------------------------------------------

_password_lock = threading.Lock()
_password: list[str] = []  # at most one, asked once a process; kept in memory only


def password_for(policy: SshPolicy, prompt: Callable[[str], str] | None) -> str | None:
    if policy.password is not PasswordMode.PROMPT:
        return None
    with _password_lock:
        if not _password:
            if prompt is None:
                if not sys.stdin.isatty():
                    raise MntuiError(
                        "ssh.password is 'prompt' but there is no terminal to ask on: "
                        "run mntui in a terminal, or use keys"
                    )
                prompt = getpass.getpass
            _password.append(prompt("SSH password (used for every node): "))
        return _password[0]


def forget_password() -> None:
    with _password_lock:
        _password.clear()
