"""Bytes of one frame, `len:u32 BE | mac:32 | body`, on a non-blocking socket: reading
against a deadline, writing, and the strict reading of a body (design §3).

Why apart from the handshake: these are the parts a hostile peer touches first, so each
bound lives here once. The length is refused before any body byte is awaited, and the
body grows only as its bytes arrive (a peer that claims 16 MiB and sends 10 bytes costs
10 bytes). Waits are polls against one monotonic deadline, never socket timeouts: the
socket is shared by a sending and a receiving thread, and a timeout set by one would cut
the other's frame in half.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import select
import socket
import struct
import time
from typing import Any

MAX_FRAME = 16 * 1024 * 1024
VERSION = 1
MAX_DEPTH = 32
MAX_INT_DIGITS = 40  # int() of a long digit string is quadratic; no field needs more
MAC_LEN = 32
HEAD = struct.Struct(">I")
HEAD_LEN = HEAD.size + MAC_LEN
ZERO_MAC = bytes(MAC_LEN)
_CHUNK = 65536
REASONS = frozenset(
    {
        "bad-mac",
        "bad-version",
        "unknown-node",
        "oversize",
        "not-json",
        "handshake-timeout",
        "replay",
        "bad-kind",
        "bad-shape",
        "closed",
        "stale-epoch",  # a coordinator of an epoch this side has left (epochs.py)
    }
)


class Refused(Exception):
    """A peer or a frame this side will not deal with; `reason` is one of REASONS (the
    coordinator counts by it), `detail` says what was seen."""

    def __init__(self, reason: str, detail: str = "") -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown refusal reason {reason!r}")
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class Closed(ConnectionError):
    """The connection ended between two frames, or the channel was closed here."""


def mac_of(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


def pack(key: bytes | None, obj: dict[str, Any]) -> bytes:
    """One frame; `key` None gives the all-zero mac of the client hello. ASCII JSON, so
    a lone surrogate from a node's command line still encodes."""
    body = json.dumps(obj, allow_nan=False, separators=(",", ":")).encode("ascii")
    if len(body) > MAX_FRAME:
        raise ValueError(f"a frame body of {len(body)} bytes is over {MAX_FRAME}")
    return HEAD.pack(len(body)) + (ZERO_MAC if key is None else mac_of(key, body)) + body


def wait_io(sock: socket.socket, events: int, deadline: float | None) -> None:
    """Until `sock` is ready for `events` or socket.timeout at `deadline`."""
    if sock.fileno() < 0:
        raise Closed("the channel is closed")
    poller = select.poll()
    poller.register(sock, events)
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise socket.timeout("deadline passed")
        if poller.poll(None if left is None else max(1, int(left * 1000 + 0.999))):
            return


def send_all(sock: socket.socket, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view) :]
        except (BlockingIOError, InterruptedError):
            wait_io(sock, select.POLLOUT, deadline)


class Reader:
    """Frames off a non-blocking socket. Bytes read past the frame in hand are kept for
    the next one (a client's first frames may arrive with its auth), and a frame cut by
    a timeout is resumed by the next call."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()

    def frame(self, limit: int, deadline: float | None) -> tuple[bytes, bytes] | None:
        """(mac, body) of the next frame, or None if the stream ended between frames."""
        if not self._fill(HEAD_LEN, deadline):
            if not self._buf:
                return None
            raise Refused("closed", "the stream ended inside a frame header")
        (length,) = HEAD.unpack_from(self._buf)
        if length > limit:
            raise Refused("oversize", f"a frame of {length} bytes (at most {limit})")
        if not self._fill(HEAD_LEN + length, deadline):
            raise Refused("closed", f"the stream ended inside a {length}-byte frame body")
        return self._take(length)

    def ready(self, limit: int) -> tuple[bytes, bytes] | None:
        """(mac, body) of the next frame if what the socket holds now completes it, read
        without a wait (the coordinator's door reads many peers on one thread); None
        while it does not. Refused("closed") when the peer ends the stream first."""
        while True:
            need = HEAD_LEN
            if len(self._buf) >= HEAD_LEN:
                (length,) = HEAD.unpack_from(self._buf)
                if length > limit:
                    raise Refused("oversize", f"a frame of {length} bytes (at most {limit})")
                need += length
                if len(self._buf) >= need:
                    return self._take(length)
            try:
                chunk = self._sock.recv(need - len(self._buf))
            except (BlockingIOError, InterruptedError):
                return None
            except OSError as exc:
                raise Refused("closed", f"before its first frame: {exc}") from None
            if not chunk:
                raise Refused("closed", "the stream ended before a whole frame")
            self._buf += chunk

    @property
    def buffered(self) -> int:
        """Bytes read and not yet taken as a frame."""
        return len(self._buf)

    def _take(self, length: int) -> tuple[bytes, bytes]:
        end = HEAD_LEN + length
        mac, body = bytes(self._buf[HEAD.size : HEAD_LEN]), bytes(self._buf[HEAD_LEN:end])
        del self._buf[:end]
        return mac, body

    def _fill(self, need: int, deadline: float | None) -> bool:
        """False when the peer ends the stream before `need` bytes are buffered."""
        while len(self._buf) < need:
            try:
                chunk = self._sock.recv(_CHUNK)
            except (BlockingIOError, InterruptedError):
                wait_io(self._sock, select.POLLIN, deadline)
                continue
            if not chunk:
                return False
            self._buf += chunk
        return True


def decode(body: bytes) -> dict[str, Any]:
    """A body as a JSON object, strictly: UTF-8, no NaN/Infinity, no duplicate keys, no
    integer over MAX_INT_DIGITS digits, nesting at most MAX_DEPTH."""
    try:
        obj = json.loads(
            body.decode("utf-8"),
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constant,
            parse_int=_bounded_int,
        )
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
        raise Refused("not-json", str(exc)[:200]) from None
    if not isinstance(obj, dict):
        raise Refused("bad-shape", "a frame body is a JSON object")
    if _deeper_than(obj, MAX_DEPTH):
        raise Refused("bad-shape", f"nested deeper than {MAX_DEPTH}")
    return obj


def check_data(obj: dict[str, Any], kinds: frozenset[str], last_seq: int) -> int:
    """The frame's "s" once "v", "k" and "s" are what the protocol promises: v 1, a kind
    this side accepts, a sequence above the last one seen."""
    version, kind, seq = obj.get("v"), obj.get("k"), obj.get("s")
    if type(version) is not int:
        raise Refused("bad-shape", '"v" is an integer')
    if version != VERSION:
        raise Refused("bad-version", f"v {version}, this side speaks {VERSION}")
    if type(kind) is not str or type(seq) is not int:
        raise Refused("bad-shape", '"k" is a string and "s" an integer')
    if seq <= last_seq:
        raise Refused("replay", f"s {seq} after s {last_seq}")
    if kind not in kinds:
        raise Refused("bad-kind", f"kind {kind[:40]!r} is not taken here")
    return seq


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate key")
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


def _deeper_than(obj: Any, limit: int) -> bool:
    """Iterative, so a wide body costs no stack; json's own recursion guard stopped the
    truly deep ones already."""
    stack = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, (dict, list)))
    return False
