"""Spans of time as people type them (`24h`, `7d`, `90m`) and as a summary shows them.

A quarantine's `--for`, the ledger's `--since` and `restart.quarantine_after`'s `within`
and `for` all take one spelling, checked by one rule: a finite positive amount of a
known unit, at most a year. A NaN or an inf here would make a quarantine that never
ends or one that has already ended.
"""

from __future__ import annotations

import math
import re

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
MAX_SPAN = 366 * 86400.0
_SPAN_RE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw]?)\s*\Z")


def parse_span(value: object) -> float:
    """Seconds from `24h`, `7d`, `1.5h`, `90` (seconds); ValueError says why not, in
    words fit for `--for` and for a config key alike."""
    if isinstance(value, bool):
        raise ValueError(f"expected a time span like 24h, 7d or 90m, got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        m = _SPAN_RE.match(str(value))
        if m is None:
            raise ValueError(f"expected a time span like 24h, 7d or 90m, got {value!r}")
        seconds = float(m.group(1)) * UNITS[m.group(2) or "s"]
    if not math.isfinite(seconds) or not 0 < seconds <= MAX_SPAN:
        raise ValueError(f"expected a time span > 0 and at most 366d, got {value!r}")
    return seconds


def format_span(seconds: float | None) -> str:
    """`4.2s`, `3m05s`, `2h10m`, `3d4h`; `?` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d{int(s % 86400 // 3600)}h"
