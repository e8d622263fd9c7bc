"""The cluster, node framing and the paramiko transport; `transport: openssh` lives in
sessions/openssh.py, `ssh -G` in sessions/sshresolve.py, paramiko's host-key checks in
sessions/hostkeys.py.

Design points, each learned the hard way:
- Host settings come from OpenSSH's own resolver (`ssh -G`), because fabric's
  ssh_config parser silently ignores `Include` and `StrictHostKeyChecking`; a tool
  that reaches a different host than the user's `ssh` does is worse than none.
- Host keys are checked against known_hosts; fabric alone accepts any key.
- One persistent connection per node: opening one costs 25-80x a command on it.
- Scripts travel on stdin to `sh -s`, so the login shell (bash, zsh, fish...) never
  parses them, and the local keyboard is never read by a remote command.
- Login shells print noise (conda, pyenv): only output between our markers counts.
- Cluster-wide calls return a per-node Outcome, so one dead node never aborts the rest.
- `ssh.password: prompt` is asked once a process and lives in memory only: never in a
  record, a log line or an error message.
"""

from __future__ import annotations

import getpass
import os
import re
import secrets
import select
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from . import hostkeys
from .config import NodeSpec, PasswordMode, SshPolicy, SshTransport
from .errors import MntuiError
from .results import GroupResult, NodeError, Outcome
from .sshresolve import SshSettings, resolve

__all__ = ["Cluster", "GroupResult", "LocalNode", "Node", "NodeError", "Outcome", "RemoteNode"]

T = TypeVar("T")
_TOKEN = secrets.token_hex(6)
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


class Node(Protocol):
    name: str
    host: str
    is_local: bool

    def run(self, script: str, timeout: float | None = None) -> Result: ...

    def close(self) -> None: ...


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


# -- nodes ------------------------------------------------------------------------


# mntui run from inside a job's pane inherits its tag, and from inside any tmux its
# $TMUX: a local node's scripts must neither carry the tag nor drive that other tmux
# server (`tmux -L work`), where the job's sessions would land and never be found.
_NOT_FOR_NODES = ("MNTUI_RUN", "MNTUI_RUN_DIR", "TMUX", "TMUX_PANE")


def _untagged_env() -> dict[str, str]:
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
                env=_untagged_env(),
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
                self.settings = resolve(self.host, self.policy.config)
                try:
                    password = password_for(self.policy, self._prompt)
                except MntuiError as exc:
                    raise NodeError(self.name, str(exc)) from None
                self._conn = _open(self.name, self.settings, self.policy, password)

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


def _where(s: SshSettings) -> str:
    return f"{s.user}@{s.hostname}:{s.port}" + (f" via {s.proxy_jump}" if s.proxy_jump else "")


def _connection(s: SshSettings, policy: SshPolicy, gateway: object | None, password: str | None):  # type: ignore[no-untyped-def]
    """`gateway`: the previous ProxyJump hop's connection, or a ProxyCommand socket
    (handed to paramiko as is: fabric would re-expand a command string's tokens)."""
    import fabric
    import paramiko

    sock = {"sock": gateway} if isinstance(gateway, paramiko.ProxyCommand) else {}
    keys = [f for f in s.identity_files if os.path.exists(f)]
    timeout = policy.connect_timeout
    conn = fabric.Connection(
        host=s.hostname,
        user=s.user,
        port=s.port,
        connect_timeout=timeout,
        config=fabric.Config(ssh_config=paramiko.SSHConfig()),
        gateway=gateway if gateway is not None and not sock else False,
        connect_kwargs={
            **sock,
            "key_filename": keys,
            "look_for_keys": not s.identities_only,
            "allow_agent": not s.identities_only,
            "banner_timeout": timeout,
            "auth_timeout": timeout,
            "channel_timeout": timeout,
            **({"password": password} if password is not None else {}),
        },
    )
    paramiko_name = s.hostname if s.port == 22 else f"[{s.hostname}]:{s.port}"
    hostkeys.install(conn.client, hostkeys.check_for(s, policy, _where(s)), paramiko_name)
    return conn


def _proxy(s: SshSettings) -> Any:
    """OpenSSH runs ProxyCommand as `$SHELL -c "exec CMD"`; paramiko splits its string
    with shlex, so hand it exactly that argv."""
    import paramiko

    shell = os.environ.get("SHELL") or "/bin/sh"
    return paramiko.ProxyCommand(shlex.join([shell, "-c", f"exec {s.proxy_command}"]))


def _offered(conn: Any, user: str) -> str:
    """The server's auth methods, asked with `none` on the connection that failed."""
    import paramiko

    transport = conn.client.get_transport()
    try:
        if transport is not None and transport.is_active():
            transport.auth_none(user)
    except paramiko.BadAuthenticationType as exc:
        return ",".join(exc.allowed_types)
    except (paramiko.SSHException, OSError, EOFError):
        pass
    return "unknown"


