"""Is each host there: resolved as the user's `ssh` resolves it, then one short connect.

`mntui init` says at once which of the hosts it was given answer, before anyone waits
on a launch: `ssh -G` (the ssh wing's resolver) gives the address, port and user, and a
TCP connect that reads the server's banner proves an SSH server listens there. No login
is tried (that is `mntui doctor`'s, with the config's transport); a host behind a
ProxyJump or ProxyCommand is only resolved, since a direct connect would prove nothing.
"""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from mntui.sessions.config import NodeSpec
from mntui.sessions.results import NodeError
from mntui.sessions.ssh import resolve
from mntui.sessions.termsafe import one_line

CONNECT_TIMEOUT = 3.0
MAX_PARALLEL = 32


@dataclass(frozen=True)
class HostCheck:
    node: str
    ok: bool
    where: str  # user@address:port as ssh resolves it; "" when it could not
    detail: str

    def line(self) -> str:
        where = f"  {self.where}" if self.where else ""
        if self.ok:
            return f"  {self.node}{where}  {self.detail}"
        return f"  warning: {self.node}{where}  {self.detail}"


def check_host(node: NodeSpec, ssh_config: str | None, timeout: float) -> HostCheck:
    if node.is_local:
        return HostCheck(node.name, True, "", "this machine: no SSH")
    try:
        s = resolve(node.host, ssh_config)
    except NodeError as exc:
        return HostCheck(node.name, False, "", f"cannot resolve: {exc.message}")
    where = f"{s.user + '@' if s.user else ''}{s.hostname}:{s.port}"
    if s.proxy_jump or s.proxy_command:
        via = f"ProxyJump {s.proxy_jump}" if s.proxy_jump else "a ProxyCommand"
        return HostCheck(node.name, True, where, f"via {via}: not connected here (doctor will)")
    t0 = time.monotonic()
    try:
        with socket.create_connection((s.hostname, s.port), timeout=timeout) as sock:
            sock.settimeout(max(0.1, timeout - (time.monotonic() - t0)))
            banner = sock.recv(256)
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        return HostCheck(node.name, False, where, f"unreachable: {why}")
    ms = (time.monotonic() - t0) * 1000
    if not banner.startswith(b"SSH-"):
        return HostCheck(node.name, False, where, "answers, but not as an SSH server")
    first = banner.split(b"\r", 1)[0].split(b"\n", 1)[0].decode("ascii", "replace")[:40]
    version = one_line(first)  # a banner is node data
    return HostCheck(node.name, True, where, f"reachable: {version} ({ms:.0f} ms)")


def check_hosts(
    nodes: tuple[NodeSpec, ...], ssh_config: str | None, timeout: float = CONNECT_TIMEOUT
) -> list[HostCheck]:
    """Every node at once, in the config's order."""
    if not nodes:
        return []
    with ThreadPoolExecutor(min(MAX_PARALLEL, len(nodes))) as pool:
        return list(pool.map(lambda n: check_host(n, ssh_config, timeout), nodes))
