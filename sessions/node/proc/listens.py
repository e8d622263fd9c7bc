"""Which TCP ports are listened on, and by which of a node's processes.

Why one module: the sentinel's kill waits for the job's ports to be free (killer.py), a
restart for the master port (chain.py), and a status shows the ports the job's own
processes listen on (nodesnap.py), as `ss -ltnp` tells the manager's poller. All ask
here. The kernel is asked for its LISTEN sockets over sock_diag netlink, as `ss` does:
/proc/net/tcp costs a walk of the whole connection table (1 ms on a small machine, far
more on a big node), the netlink dump only the listening ones (40 µs). /proc/net/tcp{,6}
remains the fallback (no netlink allowed) and what a /proc-shaped folder in tests gives.

A socket is a process's when one of its fds links to `socket:[inode]`. Reading every fd
of a rank (a torch rank has hundreds, 2 µs each) is what `ss -p` pays each time; Ports
pays it for a process when first seen, and for all when a new listening socket of this
user appears anywhere (a bind in a rank) or every FULL_EVERY seconds (an fd passed on).
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .proctree import read_bounded

NET_LIMIT = 64 * 1024 * 1024  # bytes of /proc/net/tcp read (a host with many sockets)
MAX_FDS = 1 << 16  # fds looked at per process
MAX_LISTEN = 1 << 16  # listening sockets taken from one netlink dump
FULL_EVERY = 30.0  # seconds between two walks of every process's fds
_SOCK_DIAG, _BY_FAMILY, _DUMP, _DONE, _ERROR = 4, 20, 0x301, 3, 2
_TCP_LISTEN = 10
_HEAD = struct.Struct("=IHHII")  # nlmsghdr
_MSG = 72  # inet_diag_msg: sport (be16) at 4, uid and inode at 64


@dataclass(frozen=True)
class Listen:
    port: int
    inode: int | None  # None: a row without its inode column (read as a port only)
    uid: int | None


def rows(text: str) -> Iterator[Listen]:
    """The LISTEN rows of /proc/net/tcp{,6}'s text; a row of any other shape is skipped."""
    for row in text.split("\n")[1:]:
        cols = row.split()
        if len(cols) > 3 and cols[3] == "0A" and ":" in cols[1]:
            try:
                port = int(cols[1].rsplit(":", 1)[1], 16)
            except ValueError:
                continue
            uid = int(cols[7]) if len(cols) > 7 and cols[7].isdigit() else None
            ino = int(cols[9]) if len(cols) > 9 and cols[9].isdigit() else None
            yield Listen(port, ino, uid)


def _dump(family: int) -> list[Listen]:
    """The kernel's LISTEN TCP sockets of `family`, over sock_diag; OSError when it
    will not say (no netlink here) or says something of another shape."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _SOCK_DIAG) as s:
        s.settimeout(1.0)
        req = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 1 << _TCP_LISTEN)
        req += bytes(48)  # any socket id
        s.sendto(_HEAD.pack(_HEAD.size + len(req), _BY_FAMILY, _DUMP, 1, 0) + req, (0, 0))
        out: list[Listen] = []
        while len(out) < MAX_LISTEN:
            data, at = s.recv(1 << 16), 0
            while at + _HEAD.size <= len(data):
                size, kind = _HEAD.unpack_from(data, at)[:2]
                if kind == _DONE:
                    return out
                if kind == _ERROR or size < _HEAD.size + _MSG or at + size > len(data):
                    raise OSError("sock_diag: an answer of another shape")
                body = at + _HEAD.size
                port = struct.unpack_from(">H", data, body + 4)[0]
                uid, ino = struct.unpack_from("=II", data, body + 64)
                out.append(Listen(port, ino, uid))
                at += (size + 3) & ~3
            if not data:
                raise OSError("sock_diag: no end")
        raise OSError("sock_diag: too many listening sockets")


def listening(proc: str = "/proc") -> list[Listen]:
    """Every LISTEN socket (IPv4 and IPv6) of this network namespace."""
    if proc == "/proc":
        try:
            return _dump(socket.AF_INET) + _dump(socket.AF_INET6)
        except OSError:
            pass
    out: list[Listen] = []
    for name in ("tcp", "tcp6"):
        raw = read_bounded(f"{proc}/net/{name}", NET_LIMIT)
        if raw:
            out.extend(rows(raw.decode(errors="replace")))
    return out


def listening_ports(proc: str = "/proc") -> set[int]:
    """TCP ports with a LISTEN socket (IPv4 or IPv6) in this network namespace."""
    return {s.port for s in listening(proc)}


class Ports:
    """The ports a changing set of processes listen on, asked again and again."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc, self.uid = proc, os.getuid()
        self.held: dict[tuple[int, int], frozenset[int]] = {}  # (pid, start) -> listening inodes
        self.seen: frozenset[int] = frozenset()  # this user's listening inodes, last time
        self.full_at: float | None = None

    def of(self, procs: Iterable[tuple[int, int]], now: float) -> tuple[int, ...]:
        """The ports `procs` ((pid, start time)) listen on now, sorted; `now` monotonic."""
        want = {s.inode: s.port for s in listening(self.proc) if s.uid == self.uid and s.inode}
        inodes = frozenset(want)
        full = bool(inodes - self.seen) or self.full_at is None or now - self.full_at >= FULL_EVERY
        self.seen, self.full_at = inodes, now if full else self.full_at
        held = {}
        for key in procs:
            known = self.held.get(key)
            if known is None or full:
                known = frozenset(i for i in _sockets(f"{self.proc}/{key[0]}/fd") if i in want)
            held[key] = known
        self.held = held
        return tuple(sorted({want[i] for h in held.values() for i in h if i in want}))


def socket_owners(inodes: set[int], proc: str = "/proc") -> dict[int, int]:
    """inode -> the pid of a process holding that socket, for those this user can see:
    a walk of every process's fds, paid only when a kill ends with a port still held."""
    out: dict[int, int] = {}
    if not inodes:
        return out
    try:
        names = [n for n in os.listdir(proc) if n.isascii() and n.isdigit()]
    except OSError:
        return out
    for name in names:
        for ino in _sockets(f"{proc}/{name}/fd"):
            if ino in inodes:
                out.setdefault(ino, int(name))
        if len(out) == len(inodes):
            break
    return out


def _sockets(fd_dir: str) -> Iterator[int]:
    """The socket inodes among a process's fds (none when it is gone or not ours)."""
    try:
        names = os.listdir(fd_dir)[:MAX_FDS]
    except OSError:
        return
    for name in names:
        try:
            link = os.readlink(f"{fd_dir}/{name}")
        except OSError:
            continue
        if link.startswith("socket:[") and link.endswith("]") and link[8:-1].isdigit():
            yield int(link[8:-1])
