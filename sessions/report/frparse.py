"""One Flight Recorder dump, from a node's bytes to the collectives it recorded.

A dump is a pickle written by whatever runs on the node: data, never code, and never
trusted for size. It is read by an Unpickler whose find_class refuses every global (the
format is plain dicts, lists, strings and numbers), within a size bound; then every
list, string and number is checked against a bound before it is used: a pickle's memo
makes a 6 KB file hold a thousand references to one 4300-digit string (a product of
those took 39 s), and an `inf` or a 400-digit int where a count or a time goes raised
OverflowError through the whole report. Strings are made terminal-safe here, where they
enter (termsafe.py): a frame's file name becomes the report's headline.

Anything out of bounds makes the whole dump malformed, counted by the caller, never
raised. Reading an entry or a stack that the memo repeats costs once. What unpickling
itself can cost (hashing a memo-shared tuple key is exponential, inside C code that
holds the GIL) is why the report reads dumps in a child process (frchild.py).
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mntui.sessions.termsafe import one_line

from .consensus import user_frame
from .stacks import Frame

MAX_DUMP = 16 * 1024 * 1024
MAX_ENTRIES = 65_536  # a 16 MiB dump holds about 32,000 (500 bytes each)
MAX_GROUPS = 4_096  # process groups in one dump
MAX_FRAMES = 512  # one collective's Python stack
MAX_TENSORS = 4_096  # a coalesced collective lists every tensor; the first SHOWN are read
SHOWN_TENSORS = 4
MAX_DIMS = 64
MAX_TEXT = 256  # an op, a dtype, a process group, a function name
MAX_PATH = 4_096  # a file name (PATH_MAX)
BIG = 2**63  # seq ids, times in ns, tensor sizes: int64 on the node
DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
          "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8",
          "Bool": "bool"}  # fmt: skip


class Malformed(ValueError):
    """A part of a dump that is not what torch writes, or is out of its bound."""


class _DataOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"global {module}.{name} refused: a dump is data")


def load(data: bytes) -> dict[str, Any] | None:
    """The dump as plain data, or None: too big, not a pickle, or one that names code."""
    if len(data) > MAX_DUMP:
        return None
    try:
        value = _DataOnly(io.BytesIO(data)).load()
    except Exception:  # any malformed pickle: counted by the caller, never raised
        return None
    return value if isinstance(value, dict) and isinstance(value.get("entries"), list) else None


@dataclass(frozen=True)
class Op:
    """One recorded collective of one rank."""

    seq: int  # collective_seq_id within its process group
    name: str  # "all_reduce" (the backend's prefix dropped)
    shape: str  # "4×float32"
    created: float | None  # wall clock, seconds
    completed: bool
    site: str  # the user's line that called it, "train.py:66"


@dataclass(frozen=True)
class Parsed:
    """What one dump says, per process group ("0 default_pg")."""

    ops: Mapping[str, tuple[Op, ...]]  # its ops, in order
    enqueued: Mapping[str, int]  # the last collective enqueued
    completed: Mapping[str, int]  # the last collective completed


def parse(data: bytes) -> Parsed | None:
    """None for a dump that does not read, or holds anything out of its bound. The one
    place a dump is judged: whatever it makes the reading code raise is a bad dump."""
    d = load(data)
    if d is None:
        return None
    try:
        return _parsed(d)
    except Exception:  # Malformed, and any surprise: one bad dump never stops the others
        return None


def _parsed(d: Mapping[str, Any]) -> Parsed:
    ops: dict[str, list[Op]] = {}
    seen: dict[int, tuple[str, Op]] = {}  # id(entry): a memo-repeated entry is read once
    sites: dict[int, str] = {}  # id(frames) -> the user's line
    for e in _items(d["entries"], MAX_ENTRIES):
        if type(e) is not dict or e.get("is_p2p"):
            continue
        got = seen.get(id(e))
        if got is None:
            got = seen[id(e)] = (_group(e.get("process_group")), _op(e, sites))
        ops.setdefault(got[0], []).append(got[1])
    if len(ops) > MAX_GROUPS:
        raise Malformed("too many process groups")
    status = d.get("pg_status") or {}
    if type(status) is not dict or len(status) > MAX_GROUPS:
        raise Malformed("pg_status")
    ids = {k.split(" ", 1)[0]: k for k in ops}
    enq, done = {}, {}
    for i, v in status.items():
        if type(v) is not dict:
            raise Malformed("pg_status entry")
        key = ids.get(_label(i), _label(i))
        enq[key] = _int(v.get("last_enqueued_collective"), -BIG)
        done[key] = _int(v.get("last_completed_collective"), -BIG)
    return Parsed({k: tuple(v) for k, v in ops.items()}, enq, done)


def _op(e: Mapping[str, Any], sites: dict[int, str]) -> Op:
    created = e.get("time_created_ns")
    return Op(
        seq=_int(e.get("collective_seq_id")),
        name=_text(e.get("profiling_name", "?")).rsplit(":", 1)[-1],
        shape=_shape(e.get("input_sizes") or [], e.get("input_dtypes") or []) or "no tensor",
        created=None if created is None else _int(created) / 1e9,
        completed=bool(e.get("retired")) or e.get("state") == "completed",
        site=_site(e.get("frames") or [], sites),
    )


def _shape(sizes: Any, dtypes: Any) -> str:
    """`4×float32, 8×float32, +30 more`: the first tensors, and how many others."""
    types, shapes = _items(dtypes, MAX_TENSORS), _items(sizes, MAX_TENSORS)
    n = min(len(types), len(shapes), SHOWN_TENSORS)
    shown = [f"{_count(shapes[i])}×{_dtype(types[i])}" for i in range(n)]
    more = min(len(types), len(shapes)) - n
    return ", ".join(shown) + (f", +{more} more" if more > 0 else "")


def _count(sizes: Any) -> int:
    n = 1
    for x in _items(sizes, MAX_DIMS):
        n *= _int(x)
    if n >= BIG:
        raise Malformed("a tensor larger than int64")
    return n


def _dtype(t: Any) -> str:
    text = _text(t)
    return DTYPES.get(text, text)


def _site(frames: Any, sites: dict[int, str]) -> str:
    known = sites.get(id(frames))
    if known is None:
        parsed = [_frame(f) for f in _items(frames, MAX_FRAMES) if type(f) is dict]
        call = user_frame(parsed)
        known = sites[id(frames)] = call.where if call else "?"
    return known


def _frame(f: Mapping[str, Any]) -> Frame:
    name = _text(f.get("name", "?"))
    return Frame(name, _text(f.get("filename", "?"), MAX_PATH), _int(f.get("line", 0), 0, 2**31))


def _group(pg: Any) -> str:
    if isinstance(pg, (tuple, list)) and len(pg) == 2:
        return f"{_label(pg[0])} {_label(pg[1])}"
    return "?"


def _items(v: Any, limit: int) -> Sequence[Any]:
    if type(v) not in (list, tuple) or len(v) > limit:
        raise Malformed(f"expected a list of at most {limit}")
    return v  # type: ignore[no-any-return]


def _int(v: Any, low: int = 0, high: int = BIG) -> int:
    if type(v) is not int or not low <= v < high:  # a bool, a float, inf, 10**400
        raise Malformed(f"expected an integer in [{low}, {high})")
    return v


def _text(v: Any, limit: int = MAX_TEXT) -> str:
    if type(v) is not str or len(v) > limit:
        raise Malformed(f"expected a string of at most {limit}")
    return one_line(v)


def _label(v: Any) -> str:
    """A process group's id or name: torch writes strings, an int is taken as its text."""
    return str(_int(v, -BIG)) if type(v) is int else _text(v)
