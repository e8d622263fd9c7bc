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
from collections.abc import Callable, Iterator
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


def decode(cls: type[T], data: Any, where: str = "") -> T:
    """`data` as an instance of the dataclass `cls`, or WireError naming the field."""
    try:
        made: T = _converter(cls)(data)  # type: ignore[arg-type]
        return made
    except WireError as exc:
        raise _at(where or cls.__name__, exc) from None


Convert = Callable[[Any], Any]


def _at(part: str, exc: WireError) -> WireError:
    """The error one level up: its path gets `part` in front (built only on failure)."""
    text = str(exc)
    return WireError(f"{part}{text if text.startswith(('.', '[')) else ': ' + text}")


@cache
def _converter(tp: Any) -> Convert:
    """A checker-and-builder for values of type `tp`, made once per type: a 64-node x
    8-GPU snapshot is decoded every second in the app."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        real = [a for a in args if a is not type(None)]
        if len(real) != 1:
            raise TypeError(f"unsupported type {tp}")
        inner = _converter(real[0])
        return lambda v: None if v is None else inner(v)
    if origin is tuple:
        return _tuple(args)
    if dataclasses.is_dataclass(tp):
        return _dataclass(tp)  # type: ignore[arg-type]
    if isinstance(tp, type) and issubclass(tp, Enum):
        return _enum(tp)
    return _scalar(tp)


def _tuple(args: tuple[Any, ...]) -> Convert:
    many = len(args) == 2 and args[1] is Ellipsis
    items = [_converter(a) for a in (args[:1] if many else args)]

    def convert(v: Any) -> Any:
        if type(v) is not list:
            raise WireError("expected a list")
        if not many and len(v) != len(items):
            raise WireError(f"expected {len(items)} items, got {len(v)}")
        out = []
        for i, x in enumerate(v):
            try:
                out.append(items[0 if many else i](x))
            except WireError as exc:
                raise _at(f"[{i}]", exc) from None
        return tuple(out)

    return convert


def _dataclass(cls: type) -> Convert:
    hints = typing.get_type_hints(cls)
    fields = [
        (
            f.name,
            _converter(hints[f.name]),
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    ]
    names = {name for name, _, _ in fields}

    def build(data: Any) -> Any:
        if type(data) is not dict:
            raise WireError(f"expected an object, got {type(data).__name__}")
        if not data.keys() <= names:
            raise WireError(f"unknown field(s) {', '.join(sorted(data.keys() - names))}")
        values = {}
        for name, convert, required in fields:
            if name in data:
                try:
                    values[name] = convert(data[name])
                except WireError as exc:
                    raise _at(f".{name}", exc) from None
            elif required:
                raise WireError(f"missing field {name}")
        return cls(**values)

    return build


def _enum(tp: type[Enum]) -> Convert:
    def convert(v: Any) -> Any:
        try:
            return tp(v)
        except ValueError:
            raise WireError(f"{v!r} is not a {tp.__name__}") from None

    return convert


def _scalar(tp: Any) -> Convert:
    if tp is bytes:

        def b64(v: Any) -> bytes:
            if type(v) is not str:
                raise WireError(f"expected bytes (base64), got {type(v).__name__}")
            try:
                return base64.b64decode(v, validate=True)
            except (binascii.Error, ValueError):
                raise WireError("not base64") from None

        return b64
    accept = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}.get(tp)
    if accept is None:
        raise TypeError(f"unsupported type {tp}")
    name = tp.__name__

    def check(v: Any) -> Any:
        if type(v) not in accept:  # exact: True is no int, and no str subclass either
            raise WireError(f"expected {name}, got {type(v).__name__}")
        return float(v) if tp is float else v

    return check


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
    except RecursionError:  # `[[[[…` two hundred thousand deep: a line, not a crash
        raise WireError("not JSON: nested too deeply") from None
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
