"""The sentinel↔coordinator wire (node/wire/frames.py) against hostile peers, over real
socketpairs and loopback TCP, each side in its own thread.

The raw peers below are §3 of docs/design/watch-on-the-cluster.md written out again by
hand (proofs, keys, frame bytes), not frames.py's own helpers: they check the module
against the design, and they can send what a real Channel never would.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import random
import socket
import struct
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mntui.sessions.node.wire.frames import (
    MAX_FRAME,
    Channel,
    Closed,
    RefusalCounter,
    Refused,
    client_handshake,
    server_handshake,
)

SECRET = bytes(range(32))
OTHER = bytes(range(1, 33))
HELLO = {"node": "g375", "chain": "20261201-101500-ab12", "ver": "0123456789abcdef"}
TO_COORD = frozenset({"snap", "done", "bye"})
TO_SENTINEL = frozenset({"sample", "kill", "stop"})
ALLOWED = (Refused, ConnectionError, socket.timeout)
JOIN = 10.0


# --- §3 by hand ---------------------------------------------------------------------


def hmac256(key: bytes, text: bytes) -> bytes:
    return hmac.new(key, text, hashlib.sha256).digest()


def proof(secret: bytes, side: str, nc: str, ns: str) -> str:
    return hmac.new(secret, f"mntui1|{side}|{nc}|{ns}".encode(), hashlib.sha256).hexdigest()


def hello_key(secret: bytes) -> bytes:
    return hmac256(secret, b"mntui1|hello")


def keys(secret: bytes, nc: str, ns: str) -> tuple[bytes, bytes]:
    return hmac256(secret, f"cs|{nc}{ns}".encode()), hmac256(secret, f"sc|{nc}{ns}".encode())


def jbody(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def frame(key: bytes | None, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + (bytes(32) if key is None else hmac256(key, body)) + body


def read_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("eof")
        out += chunk
    return out


def read_frame(sock: socket.socket) -> tuple[bytes, bytes]:
    head = read_exact(sock, 36)
    return head[4:], read_exact(sock, struct.unpack(">I", head[:4])[0])


def raw_client(sock: socket.socket, secret: bytes = SECRET) -> tuple[bytes, bytes]:
    """A client handshake by hand; (k_cs, k_sc)."""
    nc = "ab" * 16
    hello = jbody({**HELLO, "v": 1, "k": "hello", "s": 0, "nc": nc})
    sock.sendall(frame(hello_key(secret), hello))
    mac, body = read_frame(sock)
    server = json.loads(body)
    ns = server["ns"]
    k_cs, k_sc = keys(secret, nc, ns)
    assert hmac.compare_digest(mac, hmac256(k_sc, body))
    assert server["mac"] == proof(secret, "s", nc, ns)
    assert server["h"] == hashlib.sha256(hello).hexdigest()
    auth = {"v": 1, "k": "auth", "s": 0, "mac": proof(secret, "c", nc, ns)}
    sock.sendall(frame(k_cs, jbody({**auth, "h": server["h"]})))
    return k_cs, k_sc


def raw_server_hello(sock: socket.socket, secret: bytes = SECRET, nc: str = "") -> bytes:
    """Reads a client hello; the server hello a real server would answer (or, given `nc`,
    would have answered another client: a replayed one; given another `secret`, what a
    server without the run's would make up)."""
    mac, body = read_frame(sock)
    assert secret != SECRET or mac == hmac256(hello_key(secret), body)
    nc, ns = nc or json.loads(body)["nc"], "cd" * 16
    k_sc = keys(secret, nc, ns)[1]
    hello = {"v": 1, "k": "hello", "s": 0, "ns": ns, "mac": proof(secret, "s", nc, ns)}
    return frame(k_sc, jbody({**hello, "h": hashlib.sha256(body).hexdigest()}))


# --- threads and pairs ----------------------------------------------------------------


class Side(threading.Thread):
    """One side of a connection in a thread: its result or its exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.value: Any = None
        self.exc: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as exc:
            self.exc = exc

    def outcome(self) -> Any:
        self.join(JOIN)
        assert not self.is_alive(), "a side hung"
        return self.exc if self.exc is not None else self.value


def table(secret: bytes | None = SECRET) -> Callable[[dict[str, Any]], bytes | None]:
    return lambda hello: (
        secret if (hello["chain"], hello["node"]) == ("20261201-101500-ab12", "g375") else None
    )


def serve(sock: socket.socket, **kw: Any) -> Side:
    kw = {"kinds": TO_COORD, "hello": {"ver": "fedcba9876543210"}, **kw}
    secret_for = kw.pop("secret_for", table())
    side = Side(lambda: server_handshake(sock, secret_for, **kw))
    side.start()
    return side


def handshake(
    c_secret: bytes = SECRET, **server_kw: Any
) -> tuple[Any, Any, socket.socket, socket.socket]:
    """(client outcome, server outcome, client socket, server socket) over a socketpair."""
    c_sock, s_sock = socket.socketpair()
    server = serve(s_sock, **server_kw)
    client = Side(lambda: client_handshake(c_sock, c_secret, dict(HELLO), kinds=TO_SENTINEL))
    client.start()
    return client.outcome(), server.outcome(), c_sock, s_sock


@pytest.fixture
def pair() -> Iterator[tuple[Channel, Channel, socket.socket, socket.socket]]:
    cli, srv, c_sock, s_sock = handshake()
    assert isinstance(cli, Channel) and isinstance(srv, Channel)
    yield cli, srv, c_sock, s_sock
    cli.close()
    srv.close()


@pytest.fixture
def raw() -> Iterator[tuple[socket.socket, bytes, Channel]]:
    """A hand-written client (its socket and k_cs) authenticated to a real server."""
    c_sock, s_sock = socket.socketpair()
    c_sock.settimeout(5)
    server = serve(s_sock)
    k_cs, _ = raw_client(c_sock)
    srv = server.outcome()
    assert isinstance(srv, Channel)
    yield c_sock, k_cs, srv
    srv.close()
    c_sock.close()


def take_frame(sock: socket.socket) -> bytes:
    """The next whole frame off a (non-blocking, handshaken) socket, as bytes."""
    sock.setblocking(True)
    sock.settimeout(5)
    mac, body = read_frame(sock)
    sock.setblocking(False)
    return struct.pack(">I", len(body)) + mac + body


def put(sock: socket.socket, data: bytes, *, end: bool = False) -> None:
    sock.setblocking(True)
    sock.sendall(data)
    if end:
        sock.shutdown(socket.SHUT_WR)
    sock.setblocking(False)


def refusal(fn: Callable[[], Any]) -> str:
    with pytest.raises(Refused) as info:
        fn()
    return info.value.reason


# --- the good path ---------------------------------------------------------------------


def test_handshake_then_frames_flow_both_ways(pair: Any) -> None:
    cli, srv, _, _ = pair
    assert srv.peer == HELLO
    assert cli.peer == {"ver": "fedcba9876543210"}
    facts = {"procs": [[123, 1, "S"]], "exit_code": None, "output_age": 0.4, "cmd": "é\udcff"}
    cli.send("snap", run="r1", facts=facts)
    cli.send("bye", why="ended")
    got = srv.recv(timeout=5)
    assert got == {"v": 1, "k": "snap", "s": 1, "run": "r1", "facts": facts}
    assert srv.recv(timeout=5)["s"] == 2
    srv.send("kill", grace=5, why="rank 1 exited 3")
    assert cli.recv(timeout=5) == {
        "v": 1,
        "k": "kill",
        "s": 1,
        "grace": 5,
        "why": "rank 1 exited 3",
    }


def send_many(ch: Channel, i: int) -> None:
    for n in range(150):
        ch.send("snap", t=i, n=n, pad="x" * 3000)


def test_loopback_tcp_and_concurrent_senders() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        accepted = Side(lambda: server_handshake(listener.accept()[0], table(), kinds=TO_COORD))
        accepted.start()
        cli = client_handshake(
            socket.create_connection(listener.getsockname()), SECRET, HELLO, kinds=TO_SENTINEL
        )
        srv = accepted.outcome()
    assert isinstance(srv, Channel)
    senders = [Side(functools.partial(send_many, cli, i)) for i in range(4)]
    for s in senders:
        s.start()
    seqs = [srv.recv(timeout=5)["s"] for _ in range(600)]
    assert not any(isinstance(s.outcome(), BaseException) for s in senders)
    assert seqs == list(range(1, 601))  # one lock: frames never interleave, seqs in order
    cli.close()
    with pytest.raises(Closed):  # a clean close between frames is a ConnectionError
        srv.recv(timeout=5)
    srv.close()


def test_big_frame_arrives_in_pieces_and_recv_timeout_keeps_the_channel(pair: Any) -> None:
    cli, srv, c_sock, s_sock = pair
    with pytest.raises(socket.timeout):
        srv.recv(timeout=0.05)
    big = Side(lambda: cli.send("snap", log="y" * (6 * 2**20)))
    big.start()
    assert len(srv.recv(timeout=10)["log"]) == 6 * 2**20
    big.outcome()
    cli.send("done", ok=True)
    whole = take_frame(s_sock)
    put(c_sock, whole[:20])  # half a header, then a timeout: the next recv resumes it
    with pytest.raises(socket.timeout):
        srv.recv(timeout=0.05)
    put(c_sock, whole[20:])
    assert srv.recv(timeout=5)["k"] == "done"


def test_close_from_another_thread_wakes_recv(pair: Any) -> None:
    _, srv, _, _ = pair
    waiting = Side(srv.recv)
    waiting.start()
    time.sleep(0.05)  # let it block in poll; the assertion below is on the wake-up
    start = time.monotonic()
    srv.close()
    assert isinstance(waiting.outcome(), ConnectionError)
    assert time.monotonic() - start < 1.0


def test_channel_fields_are_its_own(pair: Any) -> None:
    cli, _, _, _ = pair
    for bad in ({"s": 99}, {"v": 2}, {"k": "kill"}):
        with pytest.raises(ValueError):
            cli.send("snap", **bad)
    with pytest.raises(ValueError):
        cli.send("hello")


# --- who may talk --------------------------------------------------------------------


def test_client_with_the_wrong_secret_is_refused_on_its_hello() -> None:
    """Its first frame does not prove the secret: refused before the server says a word."""
    cli, srv, _, _ = handshake(c_secret=OTHER)
    assert isinstance(srv, Refused) and srv.reason == "bad-mac"
    assert isinstance(cli, Refused) and cli.reason == "closed"  # no server hello came


def test_sentinel_never_accepts_a_server_without_the_secret() -> None:
    cli, srv, _, _ = handshake(secret_for=table(OTHER))
    assert isinstance(srv, Refused) and srv.reason == "bad-mac"  # it cannot check the hello
    assert isinstance(cli, Refused)
    # An impostor that answers with a proof of its own making, or replays a real
    # server's hello (another nonce), fails too.
    for impostor_hello in (
        lambda s: raw_server_hello(s, secret=OTHER),
        lambda s: raw_server_hello(s, nc="ef" * 16),
    ):
        c_sock, s_sock = socket.socketpair()
        s_sock.settimeout(5)
        impostor = Side(lambda s=s_sock, make=impostor_hello: s.sendall(make(s)))
        impostor.start()
        got = refusal(lambda c=c_sock: client_handshake(c, SECRET, HELLO, kinds=TO_SENTINEL))
        assert got == "bad-mac"
        impostor.outcome()


def test_a_copied_hello_without_the_secret_gets_no_further_than_its_auth() -> None:
    """A hello copied off the wire (its mac good) is admitted; the auth after it needs
    the secret (a copy of one is for another server nonce)."""
    c_sock, s_sock = socket.socketpair()
    c_sock.settimeout(5)
    server = serve(s_sock)
    hello = jbody({**HELLO, "v": 1, "k": "hello", "s": 0, "nc": "ab" * 16})
    c_sock.sendall(frame(hello_key(SECRET), hello))
    read_frame(c_sock)  # the server's hello: its nonce needs the secret to answer
    c_sock.sendall(frame(None, jbody({"v": 1, "k": "auth", "s": 0, "mac": "0" * 64, "h": "0"})))
    outcome = server.outcome()
    assert isinstance(outcome, Refused) and outcome.reason == "bad-mac"


def test_unknown_node() -> None:
    cli, srv, _, _ = handshake(secret_for=table(None))
    assert isinstance(srv, Refused) and srv.reason == "unknown-node"
    assert isinstance(cli, Refused) and cli.reason == "closed"


def test_a_hello_renamed_on_the_path_is_refused() -> None:
    """The secret is per run, so node names are what a man in the middle would change."""
    c_sock, m_in = socket.socketpair()
    m_out, s_sock = socket.socketpair()
    m_in.settimeout(5)
    server = serve(s_sock, secret_for=lambda hello: SECRET)

    def middle() -> None:
        mac, body = read_frame(m_in)
        renamed = body.replace(b"g375", b"g376")  # the client's mac kept: it cannot make one
        m_out.sendall(struct.pack(">I", len(renamed)) + mac + renamed)
        m_in.sendall(m_out.recv(4096))
        m_in.close()

    man = Side(middle)
    man.start()
    assert refusal(lambda: client_handshake(c_sock, SECRET, HELLO, kinds=TO_SENTINEL)) == "closed"
    man.outcome()
    m_out.close()
    outcome = server.outcome()
    assert isinstance(outcome, Refused) and outcome.reason == "bad-mac"


# --- frames after the handshake ------------------------------------------------------


def test_replayed_frame_is_refused(pair: Any) -> None:
    cli, srv, c_sock, s_sock = pair
    cli.send("snap", n=1)
    cli.send("snap", n=2)
    first, second = take_frame(s_sock), take_frame(s_sock)
    put(c_sock, second + first)  # an older seq after a newer one
    assert srv.recv(timeout=5)["n"] == 2
    assert refusal(lambda: srv.recv(timeout=5)) == "replay"


def test_same_frame_twice_is_a_replay(raw: Any) -> None:
    sock, k_cs, srv = raw
    data = frame(k_cs, jbody({"v": 1, "k": "snap", "s": 7}))
    sock.sendall(data + data)
    assert srv.recv(timeout=5)["s"] == 7
    assert refusal(lambda: srv.recv(timeout=5)) == "replay"


def test_reflected_server_frame_is_refused() -> None:
    """Even where the server takes that kind: the key of the other direction fails."""
    cli, srv, c_sock, _ = handshake(kinds=TO_COORD | {"kill"})
    srv.send("kill", grace=5)
    put(c_sock, take_frame(c_sock))
    assert refusal(lambda: srv.recv(timeout=5)) == "bad-mac"
    with pytest.raises(Closed):  # a refusal closes the channel for good
        srv.recv(timeout=1)
    cli.close()


def test_a_flipped_bit_anywhere_is_refused() -> None:
    rng = random.Random(30)
    cli, srv, c_sock, s_sock = handshake()
    cli.send("snap", run="r1", facts={"procs": [[1, 0, "S"]]})
    good = take_frame(s_sock)
    cli.close()
    srv.close()
    for at in range(len(good)):
        bad = bytearray(good)
        bad[at] ^= 1 << rng.randrange(8)
        cli, srv, c_sock, _ = handshake()
        put(c_sock, bytes(bad), end=True)
        with pytest.raises(Refused):
            srv.recv(timeout=5)
        cli.close()


@pytest.mark.parametrize("length", [2**31, 2**32 - 1, MAX_FRAME + 1])
def test_oversize_length_is_refused_before_the_body(pair: Any, length: int) -> None:
    _, srv, c_sock, _ = pair
    put(c_sock, struct.pack(">I", length) + bytes(32))  # no body follows, nor EOF
    tracemalloc.start()
    start = time.monotonic()
    try:
        assert refusal(lambda: srv.recv(timeout=5)) == "oversize"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - start < 1.0  # did not wait for a body
    assert peak < 2**20


def test_oversize_hello_is_refused() -> None:
    c_sock, s_sock = socket.socketpair()
    server = serve(s_sock)
    c_sock.sendall(struct.pack(">I", 2**31) + bytes(32))
    outcome = server.outcome()
    assert isinstance(outcome, Refused) and outcome.reason == "oversize"


def test_truncated_body_is_refused(pair: Any) -> None:
    cli, srv, c_sock, s_sock = pair
    cli.send("snap", facts={"procs": []})
    whole = take_frame(s_sock)
    put(c_sock, whole[: len(whole) - 5], end=True)
    assert refusal(lambda: srv.recv(timeout=5)) == "closed"


SNAP = b'{"v":1,"k":"snap","s":1,"x":'
STRICT = {
    "garbage": (b"not json at all", "not-json"),
    "not-utf8": (b"\xff\xfe{}", "not-json"),
    "empty": (b"", "not-json"),
    "nan": (SNAP + b"NaN}", "not-json"),
    "infinity": (SNAP + b"-Infinity}", "not-json"),
    "duplicate-key": (b'{"v":1,"k":"snap","s":1,"s":2}', "not-json"),
    "5000-digit-int": (SNAP + b"9" * 5000 + b"}", "not-json"),
    "nested-100000": (SNAP + b"[" * 100000 + b"]" * 100000 + b"}", "not-json"),
    "nested-40": (SNAP + b"[" * 40 + b"]" * 40 + b"}", "bad-shape"),
    "array": (b"[1,2]", "bad-shape"),
    "v2": (b'{"v":2,"k":"snap","s":1}', "bad-version"),
    "v-bool": (b'{"v":true,"k":"snap","s":1}', "bad-shape"),
    "s-string": (b'{"v":1,"k":"snap","s":"1"}', "bad-shape"),
    "no-s": (b'{"v":1,"k":"snap"}', "bad-shape"),
    "unknown-kind": (b'{"v":1,"k":"rm -rf","s":1}', "bad-kind"),
    "hello-kind": (b'{"v":1,"k":"hello","s":1}', "bad-kind"),
    "s-zero": (b'{"v":1,"k":"snap","s":0}', "replay"),
}


@pytest.mark.parametrize(("body", "reason"), STRICT.values(), ids=STRICT.keys())
def test_bodies_with_a_valid_mac_are_read_strictly(raw: Any, body: bytes, reason: str) -> None:
    sock, k_cs, srv = raw
    sock.sendall(frame(k_cs, body))
    assert refusal(lambda: srv.recv(timeout=5)) == reason


# --- the handshake's clock ------------------------------------------------------------


def dribble(sock: socket.socket, data: bytes, every: float) -> Side:
    def run() -> None:
        try:
            for i in range(len(data)):
                sock.sendall(data[i : i + 1])
                time.sleep(every)  # the attacker's pace, not a wait for a result
        except OSError:
            pass

    side = Side(run)
    side.start()
    return side


def test_slow_loris_client_is_cut_at_the_deadline() -> None:
    c_sock, s_sock = socket.socketpair()
    hello = frame(None, jbody({**HELLO, "v": 1, "k": "hello", "s": 0, "nc": "ab" * 16}))
    loris = dribble(c_sock, hello, 0.1)
    start = time.monotonic()
    assert (
        refusal(lambda: server_handshake(s_sock, table(), kinds=TO_COORD, timeout=1.0))
        == "handshake-timeout"
    )
    assert time.monotonic() - start < 1.5
    c_sock.close()
    loris.outcome()


def test_slow_loris_server_is_cut_at_the_deadline() -> None:
    c_sock, s_sock = socket.socketpair()
    s_sock.settimeout(5)
    loris = Side(lambda: dribble(s_sock, raw_server_hello(s_sock), 0.1).outcome())
    loris.start()
    start = time.monotonic()
    assert (
        refusal(lambda: client_handshake(c_sock, SECRET, HELLO, kinds=TO_SENTINEL, timeout=1.0))
        == "handshake-timeout"
    )
    assert time.monotonic() - start < 1.5
    s_sock.close()
    loris.outcome()


def test_silent_peer_times_out() -> None:
    c_sock, s_sock = socket.socketpair()
    start = time.monotonic()
    assert (
        refusal(lambda: server_handshake(s_sock, table(), kinds=TO_COORD, timeout=0.3))
        == "handshake-timeout"
    )
    assert time.monotonic() - start < 0.8
    c_sock.close()


# --- fuzz -----------------------------------------------------------------------------


def mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    how = rng.randrange(6)
    if how == 0:
        for _ in range(rng.randint(1, 3)):
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    elif how == 1:
        del out[rng.randrange(len(out)) :]
    elif how == 2:
        at = rng.randrange(len(out) + 1)
        out[at:at] = rng.randbytes(rng.randint(1, 64))
    elif how == 3:
        out[:4] = struct.pack(">I", rng.choice([0, 1, 35, len(out) + 9, rng.getrandbits(32)]))
    elif how == 4:
        out[36:] = rng.choice(
            [b"[", b"{", b'{"v":1,"k":"snap","s":9e999}', b"\x00" * 40, rng.randbytes(50)]
        )
        out[:4] = struct.pack(">I", len(out) - 36)
    else:
        out += bytes(out)  # the same frame twice
    return bytes(out)


def remac(k_cs: bytes, data: bytes) -> bytes:
    """The mutated frame with its mac made good again: what only a key holder could send."""
    body = data[36:]
    return struct.pack(">I", len(body)) + hmac256(k_cs, body) + body


def drain(srv: Channel) -> str:
    """Reads until the channel ends; what ended it. Anything but ALLOWED fails the test."""
    for _ in range(100):
        try:
            srv.recv(timeout=2)
        except ALLOWED as exc:
            return exc.reason if isinstance(exc, Refused) else type(exc).__name__
    raise AssertionError("still reading after 100 frames")


def test_fuzz_mutated_frames_never_raise_past_the_reader() -> None:
    rng = random.Random(30)
    data_cases, hello_cases, client_cases = 1500, 300, 200
    seen: set[str] = set()
    for i in range(data_cases):
        c_sock, s_sock = socket.socketpair()
        c_sock.settimeout(5)
        server = serve(s_sock)
        k_cs, _ = raw_client(c_sock)
        srv = server.outcome()
        body = jbody(
            {
                "v": 1,
                "k": rng.choice(sorted(TO_COORD)),
                "s": 1 + i % 3,
                "facts": {"procs": [[i, 1, "S"]]},
            }
        )
        bad = mutate(rng, frame(k_cs, body))
        c_sock.sendall(remac(k_cs, bad) if i % 2 and len(bad) >= 36 else bad)
        c_sock.shutdown(socket.SHUT_WR)
        seen.add(drain(srv))
        srv.close()
        c_sock.close()
    # Not a degenerate fuzz: each check of the reader was reached.
    assert {"bad-mac", "not-json", "bad-shape", "replay", "oversize", "closed", "Closed"} <= seen
    for _ in range(hello_cases):  # the server's side of the handshake
        c_sock, s_sock = socket.socketpair()
        server = serve(s_sock)
        c_sock.sendall(
            mutate(
                rng, frame(None, jbody({**HELLO, "v": 1, "k": "hello", "s": 0, "nc": "ab" * 16}))
            )
        )
        c_sock.shutdown(socket.SHUT_WR)
        assert isinstance(server.outcome(), Refused)
        c_sock.close()
    for _ in range(client_cases):  # the sentinel's side, against a mutated server hello
        c_sock, s_sock = socket.socketpair()
        s_sock.settimeout(5)
        client = Side(functools.partial(client_handshake, c_sock, SECRET, HELLO, kinds=TO_SENTINEL))
        client.start()
        good = raw_server_hello(s_sock)
        bad = mutate(rng, good)
        try:
            s_sock.sendall(bad)
            s_sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the client refused early and left
        outcome = client.outcome()
        # Only a mutation that leaves the hello whole in front may pass.
        assert isinstance(outcome, Refused) or bad.startswith(good)
        if isinstance(outcome, Channel):
            outcome.close()
        s_sock.close()


# --- the counter ----------------------------------------------------------------------


def test_refusal_counter_summary_and_journal_rate() -> None:
    counter = RefusalCounter()
    assert counter.summary() == "no connections refused"
    assert counter.note("bad-mac", "10.0.0.8", now=0.0)
    assert not counter.note("bad-mac", "10.0.0.8", now=30.0)  # once per (reason, peer) a minute
    assert counter.note("bad-mac", "10.0.0.9", now=30.0)
    assert counter.note("bad-mac", "10.0.0.8", now=61.0)
    assert counter.note("oversize", "10.0.0.8", now=61.0)
    assert counter.summary() == "5 connections refused (bad-mac 4, oversize 1, last from 10.0.0.8)"
    single = RefusalCounter()
    single.note("replay")
    assert single.summary() == "1 connection refused (replay 1)"


def note_many(counter: RefusalCounter, i: int) -> None:
    for n in range(500):
        counter.note("closed", f"10.0.{i}.{n}")


def test_refusal_counter_is_thread_safe() -> None:
    counter = RefusalCounter()
    noters = [Side(functools.partial(note_many, counter, i)) for i in range(4)]
    for n in noters:
        n.start()
    for n in noters:
        n.outcome()
    assert counter.counts() == {"closed": 2000}
    assert counter.total == 2000
