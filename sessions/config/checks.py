"""The vocabulary of YAML value checks: text, ports, bounded counts and durations, a
choice of a StrEnum, a nested section read into its dataclass.

Each rule and its error message is written once, here, and a setting names the one it
needs in its field's metadata (`meta(check)`); `read` and `section` then take a mapping's
allowed keys from those fields. Nothing here knows what a job is, so the job's own rules
and its settings build on it without an import cycle.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import fields
from enum import StrEnum
from typing import Any, TypeVar

from .yamlmarks import Document, Path_

# C0 controls but tab and newline, and DEL: they cannot be passed on, or garble a terminal.
CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

S = TypeVar("S")
E = TypeVar("E", bound=StrEnum)
# A check reads one YAML value at a path, or raises the ConfigError that names it.
Check = Callable[[Document, Any, Path_], Any]


def meta(check: Check | None = None, **flags: bool) -> dict[str, Any]:
    """A setting's field metadata: the check that reads its YAML key, and flags."""
    return {"check": check, **flags}


# ---- checks: (document, value, path) -> typed value ----------------------------------


def kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, (dict, list)):
        return {dict: "a mapping", list: "a list"}[type(value)]
    return f"{type(value).__name__} {value!r}"


def _suggest(key: str, allowed: set[str]) -> str | None:
    import difflib

    close = difflib.get_close_matches(key, sorted(allowed), n=1)
    return close[0] if close else None


def mapping(doc: Document, value: Any, path: Path_, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise doc.error(path, f"expected a mapping, got {kind(value)}")
    for key in value:
        if key not in allowed:
            hint = _suggest(key, allowed)
            message = "unknown key" + (f" (did you mean {hint!r}?)" if hint else "")
            raise doc.error((*path, key), message)
    return value


def text(doc: Document, value: Any, path: Path_) -> str:
    if not isinstance(value, str) or not value.strip():
        raise doc.error(path, f"expected a non-empty string, got {kind(value)}")
    bad = CONTROL_RE.search(value)
    if bad is not None:
        what = "a NUL byte" if bad.group() == "\0" else f"control character {ord(bad.group()):#04x}"
        raise doc.error(path, f"contains {what}")
    return value


def lines(doc: Document, value: Any, path: Path_) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list):
        raise doc.error(path, f"expected a string or a list of strings, got {kind(value)}")
    return tuple(text(doc, v, (*path, i)) for i, v in enumerate(value))


def port(doc: Document, value: Any, path: Path_) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise doc.error(path, f"expected a port number 1-65535, got {kind(value)}")
    return value


def ports(doc: Document, value: Any, path: Path_) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise doc.error(path, f"expected a list, got {kind(value)}")
    return tuple(port(doc, x, (*path, i)) for i, x in enumerate(value))


def count(maximum: int) -> Check:
    def check(doc: Document, value: Any, path: Path_) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
            raise doc.error(path, f"expected an integer >= 1 and <= {maximum}, got {kind(value)}")
        return value

    return check


def _duration(value: object, positive: bool, maximum: float) -> float | str:
    """Seconds, or why `value` is not a usable duration. A NaN passes every `<` test and
    silently disables a trigger; inf overflows a deadline; 0 expires every timeout."""
    number = None if isinstance(value, bool) or not isinstance(value, (int, float)) else value
    finite = number is not None and math.isfinite(number) and 0 <= number <= maximum
    if finite and number is not None and (number > 0 or not positive):
        return float(number)
    low = "> 0" if positive else ">= 0"
    return f"expected a number {low} and <= {maximum:g} (seconds), got {kind(value)}"


def check_seconds(value: object, name: str, *, positive: bool, maximum: float) -> float:
    """A duration from the config or the command line, by one rule: a finite number in
    [0, maximum], and > 0 when `positive`. Text is parsed first (`--grace 5`).

    Raises ValueError("NAME: expected a number >= 0 and <= 3600 (seconds), got ...").
    """
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    seconds = _duration(value, positive, maximum)
    if isinstance(seconds, str):
        raise ValueError(f"{name}: {seconds}")
    return seconds


