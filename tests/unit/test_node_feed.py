"""The live stream's node side (issue 30, the app over one connection): the wire's strict
checks (feedwire.py), a sentinel's bounded shipping (logship.py), the coordinator's
backlogs and followers (feedserve.py) over a real loopback handshake, and the `feed`
verb's board frames (follower.py)."""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mntui.sessions.node.coord import feedserve, follower
from mntui.sessions.node.sentinel import logship
from mntui.sessions.node.wire import feedwire, frames

SECRET = bytes(range(32))
FRAME = {"v": 1, "k": "log", "s": 3}


class Wire:
    """A stand-in channel that keeps what is sent (the shipper only calls `send`)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, kind: str, **fields: Any) -> None:
        self.sent.append({"v": 1, "k": kind, "s": len(self.sent) + 1, **fields})


RUN0, RUN1, RUN2 = (f"20261126-10000{i}-abcd" for i in range(3))  # run ids


def log_msg(**over: Any) -> dict[str, Any]:
    return {**FRAME, **feedwire.log_fields(RUN1, b"step 1\n", 0, True), **over}


@pytest.mark.parametrize(
    "over",
    [
        {"data": "!!notbase64"},
        {"data": base64.b64encode(b"x" * (feedwire.CHUNK_MAX + 3)).decode()},
        {"data": 7},
        {"at": -1},
        {"at": True},
        {"at": 1.5},
        {"fresh": 1},
        {"fresh": None},
        {"run": ""},
        {"run": "a\x1b[2Jb"},
        {"run": "run1"},  # a word, not a run id: it would key a kept backlog
        {"run": 12},
        {"extra": 1},
    ],
)
def test_a_log_frame_of_another_shape_is_malformed(over: dict[str, Any]) -> None:
    with pytest.raises(feedwire.Malformed):
        feedwire.check_log(log_msg(**over))


def test_a_log_frame_carries_any_bytes_as_data() -> None:
    raw = b"\x1b]52;c;aGk=\x07 MNTUIFEED1 eyJrIjoiZW5kIn0=\n\xff\xfe\x00"
    got = feedwire.check_log(log_msg(**feedwire.log_fields(RUN1, raw, 5, True)))
    assert got == (RUN1, raw, 5, True)


def test_a_follow_frame_is_a_bounded_lease() -> None:
    assert feedwire.check_follow({"v": 1, "k": "follow", "s": 1, "lease": 15.0}) == 15.0
    for bad in ({"lease": -1}, {"lease": 1e9}, {"lease": "15"}, {"lease": 1, "x": 2}, {}):
        with pytest.raises(feedwire.Malformed):
            feedwire.check_follow({"v": 1, "k": "follow", "s": 1, **bad})


def test_lines_to_the_manager_are_base64_and_strict() -> None:
    obj = {"k": "log", "data": feedwire.b64(b"\n\r\x00 MNTUIFEED1 ")}
    raw = feedwire.line(obj)
    assert raw.count(b"\n") == 1 and feedwire.read_line(raw) == obj
    assert feedwire.read_line(b"Welcome to node0!\n") is None  # a shell's greeting
    for bad in (
        feedwire.PREFIX + b"not base64!\n",
        feedwire.PREFIX + base64.b64encode(b"[1, 2]") + b"\n",
        feedwire.PREFIX + base64.b64encode(b'{"k": 1}') + b"\n",
        feedwire.PREFIX + base64.b64encode(b'{"k": "x", "n": NaN}') + b"\n",
        raw[:-1],  # cut: no newline
    ):
        with pytest.raises(feedwire.Malformed):
            feedwire.read_line(bad)


def test_the_shipper_ships_only_under_a_lease_on_its_channel(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(b"old line\n" * 10)
    ch, other, s = Wire(), Wire(), logship.Shipper()
    assert s.ship(ch, str(log), RUN1, now=100.0) == 0 and not ch.sent  # nobody follows
    s.follow(ch, {"v": 1, "k": "follow", "s": 1, "lease": 10}, now=100.0)
    assert s.ship(other, str(log), RUN1, now=100.5) == 0  # another channel: not its lease
    assert s.ship(ch, str(log), RUN1, now=101.0) == 90  # the backlog: from a line's start
    with log.open("ab") as f:
        f.write(b"new\n")
    assert s.ship(ch, str(log), RUN1, now=101.1) == 0  # within TICK
    assert s.ship(ch, str(log), RUN1, now=101.5) == 4
    assert feedwire.check_log(ch.sent[-1]) == (RUN1, b"new\n", 90, False)
    assert s.ship(ch, str(log), RUN1, now=112.0) == 0  # the lease ran out
    s.follow(ch, {"v": 1, "k": "follow", "s": 2, "lease": "x"})
    assert s.malformed == 1


def test_the_shipper_is_bounded_and_says_what_it_skipped(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(b"")
    ch, s = Wire(), logship.Shipper(rate=4096)
    s.follow(ch, {"v": 1, "k": "follow", "s": 1, "lease": 60}, now=0.0)
    assert s.ship(ch, str(log), RUN1, now=1.0) == 0
    log.write_bytes(b"x" * 100_000)  # a flood: far over a second's rate
    sent = sum(s.ship(ch, str(log), RUN1, now=1.0 + 0.25 * i) for i in range(1, 41))
    assert sent <= 4096 * 11  # ten seconds at the rate, and the first allowance
    frames_ = [feedwire.check_log(m) for m in ch.sent]
    skipped, end = 0, 0
    for _run, data, at, _fresh in frames_:
        assert at >= end  # never back: a jump past bytes is said by the next frame's offset
        skipped, end = skipped + at - end, at + len(data)
    assert skipped > 0 and skipped + sent == 100_000  # every byte shipped or said skipped
    log.write_bytes(b"short\n")  # truncated: read again from its start
    s.ship(ch, str(log), RUN1, now=20.0)
    assert feedwire.check_log(ch.sent[-1]) == (RUN1, b"short\n", 0, False)


def test_a_backlog_keeps_the_last_bytes_and_counts_what_a_cursor_missed() -> None:
    b = feedserve.Backlog(1, 0)
    assert b.add(b"a" * feedserve.KEEP, 0, True)
    data, missed, cur = b.since(None, 1 << 20)
    assert len(data) == feedserve.KEEP and missed == 0 and cur == feedserve.KEEP
    assert b.add(b"bc", cur, False)
    assert b.since(cur, 1 << 20) == (b"bc", 0, cur + 2)
    assert b.add(b"z" * 10, cur + 102, False)  # 100 bytes skipped: the backlog starts after
    assert b.since(cur + 2, 1 << 20) == (b"z" * 10, 100, cur + 112)
    assert b.add(b"zzzzy", cur + 108, True)  # a fresh start over what is kept: only the news
    assert b.since(cur + 112, 1 << 20) == (b"y", 0, cur + 113)
    assert not b.add(b"new file\n", 0, False)  # a shipper that goes on went back: shrank


class Board:
    """What Feed reads of the coordinator's board: its run, lock, count and peers."""

    def __init__(self) -> None:
        self.run, self.lock, self.malformed = RUN1, threading.Lock(), 0
        self.told: list[tuple[str, dict[str, Any]]] = []

    def send_all(self, kind: str, **fields: Any) -> None:
        self.told.append((kind, fields))


