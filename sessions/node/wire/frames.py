"""Length-prefixed JSON frames, authenticated with HMAC-SHA256, between the sentinels and
the coordinator (design §3).

Why this shape: the port carries "kill", so nothing read from it is believed before its
mac checks; the nodes have only a bare `python3`, so the format is stdlib JSON; and a
hostile peer must not cost memory or time: the length is checked before the body is
read (the body then grows only as its bytes arrive), the handshake has one deadline,
and parsing is strict (no NaN, no duplicate keys, bounded depth and integer size).

Handshake (every frame is `len:u32 BE | mac:32 | body`, `len` counting body bytes):
    C→S hello {node, chain, ver, nc}                       mac slot HMAC(k_hello, body)
    S→C hello {ns, mac: HMAC(secret, "mntui1|s|nc|ns"), h}  mac slot HMAC(k_sc, body)
    C→S auth  {mac: HMAC(secret, "mntui1|c|nc|ns"), h}      mac slot HMAC(k_cs, body)
`k_hello` = HMAC(secret, "mntui1|hello"): the client's first frame already proves the
secret (or is a copy of one that did: `admit`'s caller refuses a nonce seen before), so
a server gives a thread, a slot and a round trip only to a peer that holds it; one that
does not is refused on its first frame (coordport.py: issue 39, a peer that held every
handshake slot with idle connections got a healthy job torn down). `h` = sha256 of the
client hello's body as sent, under both direction keys: no one on the path can rename
the node. The server proves the secret, and a client never goes on with a server that
cannot. After that every frame is mac'ed with its own direction's key (a reflected
frame fails) and carries a strictly rising "s" (a replayed one fails). The two hellos
are parsed before their mac is checked (they name the secret and hold the nonces that
make the keys), so handshake frames are bounded to HELLO_MAX bytes.

Refusals raise Refused and close the socket; the handshakes raise nothing else. A peer
that closes between two frames raises Closed (a ConnectionError): an ended connection,
not a hostile one. A peer that closes inside a frame or a handshake is Refused("closed").
The handshakes take the socket over: it is non-blocking from then on, every wait a poll.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .framecodec import (
    HEAD_LEN,
    MAX_FRAME,
    REASONS,
    VERSION,
    Closed,
    Reader,
    Refused,
    check_data,
    decode,
    mac_of,
    pack,
    send_all,
)
from .refusals import RefusalCounter

__all__ = [
    "MAX_FRAME",
    "REASONS",
    "Admitted",
    "Channel",
    "Closed",
    "RefusalCounter",
    "Refused",
    "admit",
    "client_handshake",
    "server_finish",
    "server_handshake",
]

HELLO_MAX = 4096
SEND_TIMEOUT = 10.0  # a peer that reads nothing for this long is gone (SIGSTOP, partition)
_NONCE_HEX = 32
_HANDSHAKE = frozenset({"hello", "auth"})
_RESERVED = frozenset({"v", "k", "s"})
_OWN = frozenset({"v", "k", "s", "nc", "ns", "mac", "h"})  # protocol fields, never the peer's


class Channel:
    """One authenticated connection. `send` may be called from any thread; `recv` from
    one reader at a time. A refusal or a broken stream closes it for good."""

    def __init__(
        self,
        sock: socket.socket,
        reader: Reader,
        *,
        key_out: bytes,
        key_in: bytes,
        peer: dict[str, Any],
        kinds: frozenset[str],
    ) -> None:
        self.peer = peer
        self.send_timeout = SEND_TIMEOUT
        self._sock, self._reader, self._kinds = sock, reader, kinds
        self._key_out, self._key_in = key_out, key_in
        self._send_lock, self._recv_lock = threading.Lock(), threading.Lock()
        self._out_seq = self._in_seq = 0
        self._closed = False

    def send(self, kind: str, **fields: Any) -> None:
        """Send one frame; on a timeout or error the channel is closed (half a frame on
        the wire leaves the stream unreadable) and socket.timeout/ConnectionError raised."""
        if kind in _HANDSHAKE or _RESERVED.intersection(fields):
            raise ValueError(
                f"kind {kind!r} with fields {sorted(fields)}: v, k, s are the channel's"
            )
        with self._send_lock:
            if self._closed:
                raise Closed("the channel is closed")
            self._out_seq += 1
            frame = pack(self._key_out, {"v": VERSION, "k": kind, "s": self._out_seq, **fields})
            try:
                send_all(self._sock, frame, time.monotonic() + self.send_timeout)
            except (socket.timeout, ConnectionError):
                self.close()
                raise
            except OSError as exc:
                self.close()
                raise Closed(str(exc)) from exc

    def recv(self, timeout: float | None = None) -> dict[str, Any]:
        """The next frame's body ("v", "k", "s" included). socket.timeout when none is
        complete in time (the channel stays usable, a partial frame is kept); Closed when
        the peer ended the connection; Refused (and the channel closed) otherwise."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._recv_lock:
            if self._closed:
                raise Closed("the channel is closed")
            try:
                got = self._reader.frame(MAX_FRAME, deadline)
                if got is None:
                    raise Closed("the peer closed the connection")
                mac, body = got
                if not hmac.compare_digest(mac, mac_of(self._key_in, body)):
                    raise Refused("bad-mac", "frame mac does not match")
                obj = decode(body)
                self._in_seq = check_data(obj, self._kinds, self._in_seq)
            except socket.timeout:
                raise
            except (Refused, ConnectionError):
                self.close()
                raise
            except OSError as exc:
                self.close()
                raise Closed(str(exc)) from exc
            return obj

    def close(self) -> None:
        """Idempotent; wakes a thread waiting in recv (shutdown before close)."""
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()


