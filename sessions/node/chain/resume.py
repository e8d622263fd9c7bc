"""Where a coordinator started again (respawn.py) picks its chain up: read from the
files its predecessor kept on the main, never from memory.

Why files: the chain's state must outlive the process that keeps it (a SIGKILL, the
OOM killer, a bug), and a second coordinator must never restart an attempt twice,
decide again what was decided and carried out, or forget the user's kill. So each
step is written before the next is taken (chain.py: `chain.json`; teardown.py:
`decision.json`, before the kill and again with `ended_at` after it), and the point
here is the first step not known to be done:

- the chain ended (killed, ended, gave up, a failed restart): nothing left to do;
- a backoff: what is left of it, then the next attempt;
- an attempt starting: its start again (a sentinel that started it already says so,
  and starts nothing: sentinel.py `_started_before`);
- an attempt running with a decision of its own: that decision, finished if its kill
  was cut, then the restart policy on it as it stood (`decide`);
- an attempt running without: watched again.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from mntui.sessions.node.board.coordstate import Board
from mntui.sessions.node.files.plainfile import plain
from mntui.sessions.node.rules.chainstates import TERMINAL, ChainStatus, status_of
from mntui.sessions.node.rules.restarts import AttemptEnd, attempt_label, ends_from


class Phase(str, Enum):
    """Where a chain stands: the step a coordinator (started again or not) takes next."""

    WATCH = "watch"  # an attempt runs: judge it
    DECIDE = "decide"  # its decision is taken: finish its kill, then the restart policy
    BACKOFF = "backoff"  # waiting out the delay before the next attempt
    START = "start"  # the next attempt is to be started
    OVER = "over"  # the chain ended

    def __str__(self) -> str:
        return self.value


WATCH, DECIDE, BACKOFF, START, OVER = Phase  # the steps by name, as chain.py takes them


@dataclass(frozen=True)
class Point:
    phase: Phase
    k: int  # the chain's latest attempt
    run: str  # its run id
    history: tuple[AttemptEnd, ...]  # how the attempts before ended
    started_at: float  # wall clock: when attempt k started
    record: dict[str, Any] | None = None  # DECIDE: attempt k's decision
    left: float = 0.0  # BACKOFF: seconds of it still to wait
    why: str = ""  # OVER: how the chain ended
    end: ChainStatus | None = None  # OVER: the chain's status still to write (None: written)


def load(out_dir: str, name: str) -> dict[str, Any] | None:
    """One of the coordinator's files (atomic: whole or absent), or None."""
    try:
        with open(os.path.join(out_dir, name), encoding="utf-8", opener=plain) as f:
            data = json.loads(f.read(8 << 20))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _number(v: object) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e12
    return float(v) if ok and isinstance(v, (int, float)) else None


def point(chain: dict[str, Any], decision: dict[str, Any] | None, now: float) -> Point | None:
    """Where the chain `chain` (chain.json) stands, with the latest `decision`
    (decision.json); None for a chain file this cannot read (the chain starts afresh)."""
    attempts = chain.get("attempts")
    if not isinstance(attempts, list) or not attempts:
        return None
    if not all(isinstance(a, dict) for a in attempts):
        return None
    last = attempts[-1]
    k, run = last.get("attempt"), last.get("run")
    if type(k) is not int or k < 0 or not isinstance(run, str):
        return None
    ended = [a["end"] for a in attempts if "end" in a]
    history = ends_from(ended)
    if len(history) != len(ended):
        return None  # an end this version cannot read: restarts used would be miscounted
    started = _number(last.get("started_at")) or now
    at = Point(WATCH, k, run, history, started)
    status = status_of(chain.get("status"))
    mine = decision if decision is not None and decision.get("run") == run else None
    if status in TERMINAL:
        why = chain.get("why") or last.get("restart") or status
        return replace(at, phase=OVER, why=str(why)[:300])
    if status is ChainStatus.BACKOFF:
        end_at, delay = _number(last.get("ended_at")), _number(last.get("delay"))
        left = max(0.0, (end_at or now) + (delay or 0.0) - now)
        return replace(at, phase=BACKOFF, left=left)
    if status is ChainStatus.STARTING:
        if mine is not None:  # its start failed, and what did start was stopped
            why = str(mine.get("why") or f"{attempt_label(k)} did not start")[:300]
            return replace(at, phase=OVER, why=why, end=ChainStatus.FAILED_RESTART)
        return replace(at, phase=START)
    if status is ChainStatus.RUNNING:
        return replace(at, phase=DECIDE, record=mine) if mine is not None else at
    return None


def seed(board: Board, run: str) -> None:
    """A board that takes over a running attempt: the steps the predecessor published
    (the ledger's training time of the attempt goes on, not from zero), and each node
    `silence` to speak again before it counts as unreachable (they were connected a
    moment ago; the launch's start_grace is for sentinels that never came)."""
    status = load(board.out, "status.json")
    steps = status.get("steps") if status is not None and status.get("run") == run else None
    if isinstance(steps, dict) and not board.clock:
        board.clock = dict(steps)
    board.start = time.monotonic() - max(0.0, board.cfg.start_grace - board.silence)