def test_the_feed_counts_malformed_log_frames_and_drops_old_attempts() -> None:
    board = Board()
    feed = feedserve.Feed(board)
    assert not feed.heard("node0", {**FRAME, "k": "snap"})
    assert feed.heard("node0", log_msg(data="%%%")) and board.malformed == 1
    assert feed.heard("node0", log_msg()) and feed.logs["node0"].end == 7
    assert feed.heard("node0", log_msg(run=RUN0, at=7)) and feed.logs["node0"].end == 7
    board.run = RUN2  # a restart: the panes start over, the old logs are gone
    feed.heard("node1", log_msg(run=RUN2))
    assert feed.epoch == 1 and set(feed.logs) == {"node1"}


def test_a_new_attempts_first_lines_are_kept_until_the_board_moves_to_it() -> None:
    """A coordinator started again mid-chain takes up attempt k only once it read its
    files, and its sentinels ship attempt k's log meanwhile: those first lines are the
    pane's when the board moves (the old code dropped them, the pane began mid-log)."""
    board = Board()
    feed = feedserve.Feed(board)
    feed.heard("node0", log_msg(**feedwire.log_fields(RUN1, b"old\n", 0, True)))
    feed.heard("node0", log_msg(**feedwire.log_fields(RUN2, b"step 1\n", 0, True)))
    feed.heard("node0", log_msg(**feedwire.log_fields(RUN2, b"step 2\n", 7)))
    cursors = feedserve.Cursors()
    assert feed._chunks(cursors) == ({"node0": (b"old\n", 0, True)}, False)
    board.run = RUN2  # the board takes up the attempt: its panes start over
    feed._attempt()
    cursors = feedserve.Cursors()
    assert feed._chunks(cursors) == ({"node0": (b"step 1\nstep 2\n", 0, True)}, False)
    feed.heard("node0", log_msg(**feedwire.log_fields(RUN2, b"step 3\n", 14)))
    assert feed._chunks(cursors) == ({"node0": (b"step 3\n", 0, False)}, False)
    feed.heard("node0", log_msg(**feedwire.log_fields(RUN1, b"late\n", 4)))
    assert set(feed.pending) == set(), "a frame of an attempt that was the board's: dropped"
    for k in range(3, 3 + feedserve.PENDING + 3):  # runs never the board's: bounded
        feed.heard(
            "node0", log_msg(**feedwire.log_fields(f"20261126-1000{k:02d}-abcd", b"x\n", 0, True))
        )
    assert list(feed.pending) == [
        f"20261126-1000{k:02d}-abcd" for k in range(6, 6 + feedserve.PENDING)
    ]
    assert feed._chunks(cursors) == ({}, False)


