"""The coordinator's side of the live stream: each node's recent log (a bounded backlog),
filled by its sentinel's `log` frames, and served to the followers (node/coord/follower.py),
with the sentinels told to ship only while at least one follows.

Why in the coordinator: the app of a run the cluster watches follows the run over one
SSH connection to the main, so the nodes' logs meet where the sentinels already send
their samples. Each node keeps KEEP bytes at most, whatever it printed, placed by their
offset in its log: a shipping started again (a new follow, a sentinel reconnected or
respawned) overlaps what is kept, and only the bytes past it are taken (no line twice),
or lies past it, and the bytes between are missed, so a follower that had the log is
told how many (never a silent hole); a log that shrank is another: its backlog starts
over and so do the followers' panes. A follower that falls behind is told how many
bytes it missed, too, and a frame to it is bounded (feedwire.FRAME_DATA), the nodes
taking turns. A `log` frame is node data: checked by feedwire (exact keys, base64,
bounds), counted on the board when malformed, dropped when it is of an attempt that was
the board's before. One of an attempt the board has not moved to yet (a coordinator
started again mid-chain takes up the attempt only once it read its files, while the
sentinels already ship it) is kept, bounded (PENDING runs, KEEP bytes a node), and
becomes the backlog when the board moves to it: a pane misses none of its first lines.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from mntui.sessions.node.wire import feedwire, frames

KEEP = 64 * 1024  # bytes of each node's log kept for a follower that connects
TICK = 0.5  # seconds between two `logs` frames to a follower: a pane redrawn twice a second
BEAT = 1.0  # seconds: a follower hears at least this often (an empty `logs`)
MORE = 0.01  # seconds between two frames while a follower is behind (a backlog's catch-up)
TO_FOLLOWER = frozenset({"logs"})  # the kinds a follower takes
# A follower's name in its hello: no node's (a "/" is in no node name), so a coordinator
# of a bundle before this one refuses it (unknown-node) instead of taking it for the
# main's sentinel and closing that one's channel.
FOLLOWER = "mntui/feed"
PENDING = 2  # attempts not (yet) the board's whose logs are kept for when it moves to one
PAST = 64  # attempts that were the board's: a late frame of one is dropped


def is_follower(hello: dict[str, Any]) -> bool:
    return hello.get("node") == FOLLOWER and hello.get("role") == "feed"


class Backlog:
    """One node's last KEEP bytes; `end`: the offset in its log right after them. `gen`
    names this log among the node's (a follower's cursor of another is void)."""

    def __init__(self, gen: int, at: int) -> None:
        self.gen = gen
        self.buf = bytearray()
        self.end = at

    def add(self, data: bytes, at: int, fresh: bool) -> bool:
        """`data` from offset `at` placed; False: the log shrank (another file)."""
        if at > self.end:  # a gap: what came before it is not followed by what comes after
            self.buf.clear()
            self.end = at
        elif at < self.end:
            if not fresh:  # a shipper that goes on went back: the log is another
                return False
            data = data[self.end - at :]  # a new start near the end: only what is new
        self.buf += data
        self.end += len(data)
        del self.buf[: max(0, len(self.buf) - KEEP)]
        return True

    def since(self, cursor: int | None, most: int) -> tuple[bytes, int, int]:
        """(bytes after `cursor`, bytes missed before them, the new cursor); `cursor`
        None: the whole backlog."""
        start = self.end - len(self.buf)
        at = start if cursor is None else max(cursor, start)
        missed = 0 if cursor is None else at - cursor
        data = bytes(self.buf[at - start : at - start + most])
        return data, missed, at + len(data)


class Cursors:
    """One follower's place in each node's log: (its backlog's gen, offset)."""

    def __init__(self) -> None:
        self.at: dict[str, tuple[int, int]] = {}
        self.turn = 0  # the node a frame starts with: the one the last frame left waiting


class Feed:
    """The backlogs and the followers of one coordinator."""

    def __init__(self, board: Any) -> None:
        self.board = board  # coordstate.Board: its run, its peers, its malformed count
        self.lock = threading.Lock()
        self.logs: dict[str, Backlog] = {}
        self.pending: dict[str, dict[str, Backlog]] = {}  # of runs the board has not had
        self.past: list[str] = []  # runs that were the board's, the latest PAST
        self.followers = 0
        self.epoch = 0  # bumped when the board's attempt changes: panes start over
        self.gen = 0  # the last Backlog's: a node's log started over gets a new one
        self.run = board.run
        self.renewed = 0.0

    def heard(self, node: str, msg: dict[str, Any]) -> bool:
        """True when `msg` was a `log` frame (taken, or counted as malformed)."""
        if msg.get("k") != "log":
            return False
        try:
            run, data, at, fresh = feedwire.check_log(msg)
        except feedwire.Malformed:
            with self.board.lock:
                self.board.malformed += 1
            return True
        with self.lock:
            self._attempt()
            logs = self._logs_of(run)
            if logs is None:
                return True
            log = logs.get(node)
            if log is None or not log.add(data, at, fresh):
                self.gen += 1  # a new log of this node: its followers' panes start over
                log = logs[node] = Backlog(self.gen, at)
                log.add(data, at, fresh)
        return True

    def _logs_of(self, run: str) -> dict[str, Backlog] | None:
        """Under self.lock: the backlogs `run`'s frames go to; None: an attempt that was
        the board's before (its panes are gone). Of a run the board has not had, the
        newest PENDING are kept apart until the board moves to one of them."""
        if run == self.run:
            return self.logs
        if run in self.past:
            return None
        kept = self.pending.get(run)
        if kept is None:
            while len(self.pending) >= PENDING:
                del self.pending[next(iter(self.pending))]  # the one heard of first
            kept = self.pending[run] = {}
        return kept

    def _attempt(self) -> None:
        """Under self.lock: the board moved to another attempt; its logs start afresh,
        from what its sentinels shipped before the move."""
        if self.board.run != self.run:
            self.past.append(self.run)
            del self.past[:-PAST]
            self.run, self.epoch = self.board.run, self.epoch + 1
            self.logs = self.pending.pop(self.run, {})

    def joined(self, ch: frames.Channel) -> None:
        """A sentinel (re)connected: it ships if someone follows."""
        if self.followers:
            try:
                ch.send("follow", lease=feedwire.LEASE)
            except OSError:
                pass

    def renew(self, now: float, force: bool = False) -> None:
        with self.lock:
            due = force or now - self.renewed >= feedwire.RENEW
            if due:
                self.renewed = now
            lease = feedwire.LEASE if self.followers else 0.0
        if due:
            self.board.send_all("follow", lease=lease)

    def serve(self, ch: frames.Channel) -> None:
        """One follower, until it leaves or its channel breaks: every node's backlog,
        then what came since, every TICK (an empty frame every BEAT)."""
        with self.lock:
            self.followers += 1
        self.renew(time.monotonic(), force=True)
        try:
            self._serve(ch)
        except (OSError, frames.Refused):
            pass
        finally:
            ch.close()
            with self.lock:
                self.followers -= 1
                last = self.followers == 0
            if last:
                self.renew(time.monotonic(), force=True)

    def _serve(self, ch: frames.Channel) -> None:
        cursors = Cursors()
        epoch, sent = -1, 0.0
        while True:
            now = time.monotonic()
            with self.lock:
                self._attempt()
                if epoch != self.epoch:
                    epoch, cursors = self.epoch, Cursors()
                chunks, more = self._chunks(cursors)
            if chunks or now - sent >= BEAT:
                ch.send("logs", **feedwire.logs_fields(chunks, epoch))
                sent = now
            self.renew(now)
            try:  # a follower sends nothing: this waits (not when more is due), or sees it go
                ch.recv(timeout=MORE if more else TICK)
                return  # it spoke: nothing it may say is taken
            except socket.timeout:
                continue

    def _chunks(self, cursors: Cursors) -> tuple[dict[str, tuple[bytes, int, bool]], bool]:
        """Under self.lock: each node's news for one follower, its cursors moved on, at
        most FRAME_DATA bytes of it, the nodes taking turns; True: more is due now."""
        out = {}
        nodes = list(self.logs)
        turn = cursors.turn % len(nodes) if nodes else 0
        left, more = feedwire.FRAME_DATA, False
        for i in range(len(nodes)):
            node = nodes[(turn + i) % len(nodes)]
            log, (gen, cursor) = self.logs[node], cursors.at.get(node, (-1, None))
            first = gen != log.gen  # a new follower, or the node's log started over
            room = min(feedwire.LOGS_MAX, left - len(node) - feedwire.NODE_COST)
            if room <= 0:  # this frame is full: the next starts with this node
                cursors.turn, more = (turn + i) % len(nodes), True
                break
            data, missed, end = log.since(None if first else cursor, room)
            cursors.at[node] = (log.gen, end)
            more = more or end < log.end
            if data or missed or first:
                out[node] = (data, missed, first)
                left -= len(data) + len(node) + feedwire.NODE_COST
        return out, more
