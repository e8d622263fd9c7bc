"""The goodput ledger's values and their words: what one failed attempt cost (Loss),
a chain's ledger (ChainLedger), the line a chain ends with, and `mntui history`'s text.

Apart from ledger.py, which derives these values from the run records (records.scan's
views, blame's failures, the teardown notes), because the arithmetic of a loss and
the text of a ledger need only the values: they are tested and read without a record
on disk, and the words (a CPU job costs no GPU-hours, an unseen GPU count is "?", never
a guess) live in one place for the status, the report, the notification and history.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mntui.sessions.config import format_span
from mntui.sessions.node.rules.restarts import attempt_label

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
        return span(self.fault_at, self.teardown_at)

    @property
    def recovery(self) -> float | None:
        return span(self.teardown_at, self.resumed_at)

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

    def restarted(self, loss: Loss) -> bool:
        """An attempt after this loss's: without one, there was no recovery to time."""
        return loss.attempt + 1 < self.attempts

    def _said(self, name: str) -> str:
        value = self.part(name)
        if value is None and name == "recovery" and not any(map(self.restarted, self.losses)):
            return "none (no restart)"
        return format_span(value)

    def summary(self) -> str:
        """The seff-style line at the end of a chain."""
        good = f" ({self.training / self.wall:.0%} goodput)" if self.wall > 0 else ""
        head = f"{self.job} chain {self.chain}: {self.status} after {self.attempts} attempt(s)"
        head += f"{_on(self.gpus)}; wall {format_span(self.wall)}, "
        head += f"training {format_span(self.training)}{good}"
        if not self.losses:
            return head + "; no failures"
        names = (("detection", "detection"), ("recovery", "recovery"), ("work", "lost_work"))
        parts = ", ".join(f"{label} {self._said(name)}" for label, name in names)
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


def span(a: float | None, b: float | None) -> float | None:
    return max(0.0, b - a) if a is not None and b is not None else None


def format_ledgers(items: Iterable[ChainLedger]) -> str:
    """The text of `mntui history`: each chain, then the sum when there are several."""
    items = list(items)
    out: list[str] = []
    for c in items:
        out.append(c.summary())
        for x in c.losses:
            out.append(
                f"  {attempt_label(x.attempt)} ({x.run_id}): {x.node or '?'} {x.kind}; "
                f"detection {format_span(x.detection)}, recovery {_recovery(c, x)}, "
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


def _recovery(chain: ChainLedger, loss: Loss) -> str:
    if loss.recovery is None and not chain.restarted(loss):
        return "none (no restart)"
    return format_span(loss.recovery)
