"""Opening one paramiko connection to a host, as the user's `ssh` would reach it.

Host settings come from `ssh -G` (sessions/ssh/sshresolve.py) and host keys are checked
against known_hosts (sessions/ssh/hostkeys.py): fabric alone reads neither `Include` nor
`StrictHostKeyChecking`, and accepts any key. ProxyJump is dialled hop by hop,
ProxyCommand runs as OpenSSH runs it, and every failure becomes one line that names the
host and the way out (a changed key, the auth methods the server offers).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import socket
from typing import Any

from mntui.sessions.config import SshPolicy
from mntui.sessions.results import NodeError

from . import hostkeys
from .sshresolve import SshSettings, resolve

_QUIET = logging.NullHandler()  # added once: a logger keeps one of each handler object


def _where(s: SshSettings) -> str:
    return f"{s.user}@{s.hostname}:{s.port}" + (f" via {s.proxy_jump}" if s.proxy_jump else "")


def _connection(s: SshSettings, policy: SshPolicy, gateway: object | None, password: str | None):  # type: ignore[no-untyped-def]
    """`gateway`: the previous ProxyJump hop's connection, or a ProxyCommand socket
    (handed to paramiko as is: fabric would re-expand a command string's tokens)."""
    import fabric
    import paramiko

    # paramiko's transport thread logs a failed handshake with its traceback; with no
    # handler, Python prints that on stderr. The failure reaches us as an exception too,
    # and is said in one line naming the host: the log is noise on a user's terminal.
    logging.getLogger("paramiko").addHandler(_QUIET)
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


def connect(name: str, s: SshSettings, policy: SshPolicy, password: str | None):  # type: ignore[no-untyped-def]
    import paramiko

    gateway: object | None = None
    if s.proxy_jump:
        for hop in s.proxy_jump.split(","):  # first hop is dialled first
            host, _, port = hop.rpartition(":") if hop.count(":") == 1 else (hop, "", "")
            if port and not re.fullmatch("[0-9]{1,5}", port, re.ASCII):
                raise NodeError(name, f"ProxyJump {hop!r}: the port is not a number")
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
        elif "gssapi" in offered:  # mntui does not hand paramiko a GSSAPI context
            hint = "; a Kerberos login needs `ssh: {transport: openssh}`"
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
