"""What a sentinel tells the coordinator about its node, and how it reads on the wire.

The facts are the inputs of `rules.derive`, nothing more: the coordinator judges a
node from them exactly as the manager's watchdog judges a polled snapshot. They come
from another machine, so decoding is strict and bounded: a field of the wrong type or
size makes the whole frame malformed (counted by the caller), never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_PROCS = 4096
MAX_PID = 1 << 31
MAX_TEXT = 400


@dataclass(frozen=True)
class ProcFact:
    pid: int
    ppid: int
    state: str  # the letter of /proc/P/stat


@dataclass(frozen=True)
class Facts:
    reachable: bool
    error: str | None
    live_procs: tuple[ProcFact, ...]
    pane_pid: int | None
    exit_code: int | None
    session: bool
    pane_dead: bool
    log_size: int | None
    output_age: float | None

    def to_wire(self) -> dict[str, Any]:
        return {
            "procs": [[p.pid, p.ppid, p.state] for p in self.live_procs[:MAX_PROCS]],
            "pane_pid": self.pane_pid,
            "exit_code": self.exit_code,
            "session": self.session,
            "pane_dead": self.pane_dead,
            "log_size": self.log_size,
            "output_age": self.output_age,
        }


def silent(why: str) -> Facts:
    """A node the coordinator has no fresh word from: unreachable, with why."""
    return Facts(False, why[:MAX_TEXT], (), None, None, False, False, None, None)


class Malformed(ValueError):
    """A frame's facts that are not what a sentinel of ours sends."""


def _int(v: object, lo: int, hi: int, none: bool = True) -> int | None:
    if v is None and none:
        return None
    if type(v) is not int or not lo <= v <= hi:
        raise Malformed(f"not an integer in [{lo}, {hi}]")
    return v


def _num(v: object) -> float | None:
    if v is None:
        return None
    if type(v) not in (int, float) or not -1e9 <= v <= 1e12:  # type: ignore[operator]
        raise Malformed("not a number in range")
    return float(v)  # type: ignore[arg-type]


def _flag(v: object) -> bool:
    if type(v) is not bool:
        raise Malformed("not a boolean")
    return v


def _proc(item: object) -> ProcFact:
    if not isinstance(item, list) or len(item) != 3:
        raise Malformed("a process is [pid, ppid, state]")
    pid, ppid, state = item
    if not isinstance(state, str) or len(state) != 1 or not state.isalpha():
        raise Malformed("a process state is one letter")
    return ProcFact(_int(pid, 1, MAX_PID, none=False) or 0, _int(ppid, 0, MAX_PID) or 0, state)


def from_wire(d: object) -> Facts:
    """The facts of a sentinel's `snap`, or Malformed."""
    if not isinstance(d, dict):
        raise Malformed("facts are an object")
    procs = d.get("procs")
    if not isinstance(procs, list) or len(procs) > MAX_PROCS:
        raise Malformed("procs is a bounded list")
    return Facts(
        reachable=True,
        error=None,
        live_procs=tuple(_proc(p) for p in procs),
        pane_pid=_int(d.get("pane_pid"), 1, MAX_PID),
        exit_code=_int(d.get("exit_code"), -(1 << 31), 1 << 31),
        session=_flag(d.get("session")),
        pane_dead=_flag(d.get("pane_dead")),
        log_size=_int(d.get("log_size"), 0, 1 << 62),
        output_age=_num(d.get("output_age")),
    )
