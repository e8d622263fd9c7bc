"""What the ask for every rank's Flight Recorder dump before a hang's teardown got.

The ask rides in the stack capture's round trip: its shell is the capture script's
(launch/stackscript.py: ask_snippet, wait_snippet), which the launch renders for the
cluster's sentinels too, and which prints one `ASKED n DUMPED k` line, parsed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Asked:
    pipes: int  # ranks asked (their pipe took the write)
    dumped: int  # dump files written since the ask, when the wait ended


_ASKED = re.compile(r"ASKED (\d{1,6}) DUMPED (\d{1,6})\Z")


def parse_asked(body: str) -> Asked | None:
    a = _ASKED.match(body)
    return Asked(int(a[1]), int(a[2])) if a else None
