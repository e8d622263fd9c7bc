"""`ssh.transport: openssh`: the system's `ssh` per node, behind a private ControlMaster.

Whatever the user's `ssh` does works: host certificates, Kerberos, FIDO keys, OTPs,
`Match exec`, canonical names. One private ControlMaster per node (a 0700 directory, a
socket name short enough for the 104-byte limit) is opened once; commands then go to one
long-lived `sh -s` through it with the same marker framing as paramiko's, so a command
costs a pipe write, not an ssh start. The master is asked for with BatchMode first; only
a node that needs a person, with a terminal or SSH_ASKPASS to ask through, is retried
without it, one node at a time, so prompts never interleave and nothing ever hangs
waiting for a keyboard that is not there. How a host resolves (`ssh -G`) is
sessions/ssh/sshresolve.py's, shared with the paramiko transport.
"""

from __future__ import annotations

import os
import re
import secrets
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from mntui.sessions.config import HostKeyPolicy, SshPolicy
from mntui.sessions.errors import private_dir, state_dir
from mntui.sessions.results import NodeError

from . import unreached
from .nodeshell import Result, ShellNode, find_end, frame, unwrap
from .sshresolve import ssh_base_argv

PERSIST = 60  # seconds a master outlives its last session: a crashed mntui leaves none
_PERSON = threading.Lock()  # one prompt on the terminal at a time
_MAX_DIR = 104 - 1 - 16 - 17 - 1  # "/", our name, ssh's temporary suffix, the NUL


def control_dir() -> Path:
    d = state_dir() / "cm"
    if len(str(d)) > _MAX_DIR:
        d = Path(tempfile.gettempdir()) / f"mntui-cm-{os.getuid()}"
    private_dir(d)
    if d.is_symlink() or d.stat().st_uid != os.getuid():
        raise NodeError("ssh", f"{d} belongs to another user; refusing to put sockets there")
    return d


def person_reachable() -> bool:
    """Whether ssh could ask someone: SSH_ASKPASS it may use, or a terminal on stdin."""
    env = os.environ
    if env.get("SSH_ASKPASS") and (
        env.get("SSH_ASKPASS_REQUIRE") in ("force", "prefer") or env.get("DISPLAY")
    ):
        return env.get("SSH_ASKPASS_REQUIRE") != "never"
    return sys.stdin.isatty()


