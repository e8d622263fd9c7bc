"""Fake nodes that are hosts of their own on the network: each node's sshd, and so
everything it starts (tmux, the job, the sentinels, a coordinator), in a network
namespace of its own, on a bridge this machine is on too.

Why: the fake nodes share 127.0.0.1, so they share its ports (a coordinator stopped on
one holds `watch.port` for every other) and no one node's network can be cut alone. In
namespaces each node has its own address and ports, and a partition between two nodes
is a static neighbour entry on each side pointing at no one (`cut`): their packets
vanish silently, as on a real network whose switch lost a path, while both still reach
this machine and every other node. Root only (`ip netns`); `available()` says whether
this machine can.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from dataclasses import dataclass, field

NOWHERE = "02:00:00:00:de:ad"  # a neighbour no interface has: its frames reach nobody


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def available() -> bool:
    """Root with `ip netns` that works (a container may forbid it)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    name = f"mntuiprobe{os.getpid()}"
    if _ip("netns", "add", name, check=False).returncode != 0:
        return False
    _ip("netns", "del", name, check=False)
    return True


@dataclass
class Netns:
    """A bridge and one namespace a node, `<tag><i>` (a tag unique to this process)."""

    names: list[str]
    tag: str = field(default_factory=lambda: f"mn{os.getpid() % 100000}{random.randrange(100)}")
    subnet: str = ""
    addrs: dict[str, str] = field(default_factory=dict)
    spaces: dict[str, str] = field(default_factory=dict)

    @property
    def bridge(self) -> str:
        return f"{self.tag}b"

    def up(self) -> Netns:
        self.subnet = _free_subnet()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, name in enumerate(self.names):
            ns, veth = f"{self.tag}n{i}", f"{self.tag}v{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", self.bridge, "up")
            addr = f"{self.subnet}.{i + 1}"
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            self.addrs[name], self.spaces[name] = addr, ns
        return self

    def argv(self, node: str) -> list[str]:
        """The prefix that runs a program in `node`'s namespace."""
        return ["ip", "netns", "exec", self.spaces[node]]

    def cut(self, a: str, b: str) -> None:
        """`a` and `b` no longer reach each other; each still reaches every other node."""
        for x, y in ((a, b), (b, a)):
            _ip("-n", self.spaces[x], "neigh", "replace", self.addrs[y], "lladdr", NOWHERE,
                "dev", "eth0", "nud", "permanent")  # fmt: skip

    def heal(self, a: str, b: str) -> None:
        for x, y in ((a, b), (b, a)):
            _ip("-n", self.spaces[x], "neigh", "del", self.addrs[y], "dev", "eth0", check=False)

    def listening(self, node: str, port: int) -> bool:
        out = subprocess.run(
            [*self.argv(node), "ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True
        ).stdout
        return bool(out.strip())

    def down(self) -> None:
        """Links, namespaces and bridge removed (the caller killed the nodes' processes
        first). Each veth is deleted here: a namespace lives on while a socket of it
        does, and one that talked across a cut retransmits for minutes."""
        for i, ns in enumerate(self.spaces.values()):
            _ip("link", "del", f"{self.tag}v{i}", check=False)
            _ip("netns", "del", ns, check=False)
        _ip("link", "del", self.bridge, check=False)


def _free_subnet() -> str:
    """A 10.x.y.0/24 no interface of this machine is on (other helpers run clusters too)."""
    used = _ip("-4", "-o", "addr", "show", check=False).stdout
    routes = _ip("-4", "route", "show", check=False).stdout
    for _ in range(500):
        net = f"10.{random.randrange(100, 250)}.{random.randrange(1, 250)}"
        if f" {net}." not in used and f"{net}.0/" not in routes:
            return net
    raise RuntimeError("no free 10.x.y.0/24 for the fake nodes' network")
