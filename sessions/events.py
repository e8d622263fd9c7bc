"""Typed progress events: the CLI prints them, the app turns them into messages."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum


class Phase(StrEnum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    CHECKED = "checked"
    STARTING = "starting"
    STARTED = "started"
    WAITING = "waiting"
    READY = "ready"
    RUNNING = "running"
    KILLING = "killing"
    KILLED = "killed"
    FAILED = "failed"
    NOTICE = "notice"
    ABORTED = "aborted"


@dataclass(frozen=True)
class Event:
    node: str | None  # None: about the whole job
    rank: int | None
    phase: Phase
    message: str
    at: float = field(default_factory=time.time)

    def format(self, t0: float | None = None) -> str:
        stamp = f"+{self.at - t0:6.2f}s " if t0 is not None else ""
        who = f"{self.node}[{self.rank}]" if self.node is not None else "job"
        return f"{stamp}{who:<16} {self.phase.value:<10} {self.message}".rstrip()
