"""When an attempt trained and on what: its first and last step, its last checkpoint and
the GPUs it held, for the ledger.

The cluster's coordinator follows every node's step; this keeps the few times the
goodput ledger needs, and a look writes them into the run record as one `steps` note
(watch/clusterchain.py, from the coordinator's clock: `coordinator_clock`), kept
current: a live attempt's every REFRESH seconds of stepping, an ended one's whole. A
live `mntui status` and a killed run both read how long it trained from there, so a note
written only at the first step would say 0 s for both. GPUs are counted by
node/rules/gpucount.py's rule (the coordinator's too): what nvidia-smi listed on each node, at
most one per process there; a node with no nvidia-smi (or none listed) holds none: a CPU
job is priced in no GPU-hours, never in one GPU per process. A checkpoint is a log line
matching the config's `checkpoint_pattern` (its group `step`, if it has one, names the
step saved; else the step reached when the line was seen). Lines are node data: looked
at through a 4,000-character cap, and nothing in them makes this raise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mntui.sessions.node.rules.gpucount import see

if TYPE_CHECKING:
    from mntui.sessions.runs import RunRecord

MAX_LINE = 4000
MAX_STEP = 10**12
REFRESH = 5.0  # seconds of stepping between two writes of the note while the job runs


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
    gpus: dict[str, int] = field(default_factory=dict)  # node -> GPUs its processes hold
    noted: tuple[float | None, int] | None = None  # (last_at, nodes with GPUs) last written

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

    def see_gpus(self, node: str, nproc: int | None, listed: int | None) -> None:
        """One poll of `node`: `listed` GPUs in nvidia-smi (0: none, or no nvidia-smi;
        None: it failed, so unknown), held by the rule the cluster's coordinator counts
        by too (node/rules/gpucount.py)."""
        see(self.gpus, node, nproc, listed)

    @property
    def due(self) -> bool:
        """The note on disk is behind: a first step or a node's GPUs not yet in it, or
        REFRESH seconds of stepping since it was written."""
        if self.first_at is None and not self.gpus:
            return False
        if self.noted is None or self.noted[1] != len(self.gpus):
            return True
        was = self.noted[0]
        if was is None:
            return self.last_at is not None
        return self.last_at is not None and self.last_at - was >= REFRESH

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
            "gpus": sum(self.gpus.values()),
            "gpu_nodes": len(self.gpus),  # nodes whose GPUs were seen: the sum is theirs
        }


def note_steps(record: RunRecord, clock: StepClock | None) -> None:
    """Write the clock into `record` (inside its update) once it saw anything: the one
    `steps` note replaces the last, so a long run's record does not grow with it."""
    if clock is None or (clock.first_at is None and not clock.gpus):
        return
    note_plain(record, plain=clock.plain())
    clock.noted = (clock.last_at, len(clock.gpus))


# the coordinator's step clock (node/board/coordstate.py's `clock`): the keys of the one note
CLOCK_KEYS = frozenset({"first_step", "first_step_at", "last_step", "last_step_at",
                        "checkpoints", "gpus", "gpu_nodes"})  # fmt: skip


def coordinator_clock(steps: object) -> dict[str, Any] | None:
    """A cluster attempt's steps and GPUs as its coordinator clocked them (status.json,
    chain.json, a kill's decision: node data), as the `steps` note the ledger reads;
    numbers only, of the keys it knows. None until either is known, as note_steps: a job
    killed before its first step was still seen on its GPUs (or on none: a CPU job)."""
    if not isinstance(steps, dict) or not steps:
        return None
    plain = {k: v for k, v in steps.items() if k in CLOCK_KEYS and _number(v)}
    return plain if "first_step_at" in plain or plain.get("gpu_nodes") else None


def note_plain(record: RunRecord, *, plain: dict[str, Any]) -> None:
    """The one `steps` note into `record` (inside its update), replacing the last, so a
    long run's record does not grow with it: this clock's and the coordinator's."""
    record.history[:] = [h for h in record.history if h.get("what") != "steps"]
    record.note("steps", **plain)


def _number(v: object) -> bool:
    """A value the note may carry: a flag (`checkpoints`), or a count or time in range."""
    return isinstance(v, bool) or (isinstance(v, (int, float)) and 0 <= v < 1e13)
