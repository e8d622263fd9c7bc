"""The coordinator's peer table: which sentinel is connected, and telling them.

Why a part of its own: the board (coordstate.py) is what the sentinels said and what
the coordinator writes; this is the other direction, the live channels and the answers
awaited on them. A command whose answer matters (a kill, an attempt's start) carries an
id that its answer echoes, so a late answer is never taken for another's.
"""

from __future__ import annotations

import queue
import secrets
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mntui.sessions.node.wire import frames

PULSE = 0.25  # seconds: the longest wait of the chain's thread between two pulses


@dataclass(eq=False)
class Peer:
    node: str
    ch: frames.Channel


class PeerTable:
    """Mixed into the Board, whose lock and journal it shares."""

    lock: threading.Lock
    peers: dict[str, Peer]
    refusals: dict[str, int]
    last_refused: str | None
    poked: dict[str, float]
    sentinel_pids: dict[str, int]  # each node's sentinel, as its last hello said
    last_frame: dict[str, float]  # monotonic: each node's sentinel's last frame
    pulsed: float  # monotonic: the chain's thread last went round a loop (`pulse`)
    main: str
    _replies: dict[str, queue.Queue[dict[str, Any]]]

    if TYPE_CHECKING:  # the board's (coordfiles.py): no definition here to shadow it

        def journal(self, kind: str, node: str | None, **data: Any) -> None: ...

    def connected(self, node: str, ch: frames.Channel) -> Peer:
        """A sentinel's hello. One with another pid than the node's last is a sentinel
        started again: the main's keeper journals its own respawns (respawn.py); a
        worker's guard has no journal to write, so its respawn is journaled here."""
        peer = Peer(node, ch)
        pid = ch.peer.get("pid")
        pid = pid if type(pid) is int and 0 < pid < 1 << 31 else None
        with self.lock:
            old = self.peers.get(node)
            self.peers[node] = peer
            self.last_frame[node] = time.monotonic()  # its hello
            was = self.sentinel_pids.get(node)
            if pid is not None:
                self.sentinel_pids[node] = pid
        if old is not None:
            old.ch.close()
        self.journal("connected", node)
        if was is not None and pid is not None and pid != was and node != self.main:
            self.journal("respawn", node, who="sentinel", pid_was=was, pid=pid, by="guard")
        return peer

    def gone(self, peer: Peer, why: str) -> None:
        with self.lock:
            if self.peers.get(peer.node) is not peer:
                return
            del self.peers[peer.node]
        self.journal("disconnected", peer.node, why=why[:200])

    def refused(self, reason: str, where: str) -> None:
        with self.lock:
            self.refusals[reason] = self.refusals.get(reason, 0) + 1
            self.last_refused = where
            first = self.refusals[reason] == 1
        if first:
            self.journal("refused", None, reason=reason, peer=where)

    def live_peers(self) -> dict[str, Peer]:
        with self.lock:
            return dict(self.peers)

    def heard_from(self, node: str) -> None:
        """A frame came from `node`'s sentinel (coordstate.Board.heard)."""
        self.last_frame[node] = time.monotonic()

    def fresh_peers(self, within: float) -> dict[str, Peer]:
        """The peers a frame came from within `within` seconds: a connection cut by a
        partition stays open here (nothing tells this side), and a start asked of its
        sentinel would wait for an answer that never comes while the others ran."""
        now = time.monotonic()
        return {n: p for n, p in self.live_peers().items()
                if now - self.last_frame.get(n, -within) <= within}  # fmt: skip

    def send(self, node: str, kind: str, **fields: Any) -> bool:
        peer = self.live_peers().get(node)
        if peer is None:
            return False
        try:
            peer.ch.send(kind, **fields)
        except OSError:
            return False
        return True

    def ask(self, node: str, kind: str, **fields: Any) -> str | None:
        """Send a command whose answer is awaited (`wait_reply`); its id, or None when it
        could not be sent. The id, not the order, pairs an answer with its question: a
        late kill report is never taken for an attempt's start."""
        rid = secrets.token_hex(8)
        return rid if self.send(node, kind, id=rid, **fields) else None

    def replies(self, node: str) -> queue.Queue[dict[str, Any]]:
        with self.lock:
            return self._replies.setdefault(node, queue.Queue())

    def pulse(self) -> None:
        """The chain's thread goes round one of its loops: the heartbeats go on
        (coordinator.py `beat`). Every wait of that thread is a loop of PULSE at most."""
        self.pulsed = time.monotonic()

    def wait_reply(self, node: str, rid: str, deadline: float) -> dict[str, Any] | None:
        """`node`'s answer to `rid` by `deadline` (monotonic), or None; others dropped."""
        q = self.replies(node)
        while True:
            self.pulse()
            left = deadline - time.monotonic()
            try:
                msg = q.get(timeout=min(max(0.0, left), PULSE))
            except queue.Empty:
                if left <= PULSE:
                    return None
                continue
            if msg.get("re") == rid:
                return msg

    def send_all(self, kind: str, **fields: Any) -> None:
        for node in self.live_peers():
            self.send(node, kind, **fields)

    def poke(self, node: str, now: float) -> None:
        """Ask `node` for a sample now (a deadline came), at most every 0.3 s."""
        if now - self.poked.get(node, -1.0) >= 0.3:
            self.poked[node] = now
            self.send(node, "sample")