def test_a_follower_gets_the_backlogs_then_news_over_a_real_handshake() -> None:
    board = Board()
    feed = feedserve.Feed(board)
    feed.heard("node0", log_msg(**feedwire.log_fields(RUN1, b"before\n", 0)))
    server, client = socket.socketpair()
    hello = {"node": feedserve.FOLLOWER, "chain": RUN1, "role": "feed"}
    assert feedserve.is_follower(hello) and not feedserve.is_follower({**hello, "node": "node0"})

    def serve() -> None:
        ch = frames.server_handshake(server, lambda _: SECRET, kinds=frozenset({"log"}))
        feed.serve(ch)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    ch = frames.client_handshake(client, SECRET, hello, kinds=feedserve.TO_FOLLOWER)
    got, _ = feedwire.check_logs(ch.recv(timeout=5))
    assert got == {"node0": (b"before\n", 0, True)}
    assert ("follow", {"lease": feedwire.LEASE}) in board.told
    feed.heard("node0", log_msg(**feedwire.log_fields(RUN1, b"after\n", 7)))
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        got, _ = feedwire.check_logs(ch.recv(timeout=5))
        if got:
            break
    assert got == {"node0": (b"after\n", 0, False)}
    ch.close()
    t.join(5)
    assert not t.is_alive() and feed.followers == 0
    assert board.told[-1] == ("follow", {"lease": 0.0})  # nobody follows: shipping stops


def test_the_follower_sends_only_the_board_entries_that_changed(tmp_path: Path) -> None:
    coord = tmp_path / "coord"
    coord.mkdir()
    (coord / "status.json").write_text(json.dumps({"run": "r", "nodes": {}}))
    nodes = {"node0": {"at": 1.0}, "node1": {"at": 1.0}}
    (coord / "nodes.json").write_text(json.dumps({"at": 1, "nodes": nodes}))
    boards = follower.Boards(str(coord))
    first = boards.frame()
    assert first["status"] == {"run": "r", "nodes": {}} and set(first["nodes"]) == {
        "node0",
        "node1",
    }
    assert boards.frame()["nodes"] == {}  # unchanged file: not even re-read
    nodes["node1"] = {"at": 2.0}
    (coord / "nodes.json").write_text(json.dumps({"at": 2, "nodes": nodes}))
    os.utime(coord / "nodes.json", ns=(1, time.time_ns() + 10**9))
    assert set(boards.frame()["nodes"]) == {"node1"}


class Relay:
    """A sentinel's channel that hands each frame to the coordinator's Feed, as the
    coordinator's peer loop does (coordinator.py: `feed.heard(node, msg)`)."""

    def __init__(self, feed: feedserve.Feed, node: str) -> None:
        self.feed, self.node, self.s = feed, node, 0

    def send(self, kind: str, **fields: Any) -> None:
        self.s += 1
        assert self.feed.heard(self.node, {"v": 1, "k": kind, "s": self.s, **fields})


def follow(lease: float) -> dict[str, Any]:
    return {"v": 1, "k": "follow", "s": 1, "lease": lease}


def lines_of(feed: feedserve.Feed, node: str) -> list[bytes]:
    return bytes(feed.logs[node].buf).splitlines()


def test_a_restarted_follow_never_repeats_a_line(tmp_path: Path) -> None:
    """Follow, stop, follow again; a new channel (the sentinel reconnected); a new
    Shipper (the sentinel respawned): each restarts from near the end of the log, and
    the coordinator's backlog still holds every line once, in order."""
    log = tmp_path / "output.log"
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(1, 101)))
    feed = feedserve.Feed(Board())
    ch, s = Relay(feed, "node0"), logship.Shipper()
    s.follow(ch, follow(10), now=0.0)
    assert s.ship(ch, str(log), RUN1, now=1.0) > 0
    s.follow(ch, follow(0), now=2.0)  # the last follower left
    s.follow(ch, follow(10), now=3.0)  # and one came back (the app's stream retried)
    with log.open("ab") as f:
        f.write(b"line 101\n")
    s.ship(ch, str(log), RUN1, now=4.0)
    ch2, s2 = Relay(feed, "node0"), logship.Shipper()  # reconnected, then respawned
    s2.follow(ch2, follow(10), now=5.0)
    s2.ship(ch2, str(log), RUN1, now=6.0)
    got = lines_of(feed, "node0")
    assert got == [b"line %d" % i for i in range(1, 102)], (len(got), len(set(got)))


