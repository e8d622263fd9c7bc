"""Issue 18, finding 6: a webhook's `timeout` bounds the whole delivery, not each read,
and notices still queued when mntui exits are said in the notify log, never dropped
silently. Real sockets on 127.0.0.1: a server that answers a byte a second, one that
never answers."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakecluster import wait_for

from mntui.sessions.notify import Notice, Notifier, NotifyEvent, NotifyPolicy

TRICKLE = 0.4  # seconds between bytes: each read is well within the timeout
REPLY = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 200 + b"\r\n\r\n"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)


class Server:
    """Accepts every connection; `trickle` answers 200 a byte every TRICKLE s, else silence.
    Counts the connections it saw end (the client gave up on them)."""

    def __init__(self, trickle: bool) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.trickle = trickle
        self.conns: list[socket.socket] = []
        self.closed_by_client = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            for byte in REPLY if self.trickle else b"":
                conn.sendall(bytes([byte]))
                time.sleep(TRICKLE)
            if conn.recv(1) == b"":  # silent: wait until the client hangs up
                self.closed_by_client += 1
        except OSError:
            self.closed_by_client += 1

    def close(self) -> None:
        self.sock.close()
        for conn in self.conns:
            conn.close()


@pytest.fixture
def trickling() -> Iterator[Server]:
    server = Server(trickle=True)
    yield server
    server.close()


@pytest.fixture
def silent() -> Iterator[Server]:
    server = Server(trickle=False)
    yield server
    server.close()


def notice(event: NotifyEvent) -> Notice:
    return Notice(event, "demo", "20261122-105313-8e89", f"{event} summary")


def log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_webhook_answering_a_byte_a_second_is_cut_off_at_the_timeout(
    trickling: Server, tmp_path: Path
) -> None:
    """The review's server held the notifier 30 s against a 2 s timeout per notice."""
    log = tmp_path / "notify.log"
    n = Notifier(NotifyPolicy(webhook=trickling.url, timeout=1.0), log)
    t0 = time.monotonic()
    n.send(notice(NotifyEvent.TEARDOWN))
    n.send(notice(NotifyEvent.GAVE_UP))
    assert n.drain(10.0), "the two deliveries outlived their 1 s timeouts"
    took = time.monotonic() - t0
    assert took < 3.5, f"two 1 s deliveries took {took:.1f}s"
    lines = log_lines(log)
    assert len(lines) == 2 and all("no answer within 1s" in ln for ln in lines), lines
    assert "teardown" in lines[0] and "gave-up" in lines[1]
    # the abandoned connections are shut, not left to the server's pace
    wait_for(lambda: trickling.closed_by_client == 2, 5.0, what="the client to hang up")


def test_notices_left_at_exit_are_said_in_the_log(silent: Server, tmp_path: Path) -> None:
    """The supervisor exits after its drain: a `gave-up` queued behind a stuck webhook
    used to vanish with it."""
    log = tmp_path / "notify.log"
    n = Notifier(NotifyPolicy(webhook=silent.url, timeout=30.0), log)
    for event in (NotifyEvent.TEARDOWN, NotifyEvent.FAILED, NotifyEvent.GAVE_UP):
        n.send(notice(event))
    t0 = time.monotonic()
    left = n.close(0.5)
    assert time.monotonic() - t0 < 2.0
    assert [x.event for x in left] == [
        NotifyEvent.TEARDOWN,
        NotifyEvent.FAILED,
        NotifyEvent.GAVE_UP,
    ]
    lines = log_lines(log)
    assert len(lines) == 3, lines
    assert "teardown" in lines[0] and "abandoned: still being delivered at exit" in lines[0]
    assert all("not delivered: still queued at exit (0.5s drain)" in ln for ln in lines[1:])
    assert "failed" in lines[1] and "gave-up" in lines[2]
    n.send(notice(NotifyEvent.RESTART))  # too late: said, not queued
    assert "restart" in log_lines(log)[3] and "not sent" in log_lines(log)[3]
