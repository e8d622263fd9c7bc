"""Issue 39, finding 2: a run dir's files are the job's too (it runs as the node's user).
A FIFO at `coord/kill` blocked the coordinator's judge in open() for good while its
heartbeats went on, so the sentinels never called it lost. Each run dir file is now
opened non-blocking, never through a symlink, and must be a regular file
(node/files/plainfile.py); and the heartbeats go only while the chain's thread pulses
(coordinator.py `beat`). Real files, FIFOs, sockets and threads."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_node_chain_review import SECRET, config

from mntui.sessions.node.chain.resume import load
from mntui.sessions.node.coord.coordinator import STUCK, Coordinator
from mntui.sessions.node.coord.coordport import FROM_SENTINEL
from mntui.sessions.node.files.plainfile import NotPlain, plain, read_plain
from mntui.sessions.node.proc.logtail import LogTail
from mntui.sessions.node.sentinel.sentinellink import COMMANDS
from mntui.sessions.node.wire import frames
from mntui.sessions.node.wire.watchcfg import write_json


def returns_soon(call: Callable[[], Any], within: float = 5.0) -> Any:
    """`call()`'s value (or its exception); the test fails, not hangs, when it blocks."""
    got: list[Any] = []

    def run() -> None:
        try:
            got.append(call())
        except BaseException as exc:  # raised here, in the test's thread
            got.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(within)
    assert not t.is_alive(), f"{call} blocked"
    if isinstance(got[0], BaseException):
        raise got[0]
    return got[0]


def test_a_fifo_a_symlink_or_a_directory_is_no_file_to_read(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.write_bytes(b"x" * 100_000)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(good)
    assert read_plain(str(good), 70_000) == b"x" * 70_000
    for odd in ("fifo", "link", ".", "gone"):
        assert returns_soon(lambda odd=odd: read_plain(str(tmp_path / odd), 10)) is None
    with pytest.raises(NotPlain):
        open(tmp_path / "link", opener=plain)  # noqa: SIM115 (it never opens)
    with pytest.raises(OSError):  # no reader: ENXIO at once, not a wait for one
        returns_soon(lambda: open(tmp_path / "fifo", "w", opener=plain))  # noqa: SIM115


def test_the_coordinators_and_sentinels_reads_pass_a_fifo_by(tmp_path: Path) -> None:
    """coord/kill (the judge's look, 50 times a second), a chain file (resume.py) and
    the log a sentinel tails: a FIFO at each is no request, no file, no new bytes."""
    out = tmp_path / "coord"
    out.mkdir()
    os.mkfifo(out / "kill")
    os.mkfifo(out / "chain.json")
    os.mkfifo(tmp_path / "output.log")
    c = Coordinator(config(), SECRET, str(tmp_path), socket.socket())
    assert returns_soon(c.kill_requested) is None
    assert returns_soon(c.kill_requested) is None
    said = [e for e in _journal(out) if e["kind"] == "kill-ignored"]
    assert len(said) == 1 and "not a regular file" in said[0]["data"]["why"], said
    assert returns_soon(lambda: load(str(out), "chain.json")) is None
    tail = LogTail(str(tmp_path / "output.log"), "g0", None)
    returns_soon(tail.read)
    assert tail.offset == 0
    os.unlink(out / "kill")  # the manager's request: a regular file, taken
    write_json(str(out / "kill"), {"grace": 1.5, "id": "req-1"})
    assert c.kill_requested() == (1.5, "req-1")


def test_heartbeats_go_only_while_the_chains_thread_pulses(tmp_path: Path) -> None:
    cfg = replace(config(), heartbeat=0.05)
    c = Coordinator(cfg, SECRET, str(tmp_path), socket.socket())
    sentinel = _connected(c, "g1")
    threading.Thread(target=c.beat, daemon=True).start()
    try:
        beating = threading.Event()
        beating.set()

        def chain() -> None:  # the chain's thread, going round while `beating`
            while not c.done.is_set():
                if beating.is_set():
                    c.board.pulse()
                time.sleep(0.01)

        threading.Thread(target=chain, daemon=True).start()
        assert sentinel.recv(timeout=5)["k"] == "hb"
        beating.clear()  # stuck: after STUCK heartbeats' time, none
        quiet = STUCK * cfg.heartbeat
        _drain(sentinel, quiet + 1.0)
        with pytest.raises(socket.timeout):
            sentinel.recv(timeout=10 * quiet)
        beating.set()
        assert sentinel.recv(timeout=5)["k"] == "hb"
    finally:
        c.done.set()


def _connected(c: Coordinator, node: str) -> frames.Channel:
    """`node`'s sentinel on the coordinator's board, over a real handshake."""
    server, client = socket.socketpair()

    def serve() -> None:
        ch = frames.server_handshake(server, lambda _: SECRET, kinds=FROM_SENTINEL)
        c.board.connected(node, ch)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    hello = {"node": node, "chain": c.cfg.run}
    ch = frames.client_handshake(client, SECRET, hello, kinds=COMMANDS)
    t.join(5)
    return ch


def _drain(ch: frames.Channel, seconds: float) -> None:
    """What was sent before the beat saw the chain stuck."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            ch.recv(timeout=max(0.0, end - time.monotonic()))
        except TimeoutError:
            return


def _journal(out: Path) -> list[dict[str, Any]]:
    path = out / "journal.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
