"""Where a restart chain stands, as its run records say: the attempts' ends, the run a
supervisor moves to `restarting` or `gave-up`, and whether the user's kill got there first.

Apart from the supervisor (supervise.py), which decides and relaunches, because these
are reads and writes of records that another process shares: a user's `mntui kill`
marks the same run.json, so the looks that decide (a kill, the chain's latest run) read
it from disk again, and a move is a read-modify-write made only while no kill has
marked the run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from mntui.sessions.config import JobConfig
from mntui.sessions.launch import chain_of
from mntui.sessions.poll import NodeState
from mntui.sessions.runs import RunRecord, RunStatus, load_run, read_status
from mntui.sessions.watch import WatchEnd

from .restart import AttemptEnd, ends_from

WAIT_STEP = 0.2  # seconds between looks at the record during a backoff


@dataclass(frozen=True)
class Chain:
    """Where a chain stands: the current run and every attempt's end so far."""

    cfg: JobConfig
    record: RunRecord
    history: tuple[AttemptEnd, ...] = ()


def attempt_end(chain: Chain, end: WatchEnd, last_progress: float | None) -> AttemptEnd:
    """`last_progress` is when a step last advanced, not when output last grew: the
    failure's own traceback is output, and a job that hangs silently until its collective
    timeout must not count as one that made progress (`reset_after`)."""
    rec = chain.record
    state, culprit, cause = NodeState.FAILED, None, rec.cause or ""
    if end.trigger is not None:
        state, culprit = end.trigger.state, end.trigger.node
    report = end.report
    if report is not None:
        culprit = report.cause_node or culprit
        cause = report.headline
    codes = tuple(n.exit_code for n in report.nodes if n.exit_code) if report else ()
    started = rec.finished_launch_at or rec.created_at
    progressed = max(0.0, last_progress - started) if last_progress else 0.0
    return AttemptEnd(rec.attempt, rec.run_id, state, culprit, codes, progressed, cause)


def mark(record: RunRecord, status: RunStatus, what: str, **details: Any) -> bool:
    """Move a live or just ended run to `status`; False if a user's kill got there first
    (on a run that had ended, the kill is only a note: its ending stays)."""
    moved = []

    def change(r: RunRecord) -> None:
        if (r.status.is_live or r.status.may_restart) and not r.stopped_by_user:
            r.status = status
            r.note(what, **details)
            moved.append(True)

    record.update(change)
    return bool(moved)


def wait_backoff(record: RunRecord, seconds: float) -> bool:
    """Sleep the backoff in small steps; False as soon as a user's kill ends the chain."""
    deadline = time.monotonic() + seconds
    while True:
        status = read_status(record.job, record.run_id)
        if status is not None and status is not RunStatus.RESTARTING:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        time.sleep(min(WAIT_STEP, left))


def stopped(record: RunRecord) -> bool:
    """A user's kill reached the run (read now: the kill is another process)."""
    now = load_run(record.job, record.run_id)
    return now is not None and now.stopped_by_user


def head(record: RunRecord) -> RunRecord:
    """The chain's latest run: only it is live, so a user's kill marks it and the next
    restart is marked on it."""
    view = chain_of(record.job, record)
    return view.latest if view is not None else record


def earlier(record: RunRecord) -> tuple[AttemptEnd, ...]:
    """A supervisor that takes over a chain (the app quit) picks up its history."""
    return ends_from(record.attempts)


def restart_ends(record: RunRecord) -> tuple[AttemptEnd, ...]:
    """The ends a supervisor decided its last restart on (kept in the record's note)."""
    note = next((h for h in reversed(record.history) if h.get("what") == "restart"), None)
    return ends_from(note.get("ends")) if note is not None else ()