def client_handshake(
    sock: socket.socket,
    secret: bytes,
    hello: dict[str, Any],
    *,
    kinds: frozenset[str],
    timeout: float = 2.0,
) -> Channel:
    """Introduce this side (`hello`: node, chain, ver, ...) and authenticate both ways
    within `timeout` seconds in all; Refused (socket closed) otherwise."""
    _check_args(kinds, hello)
    deadline = time.monotonic() + timeout
    with _handshaking(sock, deadline) as reader:
        nc = secrets.token_hex(_NONCE_HEX // 2)
        c_hello = pack(_hello_key(secret), {**hello, "v": VERSION, "k": "hello", "s": 0, "nc": nc})
        send_all(sock, c_hello, deadline)
        sent_h = hashlib.sha256(c_hello[HEAD_LEN:]).hexdigest()
        mac, body = _read(reader, deadline)
        s_hello = _handshake_body(body, "hello")
        ns = _nonce(s_hello, "ns")
        k_cs, k_sc = _keys(secret, nc, ns)
        good = hmac.compare_digest(mac, mac_of(k_sc, body))
        good &= _same(s_hello.get("mac"), _proof(secret, "s", nc, ns))
        good &= _same(s_hello.get("h"), sent_h)
        if not good:
            raise Refused("bad-mac", "the server could not prove the run's secret")
        auth = {"v": VERSION, "k": "auth", "s": 0, "mac": _proof(secret, "c", nc, ns), "h": sent_h}
        send_all(sock, pack(k_cs, auth), deadline)
    return Channel(sock, reader, key_out=k_cs, key_in=k_sc, peer=_public(s_hello), kinds=kinds)


@dataclass(frozen=True)
class Admitted:
    """A client hello that proved the secret: what the rest of the handshake needs."""

    peer: dict[str, Any]  # the hello, the protocol's own fields left out
    nc: str
    secret: bytes
    h: str  # sha256 of its body, as the server hello and the auth echo it


def admit(
    mac: bytes, body: bytes, secret_for: Callable[[dict[str, Any]], bytes | None]
) -> Admitted:
    """A client hello (one frame, read by the caller) checked: its shape, its node
    (`secret_for` names the secret, or None: unknown-node) and its mac under that secret.
    Refused otherwise; nothing is sent."""
    c_hello = _handshake_body(body, "hello")
    nc = _nonce(c_hello, "nc")
    if not all(isinstance(c_hello.get(key), str) for key in ("node", "chain")):
        raise Refused("bad-shape", 'a hello names its "node" and "chain"')
    peer = _public(c_hello)
    secret = secret_for(peer)
    if secret is None:
        raise Refused("unknown-node", f"{peer['chain']}/{peer['node']}")
    if not hmac.compare_digest(mac, mac_of(_hello_key(secret), body)):
        raise Refused("bad-mac", "the client hello does not prove the run's secret")
    return Admitted(peer, nc, secret, hashlib.sha256(body).hexdigest())


def server_handshake(
    sock: socket.socket,
    secret_for: Callable[[dict[str, Any]], bytes | None],
    *,
    kinds: frozenset[str],
    timeout: float = 2.0,
    hello: dict[str, Any] | None = None,
) -> Channel:
    """Authenticate a connecting client within `timeout` seconds in all. `secret_for`
    gets the client's (not yet proven) hello and names its secret, or None: unknown-node.
    `hello`: what this side tells the client about itself (ver, ...)."""
    _check_args(kinds, hello or {})
    deadline = time.monotonic() + timeout
    with _handshaking(sock, deadline) as reader:
        admitted = admit(*_read(reader, deadline), secret_for)
    return server_finish(sock, reader, admitted, kinds=kinds, deadline=deadline, hello=hello)


def server_finish(
    sock: socket.socket,
    reader: Reader,
    admitted: Admitted,
    *,
    kinds: frozenset[str],
    deadline: float,
    hello: dict[str, Any] | None = None,
) -> Channel:
    """The handshake after an admitted client hello (read off `reader`, which keeps what
    came after it): the server's proof out, the client's in, by `deadline`."""
    _check_args(kinds, hello or {})
    a = admitted
    with _handshaking(sock, deadline, reader):
        ns = secrets.token_hex(_NONCE_HEX // 2)
        k_cs, k_sc = _keys(a.secret, a.nc, ns)
        mine = {**(hello or {}), "v": VERSION, "k": "hello", "s": 0, "ns": ns}
        proof = _proof(a.secret, "s", a.nc, ns)
        send_all(sock, pack(k_sc, {**mine, "mac": proof, "h": a.h}), deadline)
        mac, body = _read(reader, deadline)
        if not hmac.compare_digest(mac, mac_of(k_cs, body)):
            raise Refused("bad-mac", "the client could not prove the run's secret")
        auth = _handshake_body(body, "auth")
        good = _same(auth.get("mac"), _proof(a.secret, "c", a.nc, ns)) & _same(auth.get("h"), a.h)
        if not good:
            raise Refused("bad-mac", "the client's proof does not match")
    return Channel(sock, reader, key_out=k_sc, key_in=k_cs, peer=a.peer, kinds=kinds)


@contextmanager
def _handshaking(
    sock: socket.socket, deadline: float, reader: Reader | None = None
) -> Iterator[Reader]:
    """One deadline for the whole handshake; every failure becomes a Refused and closes
    the socket, so a caller has one thing to count."""
    try:
        sock.setblocking(False)  # every wait is a poll against the deadline from here on
        yield reader if reader is not None else Reader(sock)
    except BaseException as exc:
        sock.close()
        if isinstance(exc, socket.timeout):
            raise Refused("handshake-timeout", "not done by its deadline") from None
        if isinstance(exc, OSError):
            raise Refused("closed", f"during the handshake: {exc}") from None
        raise


def _check_args(kinds: frozenset[str], hello: dict[str, Any]) -> None:
    if kinds & _HANDSHAKE:
        raise ValueError(f"{sorted(kinds & _HANDSHAKE)} are handshake kinds")
    if _OWN.intersection(hello):
        raise ValueError(f"a hello may not set {sorted(_OWN.intersection(hello))}")
    if len(pack(None, hello)) > HELLO_MAX // 2:  # room left for the protocol's own fields
        raise ValueError(f"a hello is at most {HELLO_MAX // 2} bytes of JSON")


def _read(reader: Reader, deadline: float) -> tuple[bytes, bytes]:
    got = reader.frame(HELLO_MAX, deadline)
    if got is None:
        raise Refused("closed", "the peer left during the handshake")
    return got


def _handshake_body(body: bytes, kind: str) -> dict[str, Any]:
    obj = decode(body)
    check_data(obj, frozenset({kind}), -1)  # v, k and s typed; handshake frames have s 0
    if obj["s"] != 0:
        raise Refused("bad-shape", f"a {kind} frame has s 0")
    return obj


def _nonce(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or len(value) != _NONCE_HEX or value.strip("0123456789abcdef"):
        raise Refused("bad-shape", f'"{key}" is {_NONCE_HEX} lowercase hex digits')
    return value


def _hello_key(secret: bytes) -> bytes:
    """The client hello's key: its mac proves the secret before the server says a word."""
    return mac_of(secret, b"mntui1|hello")


def _keys(secret: bytes, nc: str, ns: str) -> tuple[bytes, bytes]:
    """Per-direction keys: what the server sends is never valid as what a client sent."""
    return mac_of(secret, f"cs|{nc}{ns}".encode()), mac_of(secret, f"sc|{nc}{ns}".encode())


def _proof(secret: bytes, side: str, nc: str, ns: str) -> str:
    return hmac.new(secret, f"mntui1|{side}|{nc}|{ns}".encode(), hashlib.sha256).hexdigest()


def _same(got: Any, want: str) -> bool:
    return isinstance(got, str) and hmac.compare_digest(got.encode(), want.encode())


def _public(obj: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in obj.items() if key not in _OWN}
