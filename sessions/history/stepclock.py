"""When an attempt trained: its first and last step and its last checkpoint, for the ledger.

The watchdog already follows every node's step; this keeps the few times the goodput
ledger needs, and the watchdog writes them into the run record as a `steps` note when
the first step is seen and when the attempt ends. A checkpoint is a log line matching
the config's `checkpoint_pattern` (its group `step`, if it has one, names the step
saved; else the step reached when the line was seen). Lines are node data: looked at
through a 4,000-character cap, and nothing in them makes this raise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mntui.sessions.runs import RunRecord

MAX_LINE = 4000
MAX_STEP = 10**12


def compile_checkpoint(text: str) -> re.Pattern[str]:
    """The config's `checkpoint_pattern`; ValueError says why it cannot be used."""
    try:
        return re.compile(text)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None


@dataclass
class StepClock:
    checkpoint: re.Pattern[str] | None = None
    first_at: float | None = None  # local time the first step was seen
    first_step: int | None = None
    last_at: float | None = None  # local time the highest step last advanced
    last_step: int | None = None
    checkpoint_at: float | None = None
    checkpoint_step: int | None = None
    noted_first: bool = False  # the first step is in the record

    def feed(self, now: float, step: int | None, lines: Iterable[str] = ()) -> None:
        """One poll: the highest step any node reached, and the lines it brought."""
        if step is not None and (self.last_step is None or step > self.last_step):
            if self.first_at is None:
                self.first_at, self.first_step = now, step
            self.last_at, self.last_step = now, step
        if self.checkpoint is None:
            return
        for line in lines:
            m = self.checkpoint.search(line[:MAX_LINE])
            if m is not None:
                self.checkpoint_at, self.checkpoint_step = now, self._saved(m)

    def _saved(self, m: re.Match[str]) -> int | None:
        raw = m.groupdict().get("step")
        if raw is not None and raw.isascii() and raw.isdigit() and len(raw) <= 13:
            value = int(raw)
            return value if value <= MAX_STEP else self.last_step
        return self.last_step

    @property
    def first_due(self) -> bool:
        """A first step was seen and is not yet written down."""
        return self.first_at is not None and not self.noted_first

    def plain(self) -> dict[str, Any]:
        """The `steps` note (JSON): what the ledger reads back."""
        return {
            "first_step_at": self.first_at,
            "first_step": self.first_step,
            "last_step_at": self.last_at,
            "last_step": self.last_step,
            "checkpoints": self.checkpoint is not None,
            "checkpoint_at": self.checkpoint_at,
            "checkpoint_step": self.checkpoint_step,
        }


def note_steps(record: RunRecord, clock: StepClock | None) -> None:
    """Write the clock into `record` (inside its update) once a step was seen."""
    if clock is not None and clock.first_at is not None:
        record.note("steps", **clock.plain())
