"""A sentinel's `snap` frame, checked field by field before the board keeps any of it.

Why apart from the board: a snap is what a node says, and what a node says is data for a
strict parser (its facts, its sample's age, its steps and pace, its GPU reading, its
node snapshot); the board only keeps what came through. A malformed facts or age drops
the snap (counted); a malformed GPU reading or snapshot drops that part alone, as does
a malformed `steps` (each counted): the rest of what the node said stands.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from mntui.sessions.node.rules import gpucount
from mntui.sessions.node.rules.steps import Pace

from . import gpuwire, nodewire
from .facts import Facts, Malformed, from_wire

MAX_STEP = 10**12
MAX_AGE = 1e6  # seconds: a sentinel's sample age beyond this is no age of ours


@dataclass(frozen=True)
class Snap:
    run: object  # the attempt it is of: compared, never trusted further
    facts: Facts
    age: float
    steps: tuple[int | None, float | None] | None  # None: malformed
    pace: Pace | None  # None until the node has stepped a few times
    # a part: its value, True when the snap left it out (unchanged since sent), False
    # when it was malformed
    gpu: gpuwire.GpuText | bool
    gpu_count: int | None  # its GPUs the job holds, by gpucount's rule
    node: str | bool  # the node snapshot as the board keeps it (JSON)

    @property
    def malformed_parts(self) -> int:
        return (self.steps is None) + (self.gpu is False) + (self.node is False)


@dataclass(frozen=True)
class Word:
    """A snap's facts as the board keeps them: when it came and when it was taken."""

    facts: Facts
    arrival: float  # coordinator's monotonic clock
    asked: float  # when the sample was taken, on the coordinator's clock


def parse(msg: dict[str, Any]) -> Snap | None:
    """The snap, or None when its facts or age are malformed (the whole snap is dropped)."""
    age = msg.get("age")
    try:
        facts = from_wire(msg.get("facts"))
        if isinstance(age, bool) or not isinstance(age, (int, float)) or not 0 <= age < MAX_AGE:
            raise Malformed("age")
    except Malformed:
        return None
    gpu = _gpu(msg)
    count = gpucount.listed_in(gpu.csv, gpu.apps) if isinstance(gpu, gpuwire.GpuText) else None
    steps, run = msg.get("steps"), msg.get("run")
    return Snap(run, facts, float(age), _steps(steps), _pace(steps), gpu, count, _node(msg))


def _gpu(msg: dict[str, Any]) -> gpuwire.GpuText | bool:
    if "gpu" not in msg:
        return True
    try:
        csv, apps, own, age = gpuwire.check(msg["gpu"], "age")
    except gpuwire.Malformed:
        return False
    return gpuwire.GpuText(csv, apps, own, time.time() - age)


def _node(msg: dict[str, Any]) -> str | bool:
    if "node" not in msg:
        return True
    try:
        return nodewire.board_entry(msg["node"], time.time())
    except Malformed:
        return False


def _steps(v: object) -> tuple[int | None, float | None] | None:
    """A sentinel's `steps` ({"step": int|None, "rate": number|None}), or None."""
    if not isinstance(v, dict):
        return None
    step, rate = v.get("step"), v.get("rate")
    if step is not None and (type(step) is not int or not 0 <= step <= MAX_STEP):
        return None
    if rate is not None and (type(rate) not in (int, float) or not 0 <= rate < 1e9):
        return None
    return step, None if rate is None else float(rate)


def _pace(v: object) -> Pace | None:
    """A sentinel's pace (`interval`, `longest`, `gaps` of its `steps`), or None."""
    if not isinstance(v, dict):
        return None
    i, g, n = _positive(v.get("interval")), _positive(v.get("longest")), v.get("gaps")
    if i is None or g is None or type(n) is not int or not 0 < n < 1 << 40:
        return None
    return Pace(i, g, n)


def _positive(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 < x < 1e7:
        return None
    return float(x)