def why(host: str, stderr: str, asked: bool) -> str:
    """One line from ssh's stderr, in the words the paramiko transport uses."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and "@@@" not in ln]
    said = f"(ssh: {' | '.join(lines[-2:]) or 'no output'})"
    denied = re.search(r"Permission denied \(([^)]*)\)", stderr)
    if denied:
        offered = denied.group(1)
        hint = ""
        if not asked and re.search(r"password|keyboard-interactive", offered):
            hint = "; it needs a person: run mntui in a terminal, or set SSH_ASKPASS"
        elif "gssapi" in offered:  # a Kerberos login: the usual cause is an expired ticket
            hint = "; a Kerberos login: is your ticket valid? (`klist`; `kinit` renews it)"
        return f"authentication failed for {host} over openssh (server offers: {offered}){hint}"
    if re.search(r"REVOKED|was revoked", stderr):
        return f"host key of {host} is marked @revoked; refusing to connect {said}"
    if re.search(r"IDENTIFICATION HAS CHANGED|host key for .* has changed", stderr, re.I):
        return (
            f"HOST KEY CHANGED for {host}; refusing to connect. If the node was reinstalled, "
            f"remove the old key with `ssh-keygen -R` {said}"
        )
    if "host key is known for" in stderr:
        return (
            f"host key of {host} is not in known_hosts; connect once with `ssh {host}` "
            f"or set `ssh: {{host_key: accept-new}}` {said}"
        )
    return f"cannot connect to {host} over openssh {said}"


class OpenSshNode(ShellNode):
    """A node behind the system `ssh`: one private master, one long-lived `sh -s` on it."""

    def __init__(self, name: str, host: str, policy: SshPolicy) -> None:
        super().__init__(name, host, policy)
        self._path: str | None = None  # the master's ControlPath while it runs
        self._shell: subprocess.Popen[bytes] | None = None

    @property
    def is_open(self) -> bool:
        """Its master runs (see RemoteNode.is_open)."""
        return self._path is not None

    def _ssh(self, *opts: str) -> list[str]:
        return [*ssh_base_argv(self.policy.config), "-o", f"ControlPath={self._path}", *opts]

    def open(self) -> None:
        with self._lock:
            if self._path is not None and self._alive():
                return
            unreached.check(self.name, self.host)
            self._path = str(control_dir() / f"{os.getpid():x}-{secrets.token_hex(4)}")
            argv = self._ssh(
                *("-o", "ControlMaster=yes", "-o", f"ControlPersist={PERSIST}"),
                *("-o", f"ConnectTimeout={max(1, round(self.policy.connect_timeout))}"),
                *_host_key_opts(self.policy),
                *("-o", "ClearAllForwardings=yes", "-o", "PermitLocalCommand=no"),
                *("-f", "-N", "-T"),
            )
            t0 = time.monotonic()
            res = self._master([*argv, "-o", "BatchMode=yes", "--", self.host], None)
            took = time.monotonic() - t0
            asked = False
            if res.returncode != 0 and person_reachable() and _needs_person(res.stderr):
                with _PERSON:  # the person answers node after node, as with ssh
                    res = self._master([*argv, "--", self.host], 600)
                    asked = True
            if res.returncode != 0:
                self._path = None
                said = why(self.host, res.stderr, asked)
                if not asked:  # a person's answer takes its own time
                    unreached.failed(self.host, said, took, self.policy, res.stderr)
                raise NodeError(self.name, said)

    def _master(self, argv: list[str], timeout: float | None) -> subprocess.CompletedProcess[str]:
        """`ssh -f` returns once authenticated; its master lives on in the background."""
        limit = timeout or 2 * self.policy.connect_timeout + 20
        try:
            return subprocess.run(
                argv,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=limit,
                stdin=None if timeout else subprocess.DEVNULL,
                start_new_session=not timeout,  # only a prompt needs the terminal
            )
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(argv, 255, "", f"no answer in {limit:.0f}s")
        except OSError as exc:
            return subprocess.CompletedProcess(argv, 255, "", f"cannot run ssh: {exc}")

    def _alive(self) -> bool:
        try:
            res = subprocess.run(
                self._ssh("-O", "check", "--", self.host),
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=10,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return res.returncode == 0

    def _client(self) -> subprocess.Popen[bytes]:
        """A session on the master; BatchMode, so even a fallback connection never prompts."""
        self.open()
        argv = self._ssh(
            *("-o", "ControlMaster=no", "-o", "BatchMode=yes", "-T"),
            *("-o", "ClearAllForwardings=yes", "-o", "RemoteCommand=none"),
        )
        return subprocess.Popen(
            [*argv, "--", self.host, "sh -s"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # Ctrl+C in the terminal must not cut a kill short
        )

    def _run_on_shell(self, script: str, timeout: float) -> Result:
        if self._shell is None or self._shell.poll() is not None:
            self._shell = self._client()
        self._seq += 1
        seq, proc = self._seq, self._shell
        t0 = time.monotonic()
        try:
            assert proc.stdin is not None
            proc.stdin.write(frame(script, seq).encode())
            proc.stdin.flush()
            out, err = self._read(proc, t0 + timeout, lambda tail: find_end(tail, seq) >= 0)
        except (NodeError, OSError) as exc:
            self._shell = None
            _end(proc)
            if isinstance(exc, NodeError):
                raise
            raise NodeError(self.name, f"connection lost: {exc}") from None
        return unwrap(self.name, out, err, time.monotonic() - t0, seq)

    def _run_exec(self, script: str, timeout: float) -> Result:
        proc = self._client()
        t0 = time.monotonic()
        try:
            out, err = proc.communicate(frame(script).encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            raise NodeError(self.name, "command timed out") from None
        finally:
            _end(proc)
        text = out.decode(errors="replace")
        return unwrap(self.name, text, err.decode(errors="replace"), time.monotonic() - t0)

    def _read(
        self, proc: subprocess.Popen[bytes], deadline: float, done: Callable[[str], bool]
    ) -> tuple[str, str]:
        assert proc.stdout is not None and proc.stderr is not None
        out, err = bytearray(), bytearray()
        bufs = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NodeError(self.name, "command timed out")
            ready, _, _ = select.select(list(bufs), [], [], min(left, 1.0))
            for fd in ready:
                chunk = os.read(fd, 65536)
                if chunk:
                    bufs[fd] += chunk
                elif fd == proc.stdout.fileno():
                    tail = err.decode(errors="replace").strip()[-300:]
                    raise NodeError(
                        self.name, "the node's shell exited" + (f": {tail}" if tail else "")
                    )
                else:
                    del bufs[fd]
            if proc.stdout.fileno() in ready and done(out[-256:].decode(errors="replace")):
                return out.decode(errors="replace"), err.decode(errors="replace")

    def close(self) -> None:
        shell, self._shell = self._shell, None
        if shell is not None:
            _end(shell)
        if self._path is not None:
            try:
                subprocess.run(
                    self._ssh("-O", "exit", "--", self.host),
                    capture_output=True,
                    stdin=subprocess.DEVNULL,
                    timeout=10,
                )
            except (OSError, subprocess.TimeoutExpired):
                pass
            self._path = None


def _host_key_opts(policy: SshPolicy) -> tuple[str, ...]:
    """mntui's `host_key` wins over ssh_config, as on the paramiko transport."""
    if policy.host_key is None:
        return ()
    value = "accept-new" if policy.host_key is HostKeyPolicy.ACCEPT_NEW else "yes"
    return ("-o", f"StrictHostKeyChecking={value}")


def oneshot_argv(policy: SshPolicy) -> list[str]:
    """`ssh` for one command on a node (a cold `status`, tui/cli/quickstatus.py), up to
    the host: the options this transport's master is opened with, never asking anyone
    (BatchMode: a node that needs a person is the ordinary path's), no master of its own."""
    return [
        *ssh_base_argv(policy.config),
        *("-o", f"ConnectTimeout={max(1, round(policy.connect_timeout))}"),
        *_host_key_opts(policy),
        *("-o", "ClearAllForwardings=yes", "-o", "PermitLocalCommand=no"),
        *("-o", "BatchMode=yes", "-o", "ControlMaster=no", "-T"),
    ]


def _needs_person(stderr: str) -> bool:
    """Auth that a person may complete, or an unknown host key ssh would ask about."""
    return "Permission denied" in stderr or re.search(r"host key is known for", stderr) is not None


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Stop one of our own ssh clients (by its Popen, never by name)."""
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass
    if proc.poll() is None:
        proc.kill()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass
