"""The goodput ledger: for each restart chain, the time it trained and the time failures
cost, split the way one fixes them.

Detection is fault → teardown (the report's first problem to the watchdog's teardown
note): a slow watchdog. Recovery is teardown → the next attempt's first step (backoff,
relaunch, rendezvous, data loading): a slow restart. Lost work is the training since the
last checkpoint (the job's checkpoint lines): checkpoints too far apart. GPU-hours lost
multiply each by the GPUs the attempt held, as the watchdog saw them in nvidia-smi on
every node (stepclock.py): a job on nodes with no GPU is a CPU job and costs no GPU-hours,
and an attempt whose GPUs were not seen on every node (an older record, a node never
reached) costs "?" GPU-hours, never a count guessed from its processes. Training is
first to last step of each attempt as the watchdog's `steps` note has them; the watchdog
keeps that note current while the job runs, so a live chain's line is right too. Pure
arithmetic over records.scan's views; a missing time makes its part unknown, never a guess.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mntui.sessions.config import format_span
from mntui.sessions.jsonshape import count

from .blame import ENDED, failure_of
from .records import RunView, Scan

LIVE = frozenset({"launching", "running", "restarting", "killing"})
GPUS_FROM = "nvidia-smi"  # where a node's GPU count comes from


@dataclass(frozen=True)
class Loss:
    """What one failed attempt cost."""

    run_id: str
    attempt: int
    node: str | None  # its cause, when one node was
    kind: str
    fault_at: float | None
    teardown_at: float | None
    resumed_at: float | None  # the next attempt's first step
    lost_steps: int | None  # steps since the last checkpoint; None: no checkpoint lines
    lost_work: float | None  # seconds of training since the last checkpoint
    gpus: int | None  # 0: a CPU attempt; None: not seen on every node

    @property
    def detection(self) -> float | None:
        return _span(self.fault_at, self.teardown_at)

    @property
    def recovery(self) -> float | None:
        return _span(self.teardown_at, self.resumed_at)

    @property
    def lost(self) -> float:
        return sum(x for x in (self.detection, self.recovery, self.lost_work) if x is not None)

    @property
    def gpu_hours(self) -> float | None:
        return self.gpus * self.lost / 3600 if self.gpus is not None else None


@dataclass(frozen=True)
class ChainLedger:
    job: str
    chain: str
    status: str  # the latest attempt's
    attempts: int
    started_at: float
    ended_at: float | None  # None: still going
    wall: float
    training: float
    losses: tuple[Loss, ...]
    gpus: int | None  # the latest attempt's: 0 on CPU, None when not seen

    @property
    def lost(self) -> float:
        return sum(loss.lost for loss in self.losses)

    @property
    def gpu_hours_lost(self) -> float | None:
        """None when any failure's GPUs are unknown: a partial sum would read as the
        whole."""
        return _total(loss.gpu_hours for loss in self.losses)

    def part(self, name: str) -> float | None:
        values = [getattr(loss, name) for loss in self.losses]
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    def summary(self) -> str:
        """The seff-style line at the end of a chain."""
        good = f" ({self.training / self.wall:.0%} goodput)" if self.wall > 0 else ""
        head = f"{self.job} chain {self.chain}: {self.status} after {self.attempts} attempt(s)"
        head += f"{_on(self.gpus)}; wall {format_span(self.wall)}, "
        head += f"training {format_span(self.training)}{good}"
        if not self.losses:
            return head + "; no failures"
        names = (("detection", "detection"), ("recovery", "recovery"), ("work", "lost_work"))
        parts = ", ".join(f"{label} {format_span(self.part(name))}" for label, name in names)
        cost = _cost([x.gpus for x in self.losses], self.gpu_hours_lost)
        return (
            f"{head}; {len(self.losses)} failure(s) lost {format_span(self.lost)} ({parts}){cost}"
        )

    def plain(self) -> dict[str, Any]:
        out = asdict(self)
        out["losses"] = [
            {**asdict(x), "detection": x.detection, "recovery": x.recovery, "lost": x.lost,
             "gpu_hours": x.gpu_hours}
            for x in self.losses
        ]  # fmt: skip
        out.update(lost=self.lost, gpu_hours_lost=self.gpu_hours_lost, gpus_from=GPUS_FROM)
        out["summary"] = self.summary()
        return out


def _on(gpus: int | None) -> str:
    """What the attempt ran on: " on 8 GPUs", " on CPU", or nothing when not seen."""
    if gpus is None:
        return ""
    return f" on {gpus} GPU{'s' if gpus != 1 else ''}" if gpus else " on CPU"


def _cost(gpus: Sequence[int | None], hours: float | None) -> str:
    """The GPU-hours of some failures: none on CPU, "?" when a count was not seen."""
    if not gpus:
        return ""
    if all(g == 0 for g in gpus):
        return " (CPU: no GPU-hours)"
    if hours is None:
        return " = ? GPU-h (GPUs not seen on every node)"
    return f" = {hours:.3f} GPU-h (GPUs from {GPUS_FROM})"


def _total(values: Iterable[float | None]) -> float | None:
    items = list(values)
    return None if any(v is None for v in items) else sum(v for v in items if v is not None)


def _span(a: float | None, b: float | None) -> float | None:
    return max(0.0, b - a) if a is not None and b is not None else None


def _num(note: Mapping[str, Any] | None, key: str) -> float | None:
    value = note.get(key) if note is not None else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _steps(run: RunView) -> Mapping[str, Any] | None:
    return run.last_note("steps")


def trained(run: RunView) -> float:
    note = _steps(run)
    return _span(_num(note, "first_step_at"), _num(note, "last_step_at")) or 0.0


def gpus(run: RunView) -> int | None:
    """The GPUs the attempt held, when the watchdog saw every node's; 0: CPU only."""
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
    return (max(0, steps) if steps is not None else None), _span(base_at, last_at)


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


