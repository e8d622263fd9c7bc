"""The coordinator's door (node/coord/door.py, issue 39 finding 1): connections wait there for
their hello on one thread, bounded per address and in all; only a hello that proves the
run's secret, with a nonce not seen before, is handed on. Real loopback sockets, a real
Door on its own thread."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from mntui.sessions.node.coord import door
from mntui.sessions.node.wire import frames
from mntui.sessions.node.wire.framecodec import Reader

SECRET = bytes(range(32))
RUN = "20261201-101500-ab12"
TO_SENTINEL = frozenset({"hb"})


@dataclass
class Front:
    """A door on a real port, what it refused and what it handed on."""

    port: int
    done: threading.Event
    refused: list[tuple[str, str]] = field(default_factory=list)
    handed: list[str] = field(default_factory=list)  # the nodes, as their hellos said
    channels: list[frames.Channel] = field(default_factory=list)

    def reasons(self) -> list[str]:
        return [r for r, _ in self.refused]


@pytest.fixture
def front() -> Iterator[Front]:
    listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
    f = Front(listener.getsockname()[1], threading.Event())

    def hand_on(sock: socket.socket, reader: Reader, a: frames.Admitted, where: str,
                deadline: float) -> None:  # fmt: skip
        f.handed.append(a.peer["node"])

        def finish() -> None:  # as coordport's, on a thread of its own
            kinds = frozenset({"snap"})
            try:
                f.channels.append(frames.server_finish(sock, reader, a, kinds=kinds,
                                                       deadline=deadline))  # fmt: skip
            except frames.Refused as exc:
                f.refused.append((exc.reason, where))

        threading.Thread(target=finish, daemon=True).start()

    def secret_for(hello: dict[str, Any]) -> bytes | None:
        return SECRET if hello["chain"] == RUN and hello["node"] in ("g0", "g1") else None

    d = door.Door(listener, secret_for, lambda r, w: f.refused.append((r, w)), hand_on, f.done)
    t = threading.Thread(target=d.run, daemon=True)
    t.start()
    yield f
    f.done.set()
    t.join(5)
    assert not t.is_alive(), "the door did not end with the chain"
    listener.close()
    for ch in f.channels:
        ch.close()


def idle(port: int, n: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]


def sentinel(port: int, node: str = "g0") -> frames.Channel:
    sock = socket.create_connection(("127.0.0.1", port), timeout=2)
    return frames.client_handshake(sock, SECRET, {"node": node, "chain": RUN}, kinds=TO_SENTINEL)


def until(what: Any, within: float = 5.0) -> Any:
    end = time.monotonic() + within
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        time.sleep(0.01)
    raise AssertionError(f"not within {within} s")


def dropped(sock: socket.socket, within: float = 5.0) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_sentinel_gets_in_past_a_door_full_of_idle_connections(front: Front) -> None:
    """Every place an address may hold is taken by connections that say nothing: the
    sentinel's connection still comes in (the oldest idle one makes room), at once."""
    held = idle(front.port, door.PER_ADDRESS)
    t0 = time.monotonic()
    ch = sentinel(front.port, "g1")
    assert time.monotonic() - t0 < 1.0
    assert until(lambda: front.handed) == ["g1"]
    assert dropped(held[0])  # the oldest made room
    assert "busy" in front.reasons()
    ch.close()
    for s in held:
        s.close()


def test_a_silent_connection_goes_after_the_first_frames_deadline(front: Front) -> None:
    (s,) = idle(front.port, 1)
    t0 = time.monotonic()
    assert dropped(s)
    assert door.FIRST_FRAME - 0.1 <= time.monotonic() - t0 < door.FIRST_FRAME + 1.0
    until(lambda: front.refused)  # the door says why just after it closes
    assert front.reasons() == ["handshake-timeout"]
    s.close()


def test_a_hello_without_the_secret_or_seen_before_is_refused_at_the_door(front: Front) -> None:
    """One without the secret, one of no member, a copy of an admitted one: refused on
    their first frame, none handed on; the real one is."""
    body = json.dumps({"node": "g0", "chain": RUN, "v": 1, "k": "hello", "s": 0,
                       "nc": "ab" * 16}).encode()  # fmt: skip
    good = hmac.new(hmac.new(SECRET, b"mntui1|hello", hashlib.sha256).digest(), body,
                    hashlib.sha256).digest()  # fmt: skip
    stranger = body.replace(b'"g0"', b'"g9"')
    for mac, text in ((bytes(32), body), (good, stranger), (good, body), (good, body)):
        s = socket.create_connection(("127.0.0.1", front.port))
        s.sendall(struct.pack(">I", len(text)) + mac + text)
        if text is not body or mac != good:
            assert dropped(s)
        s.close()
    until(lambda: len(front.refused) >= 4)
    assert front.handed == ["g0"]  # the first copy (it left before its auth); not the second
    assert sorted(front.reasons()) == ["bad-mac", "closed", "replay", "unknown-node"]
