"""The coordinator's port: who may connect, and how each connection is served.

Why apart from the judge (coordinator.py): anyone who reaches the port may connect,
so what a connection may cost is bounded here, before any of it reaches the judge: the
door (door.py) holds every connection until its hello, on one thread, and hands on only
a hello that proves the run's secret; the rest of each handshake then runs on a thread
of its own, at most `shaking` at once. Only the run's members and the app's stream get
the secret, and a sentinel's frames are only of the kinds it sends. A member's frames
then go to the board, the straggler watch or the app's stream, and wake the judge.
"""

from __future__ import annotations

import socket
import threading
from typing import Any, Protocol

from mntui.sessions.node.board.coordstate import Board
from mntui.sessions.node.wire import frames
from mntui.sessions.node.wire.chaincopy import Replica
from mntui.sessions.node.wire.framecodec import Reader
from mntui.sessions.node.wire.watchcfg import WatchConfig

from . import door, feedserve, successor
from .slowness import SlowWatch

# waits: slowness.py's; log: a node's log bytes for the app's stream (feedserve.py);
# chain: a voter's copy of the chain, for a successor's count (successor.py)
FROM_SENTINEL = frozenset({"snap", "done", "bye", "waits", "log", "chain"})
BACKLOG = 1024  # the kernel caps it at net.core.somaxconn


class Served(Protocol):
    """What the port needs of the coordinator (coordinator.py)."""

    cfg: WatchConfig
    secret: bytes
    sock: socket.socket
    board: Board
    slow: SlowWatch
    feed: feedserve.Feed
    wake: threading.Event  # a frame came: the judge looks again
    done: threading.Event  # the chain is over: the accepting ends
    shaking: threading.BoundedSemaphore  # the handshakes under way
    dir: str
    replica: Replica  # chain.json, to every sentinel (chaincopy.py)
    heir: successor.Heir | None  # a successor not elected yet (successor.py)
    copies: dict[str, dict[str, Any]]
    superseded: str | None  # a later epoch's sentinel came: this coordinator stands down


def listen(port: int) -> socket.socket:
    """The coordinator's port, on every address: the workers reach the main by the
    address the ranks use for `master_addr`, whichever interface that is. A long queue
    of connections not yet accepted: a flood's must not fill it before the door takes
    a sentinel's."""
    if socket.has_dualstack_ipv6():
        return socket.create_server(
            ("", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=BACKLOG
        )
    return socket.create_server(("", port), backlog=BACKLOG)


def unlisten(sock: socket.socket) -> None:
    """Stops accepting now: the port is let go at once (the door polls it, and ends
    within its tick once `done` is set)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def accept(c: Served) -> None:
    """Connections, until the chain is over: the door's, then a thread each that proved
    the secret, at most `c.shaking` at once."""
    door.Door(
        c.sock, lambda h: _secret_for(c, h), c.board.refused, lambda *a: _hand_on(c, *a), c.done
    ).run()


def _hand_on(
    c: Served,
    conn: socket.socket,
    reader: Reader,
    admitted: frames.Admitted,
    where: str,
    deadline: float,
) -> None:
    if not c.shaking.acquire(blocking=False):
        c.board.refused("busy", where)
        conn.close()
        return
    try:
        args = (c, conn, reader, admitted, where, deadline)
        threading.Thread(target=_peer, args=args, daemon=True).start()
    except RuntimeError:
        c.shaking.release()
        conn.close()


def _secret_for(c: Served, hello: dict[str, Any]) -> bytes | None:
    who = hello.get("node") in c.cfg.members or feedserve.is_follower(hello)
    ok = hello.get("chain") == c.cfg.run and who
    return c.secret if ok else None


def _peer(
    c: Served,
    conn: socket.socket,
    reader: Reader,
    admitted: frames.Admitted,
    where: str,
    deadline: float,
) -> None:
    mine = {"epoch": c.cfg.epoch, "main": c.cfg.main}  # a sentinel follows no lower one
    try:
        ch = frames.server_finish(
            conn, reader, admitted, kinds=FROM_SENTINEL, deadline=deadline, hello=mine
        )
    except (OSError, frames.Refused) as exc:
        c.board.refused(getattr(exc, "reason", "closed"), where)
        conn.close()
        return
    finally:
        c.shaking.release()
    if feedserve.is_follower(ch.peer):  # the app's stream (node/coord/follower.py)
        c.feed.serve(ch)
        return
    node = str(ch.peer.get("node"))
    if not _of_this_epoch(c, node, ch, where):
        return
    peer = c.board.connected(node, ch)
    c.feed.joined(ch)
    c.replica.joined()
    try:
        while True:
            msg = ch.recv(timeout=None)
            if c.feed.heard(node, msg):  # log bytes: nothing for the judge
                continue
            if successor.heard(c, node, msg):  # a voter's copy of the chain
                continue
            if not c.slow.heard(node, msg):  # a rank's straggler sample: its own
                c.board.heard(peer, msg)
            c.wake.set()
    except (OSError, frames.Refused) as exc:
        c.board.gone(peer, str(exc) or type(exc).__name__)
    finally:
        ch.close()


def _of_this_epoch(c: Served, node: str, ch: frames.Channel, where: str) -> bool:
    """A sentinel of this coordinator's epoch (or of the one a successor took over, with
    its word); one of a later epoch means another coordinator leads the chain: this
    one stands down (coordinator.py). Refused and closed otherwise."""
    why = successor.admit(c, node, ch.peer)
    if why is None:
        try:
            successor.greet(c, ch, ch.peer)
        except OSError:
            ch.close()
            return False
        return True
    if successor.later(c, ch.peer) and c.superseded is None:
        c.superseded = why
        c.wake.set()
    c.board.refused("stale-epoch", where)  # counted, and journaled once, as every refusal
    ch.close()
    return False