def seconds(*, maximum: float, positive: bool = False, floor: float = 0.0) -> Check:
    def check(doc: Document, value: Any, path: Path_) -> float:
        seconds = _duration(value, positive, maximum)
        if isinstance(seconds, str):
            raise doc.error(path, seconds)
        return max(floor, seconds)

    return check


def seconds_or_auto(*, maximum: float) -> Check:
    """`auto` (a value the code learns), or a duration > 0."""

    def check(doc: Document, value: Any, path: Path_) -> float | str:
        if value == "auto":
            return "auto"
        seconds = _duration(value, True, maximum)
        if isinstance(seconds, str):
            raise doc.error(path, seconds.replace(" (seconds), got", " (seconds) or auto, got"))
        return seconds

    return check


def fraction(doc: Document, value: Any, path: Path_) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float))
    if not ok or not math.isfinite(value) or not 0 < value <= 1:
        raise doc.error(path, f"expected a fraction > 0 and <= 1, got {kind(value)}")
    return float(value)


def whole(low: int, high: int) -> Check:
    def check(doc: Document, value: Any, path: Path_) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise doc.error(path, f"expected an integer >= {low} and <= {high}, got {kind(value)}")
        return value

    return check


def exit_codes(*, zero: bool) -> Check:
    """A list of exit codes, as launch.sh records them (0-255; torchrun reports -N)."""

    def check(doc: Document, value: Any, path: Path_) -> frozenset[int]:
        if not isinstance(value, list):
            raise doc.error(path, f"expected a list of exit codes, got {kind(value)}")
        codes = [whole(-64, 255)(doc, v, (*path, i)) for i, v in enumerate(value)]
        if not zero and 0 in codes:
            raise doc.error(path, "0 is a clean exit: a job is never restarted for it")
        return frozenset(codes)

    return check


def names_of(allowed: tuple[str, ...]) -> Check:
    def check(doc: Document, value: Any, path: Path_) -> frozenset[str]:
        items = value if isinstance(value, list) else [value]
        for i, v in enumerate(items):
            if v not in allowed:
                where = (*path, i) if isinstance(value, list) else path
                raise doc.error(where, f"expected one of {', '.join(allowed)}, got {v!r}")
        return frozenset(items)

    return check


def choice(enum: type[E]) -> Check:
    def check(doc: Document, value: Any, path: Path_) -> E:
        try:
            return enum(value)
        except ValueError:
            choices = ", ".join(e.value for e in enum)
            raise doc.error(path, f"expected one of {choices}, got {value!r}") from None

    return check


def flag(doc: Document, value: Any, path: Path_) -> bool:
    if not isinstance(value, bool):
        raise doc.error(path, f"expected true or false, got {kind(value)}")
    return value


# ---- a dataclass read by the checks on its fields ------------------------------------


def section(cls: type[S]) -> Check:
    """A nested mapping read into its own dataclass, keys and defaults from its fields."""

    def check(doc: Document, value: Any, path: Path_) -> S:
        m = mapping(doc, value, path, keys(cls))
        return cls(**read(doc, cls, m, path))

    return check


@functools.cache
def checks(cls: type) -> dict[str, Check]:
    return {f.name: f.metadata["check"] for f in fields(cls) if f.metadata.get("check")}


def keys(cls: type, flag: str | None = None) -> set[str]:
    return {f.name for f in fields(cls) if f.metadata and (flag is None or f.metadata.get(flag))}


def read(
    doc: Document, cls: type, m: Mapping[str, Any], path: Path_, only: set[str] | None = None
) -> dict[str, Any]:
    """The given, non-null keys of `m` that are checked fields of `cls`, checked."""
    return {
        k: check(doc, m[k], (*path, k))
        for k, check in checks(cls).items()
        if (only is None or k in only) and m.get(k) is not None
    }
