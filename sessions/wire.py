"""The agent's wire format: newline-delimited JSON, and frozen objects that cross it.

A snapshot leaves the agent as JSON and must come back as the same NodeSnapshot (and
JobProc, GpuReading...), so `decode` is strict: every field checked against the
dataclass' own annotations, unknown or missing keys refused, bytes as base64, tuples
as lists. Node text inside (command lines, GPU errors, log bytes) is data in string
fields: it never decides how a message is read, and a message that does not have
exactly the promised shape is refused whole, never half-applied.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import socket
import types
import typing
from collections.abc import Iterator
from enum import Enum
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")
VERSION = 1
MAX_LINE = 64 * 2**20  # one message: 64 nodes x (64 KiB of log, base64) fit many times


class WireError(ValueError):
    """A message that is not what the protocol promises."""


def encode(obj: Any) -> Any:
    """A dataclass (or what it holds) as JSON-ready values; bytes as base64 text."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: encode(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, bytes):
        return base64.b64encode(obj).decode()
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, tuple | list):
        return [encode(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): encode(v) for k, v in obj.items()}
    return obj


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def decode(cls: type[T], data: Any, where: str = "") -> T:
    """`data` as an instance of the dataclass `cls`, or WireError naming the field."""
    where = where or cls.__name__
    if not isinstance(data, dict):
        raise WireError(f"{where}: expected an object, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = set(data) - set(fields)
    if unknown:
        raise WireError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    hints = _hints(cls)  # type: ignore[arg-type]
    values = {}
    for name, f in fields.items():
        if name in data:
            values[name] = _value(hints[name], data[name], f"{where}.{name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise WireError(f"{where}: missing field {name}")
    return cls(**values)


def _value(tp: Any, v: Any, where: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        if v is None and type(None) in args:
            return None
        real = [a for a in args if a is not type(None)]
        if len(real) != 1:
            raise WireError(f"{where}: unsupported type {tp}")
        return _value(real[0], v, where)
    if origin is tuple:
        if not isinstance(v, list):
            raise WireError(f"{where}: expected a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], x, f"{where}[{i}]") for i, x in enumerate(v))
        if len(v) != len(args):
            raise WireError(f"{where}: expected {len(args)} items, got {len(v)}")
        pairs = enumerate(zip(args, v, strict=True))
        return tuple(_value(a, x, f"{where}[{i}]") for i, (a, x) in pairs)
    if dataclasses.is_dataclass(tp):
        return decode(tp, v, where)  # type: ignore[arg-type]
    return _scalar(tp, v, where)


def _scalar(tp: Any, v: Any, where: str) -> Any:
    if isinstance(tp, type) and issubclass(tp, Enum):
        try:
            return tp(v)
        except ValueError:
            raise WireError(f"{where}: {v!r} is not a {tp.__name__}") from None
    ok = {
        bool: isinstance(v, bool),
        int: isinstance(v, int) and not isinstance(v, bool),
        float: isinstance(v, int | float) and not isinstance(v, bool),
        str: isinstance(v, str),
        bytes: isinstance(v, str),
    }
    if tp not in ok:
        raise WireError(f"{where}: unsupported type {tp}")
    if not ok[tp]:
        raise WireError(f"{where}: expected {tp.__name__}, got {type(v).__name__}")
    if tp is float:
        return float(v)
    if tp is bytes:
        try:
            return base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError):
            raise WireError(f"{where}: not base64") from None
    return v


# -- framing ------------------------------------------------------------------------


def message(**fields: Any) -> bytes:
    """One protocol line: the version first, then the fields."""
    return json.dumps({"v": VERSION, **fields}, separators=(",", ":")).encode() + b"\n"


def parse_message(line: bytes) -> dict[str, Any]:
    """One line as a message of our version, or WireError."""
    try:
        msg = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise WireError(f"not JSON: {exc}") from None
    if not isinstance(msg, dict):
        raise WireError("a message is a JSON object")
    if msg.get("v") != VERSION:
        raise WireError(f"protocol version {msg.get('v')!r}; this mntui speaks {VERSION}")
    return msg


def read_messages(sock: socket.socket) -> Iterator[dict[str, Any]]:
    """Messages until the peer closes; a line over MAX_LINE or not ours is WireError."""
    buf = bytearray()
    while True:
        nl = buf.find(b"\n")
        if nl >= 0:
            line = bytes(buf[:nl])
            del buf[: nl + 1]
            yield parse_message(line)
            continue
        if len(buf) > MAX_LINE:
            raise WireError(f"a message longer than {MAX_LINE} bytes")
        chunk = sock.recv(1 << 20)
        if not chunk:
            if buf:
                raise WireError("the connection closed mid-message")
            return
        buf += chunk
