"""The coordinator's port: who may connect, and how each connection is served.

Why apart from the judge (coordinator.py): anyone who reaches the port may connect,
so what a connection may cost is bounded here, before any of it reaches the judge:
each is handshaken on a thread of its own, at most `shaking` at once (a flood cannot
exhaust the threads; the sentinels reconnect, with backoff, once it is over), only the
run's members and the app's stream get the secret, and a sentinel's frames are only
of the kinds it sends. A member's frames then go to the board, the straggler watch or
the app's stream, and wake the judge.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Protocol

from . import feedserve, frames
from .coordstate import Board
from .slowness import SlowWatch
from .watchcfg import WatchConfig

# waits: slowness.py's; log: a node's log bytes for the app's stream (feedserve.py)
FROM_SENTINEL = frozenset({"snap", "done", "bye", "waits", "log"})


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


def listen(port: int) -> socket.socket:
    """The coordinator's port, on every address: the workers reach the main by the
    address the ranks use for `master_addr`, whichever interface that is."""
    if socket.has_dualstack_ipv6():
        return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
    return socket.create_server(("", port))


def unlisten(sock: socket.socket) -> None:
    """Stops accepting now: a shutdown wakes the accept blocked in another thread (a close
    alone leaves the port held until that accept returns)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def accept(c: Served) -> None:
    """Connections, each handshaken on a thread of its own, at most `c.shaking` at once."""
    while not c.done.is_set():
        try:
            conn, addr = c.sock.accept()
        except OSError:
            if c.done.is_set():
                return
            time.sleep(0.1)  # EMFILE and the like: the port stays served
            continue
        if not c.shaking.acquire(blocking=False):
            c.board.refused("busy", str(addr[0]) if isinstance(addr, tuple) else "?")
            conn.close()
            continue
        try:
            threading.Thread(target=_peer, args=(c, conn, addr), daemon=True).start()
        except RuntimeError:
            c.shaking.release()
            conn.close()


def _secret_for(c: Served, hello: dict[str, Any]) -> bytes | None:
    who = hello.get("node") in c.cfg.members or feedserve.is_follower(hello)
    ok = hello.get("chain") == c.cfg.run and who
    return c.secret if ok else None


def _peer(c: Served, conn: socket.socket, addr: Any) -> None:
    where = str(addr[0]) if isinstance(addr, tuple) and addr else "?"
    try:
        ch = frames.server_handshake(conn, lambda h: _secret_for(c, h), kinds=FROM_SENTINEL)
    except (OSError, frames.Refused) as exc:
        c.board.refused(getattr(exc, "reason", "closed"), where)
        conn.close()
        return
    finally:
        c.shaking.release()
    if feedserve.is_follower(ch.peer):  # the app's stream (node/follower.py)
        c.feed.serve(ch)
        return
    node = str(ch.peer.get("node"))
    peer = c.board.connected(node, ch)
    c.feed.joined(ch)
    try:
        while True:
            msg = ch.recv(timeout=None)
            if c.feed.heard(node, msg):  # log bytes: nothing for the judge
                continue
            if not c.slow.heard(node, msg):  # a rank's straggler sample: its own
                c.board.heard(peer, msg)
            c.wake.set()
    except (OSError, frames.Refused) as exc:
        c.board.gone(peer, str(exc) or type(exc).__name__)
    finally:
        ch.close()