def format_ledgers(items: Iterable[ChainLedger]) -> str:
    """The text of `mntui history`: each chain, then the sum when there are several."""
    items = list(items)
    out: list[str] = []
    for c in items:
        out.append(c.summary())
        for x in c.losses:
            out.append(
                f"  attempt {x.attempt} ({x.run_id}): {x.node or '?'} {x.kind}; "
                f"detection {format_span(x.detection)}, recovery {format_span(x.recovery)}, "
                f"lost work {_work(x)}; {_hours(x)}"
            )
    if len(items) > 1:
        out.append(total_line(items))
    return "\n".join(out)


def total_line(items: Sequence[ChainLedger]) -> str:
    """How much the failures of all these chains cost, in one line."""
    wall = sum(c.wall for c in items)
    training = sum(c.training for c in items)
    good = f" ({training / wall:.0%} goodput)" if wall > 0 else ""
    losses = [x for c in items for x in c.losses]
    cost = _cost([x.gpus for x in losses], _total(x.gpu_hours for x in losses))
    return (
        f"total: {len(items)} chains, {sum(c.attempts for c in items)} attempts, "
        f"{len(losses)} failures; wall {format_span(wall)}, training "
        f"{format_span(training)}{good}; lost {format_span(sum(c.lost for c in items))}{cost}"
    )


def _hours(x: Loss) -> str:
    if x.gpu_hours is None:
        return "? GPU-h"
    return f"{x.gpu_hours:.3f} GPU-h" if x.gpus else "CPU"


def _work(x: Loss) -> str:
    if x.lost_steps is None and x.lost_work is None:
        return "? (no checkpoint_pattern)"
    return f"{x.lost_steps if x.lost_steps is not None else '?'} steps/{format_span(x.lost_work)}"


def ledger_of(job: str, chain: str, now: float | None = None) -> ChainLedger | None:
    """The ledger of one chain, read from disk now: the line a status, a report and the
    chain's last notification end with."""
    import time

    from .records import scan

    runs = [r for r in scan(job).runs if r.chain == chain]
    return chain_ledger(runs, time.time() if now is None else now) if runs else None


def chain_line(job: str, chain: str | None) -> str:
    """`; <the chain's summary>`, to end a status, a report or a notification; "" when
    the records hold no such chain."""
    ledger = ledger_of(job, chain) if chain else None
    return f"; {ledger.summary()}" if ledger is not None else ""
