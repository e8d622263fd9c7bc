"""Reading JSON that this mntui may not have written, in the one shape its reader uses.

A record or report may come from an older or newer mntui, a hand edit, or a disk that
kept the syntax and lost the sense; the run records are read by every verb and the app,
and the history reads every job's records: one odd file must not stop either. So every
value is taken here, once, in the shape its reader uses, or is missing (None); what
comes out can be used without a further check. A number is finite and within 2**53 (a
float() of 10**400 overflows, a localtime() of 1e17 fails, NaN and Infinity parse), and
nesting deeper than the parser recurses is a file it cannot read.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_FILE = 8 * 1024 * 1024  # a record or report larger than this is not one of ours
LIMIT = 2**53  # beyond this a number is no time, step or count this version wrote

Scalar = str | int | float | bool | None


def load(path: Path) -> Any:
    """The file's JSON; ValueError when it is not JSON this reader can hold, OSError
    when it cannot be read."""
    return load_identified(path)[0]


def load_identified(path: Path) -> tuple[Any, tuple[int, int, int, int]]:
    """load(), with what identifies the bytes it read: (device, inode, mtime_ns, size) of
    the file it opened (a file replaced whole, as write_atomic does, is a new inode)."""
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        data = fh.read(MAX_FILE + 1)
    return _parse(data), (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def _parse(data: bytes) -> Any:
    if len(data) > MAX_FILE:
        raise ValueError("too large")
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def number(value: object) -> float | None:
    """A finite number within LIMIT as a float; None for anything else (bools too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        return float(value) if -LIMIT <= value <= LIMIT else None
    return value if math.isfinite(value) and abs(value) <= LIMIT else None


def count(value: object, least: int = 0) -> int | None:
    """An int from `least` to LIMIT; None for anything else (bools and floats too)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if least <= value <= LIMIT else None


def text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def scalar(value: object) -> Scalar:
    """A string, a bool, None or a number() as it is; anything else (a list, a map, a
    number out of range) None."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, (int, float)):
        return value if number(value) is not None else None
    return None


def flat(value: object) -> dict[str, Scalar] | None:
    """A map's string keys, each with its scalar() (a nested value: None); None when
    it is no map. Notes and doctor rows are read this way: nothing nested outlives it."""
    if not isinstance(value, dict):
        return None
    return {k: scalar(v) for k, v in value.items() if isinstance(k, str)}


def listed(data: dict[str, Any], key: str) -> tuple[list[Any], int]:
    """data[key] when it is a list, and 1 when it is there but is no list (counted)."""
    value = data.get(key)
    if value is None:
        return [], 0
    return (value, 0) if isinstance(value, list) else ([], 1)


# A record's shape, key by key: each check says whether a value is of it (runs.py's).
Check = Callable[[Any], bool]


def optional(check: Check) -> Check:
    return lambda v: v is None or check(v)


def list_of(check: Check) -> Check:
    return lambda v: isinstance(v, list) and all(check(x) for x in v)


def shaped(data: Any, spec: dict[str, Check]) -> bool:
    """Every key one the spec knows, its value of the spec's shape (a missing key is the
    reader's to default or refuse)."""
    return isinstance(data, dict) and all(k in spec and spec[k](v) for k, v in data.items())


def is_str(v: Any) -> bool:
    return isinstance(v, str)


def is_count(v: Any) -> bool:
    return count(v) is not None


def is_time(v: Any) -> bool:
    return number(v) is not None


def is_map(v: Any) -> bool:
    return isinstance(v, dict)
