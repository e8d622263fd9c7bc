"""The goodput ledger: for each restart chain, the time it trained and the time failures
cost, split the way one fixes them.

Detection is fault → teardown (the report's first problem to the teardown note): a
slow watch. Recovery is teardown → the next attempt's first step (backoff,
relaunch, rendezvous, data loading): a slow restart. Lost work is the training since the
last checkpoint (the job's checkpoint lines): checkpoints too far apart. GPU-hours lost
multiply each by the GPUs the attempt held, as the sentinels saw them in nvidia-smi on
every node (stepclock.py): a job on nodes with no GPU is a CPU job and costs no GPU-hours,
and an attempt whose GPUs were not seen on every node (an older record, a node never
reached) costs "?" GPU-hours, never a count guessed from its processes. Training is
first to last step of each attempt as its `steps` note has them; each look keeps that
note current while the job runs, so a live chain's line is right too. Pure
arithmetic over records.scan's views; a missing time makes its part unknown, never a guess.
The values and their text are goodput.py's; this module reads them off the records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mntui.sessions.jsonshape import count, number

from .blame import ENDED, failure_of
from .goodput import GPUS_FROM, ChainLedger, Loss, format_ledgers, span, total_line
from .records import RunView, Scan

__all__ = [
    "GPUS_FROM",
    "LIVE",
    "ChainLedger",
    "Loss",
    "chain_ledger",
    "chain_line",
    "format_ledgers",
    "gpus",
    "ledger_of",
    "ledgers",
    "loss_of",
    "total_line",
    "trained",
]

LIVE = frozenset({"launching", "running", "restarting", "killing"})


def _num(note: Mapping[str, Any] | None, key: str) -> float | None:
    return number(note.get(key)) if note is not None else None


def _steps(run: RunView) -> Mapping[str, Any] | None:
    return run.last_note("steps")


def trained(run: RunView) -> float:
    note = _steps(run)
    return span(_num(note, "first_step_at"), _num(note, "last_step_at")) or 0.0


def gpus(run: RunView) -> int | None:
    """The GPUs the attempt held, when the watch saw every node's; 0: CPU only."""
    note = _steps(run)
    seen = count(note.get("gpu_nodes")) if note is not None else None
    held = count(note.get("gpus")) if note is not None else None
    return held if seen is not None and seen >= len(run.nodes) > 0 else None


def _lost_work(note: Mapping[str, Any] | None) -> tuple[int | None, float | None]:
    """Steps and seconds since the attempt's last checkpoint (or, if it saved none, since
    its first step); (None, None) when the job's checkpoints are not followed."""
    if note is None or note.get("checkpoints") is not True:
        return None, None
    last, last_at = _num(note, "last_step"), _num(note, "last_step_at")
    base, base_at = _num(note, "checkpoint_step"), _num(note, "checkpoint_at")
    if base_at is None:
        base, base_at = _num(note, "first_step"), _num(note, "first_step_at")
    steps = int(last - base) if last is not None and base is not None else None
    return (max(0, steps) if steps is not None else None), span(base_at, last_at)


def loss_of(run: RunView, nxt: RunView | None) -> Loss | None:
    teardown = run.last_note("watchdog-teardown")
    if teardown is None and run.status not in ENDED:
        return None
    failure = failure_of(run)
    report = run.report
    torn_at = _num(teardown, "at")
    if torn_at is None and report is not None:
        torn_at = report.ended_at
    fault_at = report.first_at if report is not None else None
    if fault_at is None:  # no report yet: when the coordinator saw it break, if it said
        fault_at = _num(teardown, "fault_at")
    fault_at = fault_at if fault_at is not None else torn_at
    resumed = _num(_steps(nxt), "first_step_at") if nxt is not None else None
    steps, work = _lost_work(_steps(run))
    kind = failure.kind if failure is not None else run.status
    node = failure.node if failure is not None else None
    return Loss(run.run_id, run.attempt, node, kind, fault_at, torn_at, resumed, steps, work,
                gpus(run))  # fmt: skip


def chain_ledger(runs: Sequence[RunView], now: float) -> ChainLedger:
    runs = sorted(runs, key=lambda r: (r.attempt, r.created_at))
    last = runs[-1]
    ended = None if last.status in LIVE else (last.ended_at or last.created_at)
    losses = [loss_of(r, runs[i + 1] if i + 1 < len(runs) else None) for i, r in enumerate(runs)]
    start = runs[0].created_at
    return ChainLedger(
        job=last.job,
        chain=last.chain,
        status=last.status,
        attempts=len(runs),
        started_at=start,
        ended_at=ended,
        wall=max(0.0, (ended if ended is not None else now) - start),
        training=sum(trained(r) for r in runs),
        losses=tuple(x for x in losses if x is not None),
        gpus=gpus(last),
    )


def ledgers(scan: Scan, now: float) -> list[ChainLedger]:
    """One ledger per chain, oldest first."""
    chains: dict[tuple[str, str], list[RunView]] = {}
    for run in scan.runs:
        chains.setdefault((run.job, run.chain), []).append(run)
    out = [chain_ledger(runs, now) for runs in chains.values()]
    return sorted(out, key=lambda c: c.started_at)


def ledger_of(
    job: str,
    chain: str,
    now: float | None = None,
    steps: Mapping[str, Mapping[str, Any]] | None = None,
) -> ChainLedger | None:
    """The ledger of one chain, read from disk now: the line a status, a report and the
    chain's last notification end with. `steps`: a run's step clock fresher than its
    record's note (a cluster run's, as its coordinator said it this look: the record is
    rewritten only now and then, clusterchain.py), used in its place."""
    import time

    from .records import scan

    fresh = steps or {}
    runs = [r for r in scan(job).runs if r.chain == chain]
    runs = [_with_steps(r, fresh[r.run_id]) if r.run_id in fresh else r for r in runs]
    return chain_ledger(runs, time.time() if now is None else now) if runs else None


def _with_steps(run: RunView, note: Mapping[str, Any]) -> RunView:
    from dataclasses import replace

    flat = {k: v for k, v in note.items() if isinstance(v, (int, float, str, bool))}
    notes = tuple(n for n in run.notes if n.get("what") != "steps")
    return replace(run, notes=(*notes, {**flat, "what": "steps"}))


def chain_line(
    job: str, chain: str | None, steps: Mapping[str, Mapping[str, Any]] | None = None
) -> str:
    """`; <the chain's summary>`, to end a status, a report or a notification; "" when
    the records hold no such chain."""
    ledger = ledger_of(job, chain, steps=steps) if chain else None
    return f"; {ledger.summary()}" if ledger is not None else ""