def _open(name: str, s: SshSettings, policy: SshPolicy, password: str | None):  # type: ignore[no-untyped-def]
    import paramiko

    gateway: object | None = None
    if s.proxy_jump:
        for hop in s.proxy_jump.split(","):  # first hop is dialled first
            host, _, port = hop.rpartition(":") if hop.count(":") == 1 else (hop, "", "")
            hs = resolve(host, policy.config, port=int(port) if port else None)
            gateway = _connection(hs, policy, gateway, password)
    elif s.proxy_command:
        try:
            gateway = _proxy(s)
        except (paramiko.SSHException, OSError) as exc:
            raise NodeError(name, f"cannot start ProxyCommand for {s.alias}: {exc}") from None
    conn = _connection(s, policy, gateway, password)
    where = _where(s)
    try:
        conn.open()
    except hostkeys.HostKeyRefused as exc:
        raise NodeError(name, str(exc)) from None
    except paramiko.BadHostKeyException as exc:
        raise NodeError(
            name,
            f"HOST KEY CHANGED for {where} (got {exc.key.get_name()} "
            f"{exc.key.get_fingerprint().hex()}); refusing to connect. If the node "
            f"was reinstalled, remove the old key with `ssh-keygen -R`",
        ) from None
    except paramiko.AuthenticationException:
        offered = _offered(conn, s.user)
        conn.close()
        hint = ""
        if password is None and re.search(r"password|keyboard-interactive", offered):
            hint = "; for a password set `ssh: {password: prompt}` or `transport: openssh`"
        raise NodeError(
            name,
            f"authentication failed for {where} over paramiko (server offers: {offered}){hint}",
        ) from None
    except paramiko.SSHException as exc:
        raise NodeError(name, f"cannot connect to {where}: {exc}") from None
    except (OSError, EOFError) as exc:
        reason = (
            "timed out"
            if isinstance(exc, TimeoutError)
            else getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        )
        raise NodeError(name, f"cannot connect to {where}: {reason}") from None
    # Small requests must not wait for the ACK of paramiko's window adjustments (Nagle):
    # without this, every command on an open connection costs a 40 ms delayed ACK.
    sock = getattr(conn.client.get_transport(), "sock", None)
    if isinstance(sock, socket.socket):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


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


# -- the cluster --------------------------------------------------------------------


class Cluster:
    """The job's nodes, each behind its own persistent connection."""

    def __init__(
        self,
        specs: Iterable[NodeSpec],
        policy: SshPolicy,
        *,
        prompt: Callable[[str], str] | None = None,
    ) -> None:
        """`prompt` asks for `ssh.password: prompt` (default: getpass on the terminal)."""
        from .openssh import OpenSshNode

        self.policy = policy
        self.nodes: dict[str, Node] = {}
        for spec in specs:
            if spec.is_local:
                self.nodes[spec.name] = LocalNode(spec.name, spec.host, policy.command_timeout)
            elif policy.transport is SshTransport.OPENSSH:
                self.nodes[spec.name] = OpenSshNode(spec.name, spec.host, policy)
            else:
                self.nodes[spec.name] = RemoteNode(spec.name, spec.host, policy, prompt)
        self._pool = ThreadPoolExecutor(
            max_workers=max(4, min(128, len(self.nodes))), thread_name_prefix="mntui-node"
        )

    def connect(self, names: Iterable[str] | None = None) -> GroupResult[None]:
        def op(node: Node) -> None:
            # A first command also starts the node's shell, so its login-shell start-up
            # (and any error it prints) happens here, in parallel, not mid-launch.
            res = node.run(":", timeout=self.policy.connect_timeout + 30)
            if not res.ok:
                raise NodeError(node.name, f"the node's shell failed: {res.stderr.strip()[-300:]}")

        return self.map(op, names)

    def map(
        self,
        fn: Callable[[Node], T],
        names: Iterable[str] | None = None,
        on_result: Callable[[Outcome[T]], object] | None = None,
    ) -> GroupResult[T]:
        """Run `fn` on every node at once; `on_result` sees each node as soon as it is done,
        so a slow node never holds back the others' results."""
        selected = list(names) if names is not None else list(self.nodes)
        futures = {self._pool.submit(fn, self.nodes[n]): n for n in selected}
        out: dict[str, Outcome[T]] = {}
        for fut in as_completed(futures):
            name = futures[fut]
            try:
                result: Outcome[T] = Outcome(name, value=fut.result())
            except Exception as exc:  # a bug on one node must not hide the others' results
                result = Outcome.failure(name, exc)
            out[name] = result
            if on_result is not None:
                on_result(result)
        return GroupResult((n, out[n]) for n in selected)

    def run(self, scripts: Mapping[str, str], timeout: float | None = None) -> GroupResult[Result]:
        return self.map(lambda node: node.run(scripts[node.name], timeout), scripts)

    def close(self) -> None:
        """All nodes at once: an openssh node's close is an `ssh -O exit` round trip."""

        def close(node: Node) -> None:
            try:
                node.close()
            except Exception:
                pass

        # Threads of their own: the pool's may all be stuck on the commands this unblocks.
        threads = [threading.Thread(target=close, args=(n,)) for n in self.nodes.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