def test_bytes_printed_while_nobody_followed_are_said_skipped(tmp_path: Path) -> None:
    """More than the shipper's start-back printed while nobody followed: a follower that
    had the log before is told how many bytes it missed, never handed a silent hole."""
    log = tmp_path / "output.log"
    log.write_bytes(b"before\n")
    feed = feedserve.Feed(Board())
    ch, s = Relay(feed, "node0"), logship.Shipper()
    s.follow(ch, follow(10), now=0.0)
    s.ship(ch, str(log), RUN1, now=1.0)
    data, missed, cursor = feed.logs["node0"].since(None, 1 << 20)
    assert (data, missed) == (b"before\n", 0)
    s.follow(ch, follow(0), now=2.0)
    gap = b"".join(b"unseen %06d\n" % i for i in range(4000))  # 56 KB, over BACK
    with log.open("ab") as f:
        f.write(gap + b"after\n")
    s.follow(ch, follow(10), now=3.0)
    s.ship(ch, str(log), RUN1, now=4.0)
    data, missed, _ = feed.logs["node0"].since(cursor, 1 << 20)
    assert data.endswith(b"after\n") and gap.endswith(data[: -len(b"after\n")])
    assert missed + len(data) == len(gap) + len(b"after\n")  # every byte shown or said


def test_a_follower_of_300_nodes_gets_every_backlog_in_bounded_frames() -> None:
    """300 nodes with a full backlog each: no frame over MAX_FRAME, no follower line over
    LINE_MAX, and every node's backlog arrives whole, once, its first chunk `first`."""
    board = Board()
    feed = feedserve.Feed(board)
    names = [f"gpu-node-{i:04d}" for i in range(300)]
    want = {}
    for i, n in enumerate(names):
        want[n] = bytes([65 + i % 26]) * feedserve.KEEP
        for k in range(0, feedserve.KEEP, feedwire.CHUNK_MAX):
            Relay(feed, n).send("log", **feedwire.log_fields(RUN1, want[n][k : k + 16384], k))
    server, client = socket.socketpair()

    def serve() -> None:
        ch = frames.server_handshake(server, lambda _: SECRET, kinds=frozenset({"log"}))
        feed.serve(ch)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    hello = {"node": feedserve.FOLLOWER, "chain": RUN1, "role": "feed"}
    ch = frames.client_handshake(client, SECRET, hello, kinds=feedserve.TO_FOLLOWER)
    got: dict[str, bytes] = {}
    firsts: dict[str, int] = {}
    deadline = time.monotonic() + 60
    while got != want and time.monotonic() < deadline:
        msg = ch.recv(timeout=10)
        chunks, epoch = feedwire.check_logs(msg)
        assert len(feedwire.line({"k": "logs", **feedwire.logs_fields(chunks, epoch)})) <= (
            feedwire.LINE_MAX
        )
        for n, (data, missed, first) in chunks.items():
            assert missed == 0 and (first == (n not in got)), n
            firsts[n] = firsts.get(n, 0) + first
            got[n] = got.get(n, b"") + data
    ch.close()
    t.join(5)
    assert got == want and set(firsts.values()) == {1}


def test_a_log_that_shrank_starts_the_followers_panes_over() -> None:
    """A shipper that goes on went back (the log was truncated, another file): the node's
    backlog starts over, and a follower's next chunk of it is `first`, its pane too."""
    feed = feedserve.Feed(Board())
    feed.heard("node0", log_msg(**feedwire.log_fields(RUN1, b"old 1\nold 2\n", 0, True)))
    cursors = feedserve.Cursors()
    assert feed._chunks(cursors) == ({"node0": (b"old 1\nold 2\n", 0, True)}, False)
    feed.heard("node0", log_msg(**feedwire.log_fields(RUN1, b"old 3\n", 12)))
    assert feed._chunks(cursors) == ({"node0": (b"old 3\n", 0, False)}, False)
    feed.heard("node0", log_msg(**feedwire.log_fields(RUN1, b"new 1\n", 0)))
    assert feed._chunks(cursors) == ({"node0": (b"new 1\n", 0, True)}, False)
    assert feed._chunks(cursors) == ({}, False)
