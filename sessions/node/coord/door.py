"""The coordinator's door: the connections whose first frame has not come yet.

Why a part of its own: anyone who reaches the port may connect. Before issue 39 each
connection took one of 2N+8 handshake slots (a thread each) for its 2 s deadline, and a
peer that held them all with idle connections, reconnecting as each was dropped, kept
the sentinels out when the coordinator was started again: the healthy job was torn
down as unreachable, by a peer that never knew the secret. Here one thread holds every
connection that has not sent its hello yet (a descriptor and a few bytes each: no
thread, no slot), reads whatever arrives on any of them, and hands on only a hello that
proves the run's secret (frames.admit) with a nonce not seen before; what the handshake
still needs then takes a slot. What a peer without the secret can hold is bounded per
source address (PER_ADDRESS) and in all (WAITING), each for FIRST_FRAME at most; past a
bound, the oldest connection of the address (one that sent nothing, first) makes room
for the new one. So a flood holds only what it keeps renewing, and a sentinel, whose
hello follows its connect at once, is read long before its turn to go: on the fake
cluster every node is 127.0.0.1, and so is the flood; the room made for the newcomer,
not the address, is what lets the node in.
"""

from __future__ import annotations

import errno
import selectors
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mntui.sessions.node.wire.framecodec import Reader, Refused
from mntui.sessions.node.wire.frames import HELLO_MAX, Admitted, admit

FIRST_FRAME = 1.0  # seconds from the connect to a whole hello (a sentinel's: a millisecond)
HANDSHAKE = 2.0  # seconds from the connect to the end of the handshake (the client's too)
PER_ADDRESS = 64  # connections from one address without their hello yet
WAITING = 512  # such connections in all (descriptors: the peers' and the files' stay)
BATCH = 64  # connections accepted at one look at the port
SEEN = 4096  # nonces of admitted hellos remembered: a copy of one is refused
_SHORT_OF = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

SecretFor = Callable[[dict[str, Any]], "bytes | None"]
Refuse = Callable[[str, str], None]  # (reason, address): counted on the board
HandOn = Callable[[socket.socket, Reader, Admitted, str, float], None]  # ..., its deadline


@dataclass(eq=False)
class _Waiting:
    sock: socket.socket
    where: str
    since: float  # monotonic: the connect
    reader: Reader


class Door:
    def __init__(
        self,
        listener: socket.socket,
        secret_for: SecretFor,
        refused: Refuse,
        hand_on: HandOn,
        done: threading.Event,
    ) -> None:
        self.listener, self.secret_for, self.done = listener, secret_for, done
        self.refused, self.hand_on = refused, hand_on
        self.sel = selectors.DefaultSelector()
        self.waiting: dict[socket.socket, _Waiting] = {}  # oldest first
        self.by_where: dict[str, dict[socket.socket, None]] = {}  # oldest first
        self.seen: OrderedDict[str, None] = OrderedDict()

    def run(self) -> None:
        """Until the chain is over (`done`): the port's new connections and the first
        bytes of those waiting, on this one thread."""
        self.listener.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ)
        try:
            while not self.done.is_set():
                try:
                    ready = self.sel.select(self._timeout(time.monotonic()))
                except (OSError, ValueError):  # the port closed under us: the end
                    if self.done.is_set():
                        return
                    ready = []
                for key, _ in ready:
                    if key.fileobj is self.listener:
                        self._accept()
                    else:
                        self._read(self.waiting.get(key.fileobj))  # type: ignore[call-overload]
                self._expire(time.monotonic())
        finally:
            for w in list(self.waiting.values()):
                self._forget(w)
                w.sock.close()
            self.sel.close()

    def _timeout(self, now: float) -> float:
        first = next(iter(self.waiting.values()), None)
        if first is None:
            return 0.25
        return max(0.0, min(0.25, first.since + FIRST_FRAME - now))

    def _accept(self) -> None:
        for _ in range(BATCH):
            try:
                sock, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors: the oldest waiting makes room
                if exc.errno in _SHORT_OF and self.waiting:
                    self._drop(next(iter(self.waiting.values())), "busy")
                    continue
                if not self.done.is_set():
                    self.done.wait(0.05)  # the port stays served; no spin
                return
            where = _address(addr)
            self._room(where)
            sock.setblocking(False)
            w = _Waiting(sock, where, time.monotonic(), Reader(sock))
            self.waiting[sock] = w
            self.by_where.setdefault(where, {})[sock] = None
            self.sel.register(sock, selectors.EVENT_READ)
            self._read(w)  # its hello may be here already

    def _room(self, where: str) -> None:
        """Room for one more from `where`: the oldest of that address goes past its
        bound, the oldest of all past the door's; one that sent nothing goes first."""
        mine = self.by_where.get(where, {})
        if len(mine) >= PER_ADDRESS:
            self._drop(self._oldest(mine), "busy")
        if len(self.waiting) >= WAITING:
            self._drop(self._oldest(self.waiting), "busy")

    def _oldest(self, socks: dict[socket.socket, Any]) -> _Waiting:
        ws = [self.waiting[s] for s in socks]
        return next((w for w in ws if not w.reader.buffered), ws[0])

    def _read(self, w: _Waiting | None) -> None:
        if w is None:
            return
        try:
            got = w.reader.ready(HELLO_MAX)
        except Refused as exc:
            self._drop(w, exc.reason)
            return
        if got is None:
            return
        self._forget(w)
        try:
            admitted = admit(*got, self.secret_for)
            if admitted.nc in self.seen:
                raise Refused("replay", "a hello admitted before")
        except Refused as exc:
            w.sock.close()
            self.refused(exc.reason, w.where)
            return
        self.seen[admitted.nc] = None
        if len(self.seen) > SEEN:
            self.seen.popitem(last=False)
        self.hand_on(w.sock, w.reader, admitted, w.where, w.since + HANDSHAKE)

    def _expire(self, now: float) -> None:
        while self.waiting:
            w = next(iter(self.waiting.values()))
            if w.since + FIRST_FRAME > now:
                return
            self._drop(w, "handshake-timeout")

    def _drop(self, w: _Waiting, reason: str) -> None:
        self._forget(w)
        w.sock.close()
        self.refused(reason, w.where)

    def _forget(self, w: _Waiting) -> None:
        self.waiting.pop(w.sock, None)
        mine = self.by_where.get(w.where)
        if mine is not None:
            mine.pop(w.sock, None)
            if not mine:
                del self.by_where[w.where]
        try:
            self.sel.unregister(w.sock)
        except (KeyError, ValueError):
            pass


def _address(addr: Any) -> str:
    """A peer's address as `status` shows it: an IPv4 peer of the dual-stack port as
    IPv4 (its `::ffff:` prefix off), so one host is one address."""
    host = str(addr[0]) if isinstance(addr, tuple) and addr else "?"
    return host[7:] if host.startswith("::ffff:") else host
