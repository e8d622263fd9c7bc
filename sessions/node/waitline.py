"""The straggler over time: each rank's wait samples with the moment each was taken, and
the rule that names the rank holding the job as soon as the evidence suffices.

Why over time, not over the last N samples (straggle.Tally): a rank that turns slow
mid-run must be named from its onset, not once it has pushed minutes of clean samples
out of a window; and a rank slow from the start must be named once enough samples say
so, not after a fixed count. So the rule is judged on the spans that end at the latest
moment every rank has been sampled up to, the shortest first (SPANS): the first span
on which straggle's one rule (`name_suspect`: the shares, one node, a Fisher test, here
at SPAN_ALPHA) holds *and* which is steady names the rank. Steady: in each third of
the span the rank waits at least MARGIN less than every rank of another node. A data
loader that stalls once, or a rank that logs a burst, makes one stretch look like a
straggler; a rank that is slower step after step does in every third. A stall of about
a third of the shortest span or less is never named (measured: bench/stragglers.py).

The onset is where the rank's deficit began: the start of the run of bins (BIN seconds)
whose wait gap (the other nodes' share minus the rank's) sums highest above GAP / 2, a
CUSUM change point. Pure, the clock an argument: the coordinator (slowness.py) feeds it
the sentinels' rounds and judges after each.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import replace

from .straggle import GAP, RankWait, Suspect, name_suspect

HISTORY = 150.0  # seconds of samples kept per rank
SPANS = (15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0)  # seconds the rule looks back
PARTS = 3  # the span's parts a straggler must show in, each
MIN_PART = 3  # samples a rank has in each part, at least
MARGIN = 0.20  # in each part the rank waits this much less than every other node's rank
SPAN_ALPHA = 0.001  # the Fisher test's bar: several spans are tried after every round
STALE = 25.0  # seconds: a rank sampled no later than this before the newest is left out
BIN = 2.5  # seconds: the onset's resolution
SHOWN = 30.0  # seconds of samples the finding shows while nobody is named
MIN_GAPS = 5  # rises of the job's step before its pace says anything
STOP_OF = 64  # the last rises of the job's step its usual pace is the median of
STOP_TIMES = 4.0  # x the usual time between two rises: the job stopped, not slowed
STOP_MIN = 2.0  # seconds without a rise, at least, for a stop


class Timeline:
    """Each rank's samples: when (the coordinator's monotonic clock) and whether it
    waited in a collective; the last HISTORY seconds."""

    def __init__(self, history: float = HISTORY) -> None:
        self.history = history
        self.times: dict[int, list[float]] = {}
        self.waits: dict[int, list[bool]] = {}
        self.nodes: dict[int, str] = {}
        self.rounds = 0
        self.first: float | None = None  # the first sample's time

    def add(self, rank: int, node: str, start: float, end: float, bits: str) -> None:
        """One round of a rank: `bits` ("1" waited, "0" worked, "-" no sample) taken
        evenly from `start` to `end`; samples no later than the rank's last are dropped."""
        if not bits or end < start:
            return
        step = (end - start) / len(bits)
        times = self.times.setdefault(rank, [])
        waits = self.waits.setdefault(rank, [])
        self.nodes[rank] = node
        for i, b in enumerate(bits):
            t = start + (i + 0.5) * step
            if b != "-" and (not times or t > times[-1]):
                times.append(t)
                waits.append(b == "1")
        if times and (self.first is None or times[0] < self.first):
            self.first = times[0]

    def prune(self, now: float) -> None:
        for rank, times in self.times.items():
            cut = bisect_left(times, now - self.history)
            if cut:
                del times[:cut], self.waits[rank][:cut]

    def live(self) -> list[int]:
        """The ranks sampled lately: a rank whose sentinel went quiet holds nobody up."""
        last = {r: t[-1] for r, t in self.times.items() if t}
        if not last:
            return []
        newest = max(last.values())
        return sorted(r for r, t in last.items() if t >= newest - STALE)

    def end(self, ranks: Sequence[int]) -> float | None:
        """The latest moment every one of `ranks` has been sampled up to."""
        return min((self.times[r][-1] for r in ranks), default=None)

    def count(self, rank: int, start: float, end: float) -> tuple[int, int]:
        """(samples, waits) of `rank` in [start, end)."""
        times = self.times.get(rank, [])
        a, b = bisect_left(times, start), bisect_left(times, end)
        return b - a, sum(self.waits[rank][a:b])

    def tally(self, ranks: Sequence[int], start: float, end: float) -> tuple[RankWait, ...]:
        return tuple(RankWait(r, self.nodes[r], *self.count(r, start, end)) for r in ranks)

    def shown(self) -> tuple[RankWait, ...]:
        """The evidence `status` shows while nobody is named: the last SHOWN seconds."""
        ranks = self.live()
        end = self.end(ranks)
        return () if end is None else self.tally(ranks, end - SHOWN, end + 1e-9)


def judge(
    line: Timeline, now: float, wall: float, steps: Sequence[tuple[float, int]] = ()
) -> Suspect | None:
    """The rank that holds the job, named on the shortest span that proves it, with
    `since` (wall clock) its onset; None while no span does. `now`: monotonic; `steps`:
    (time, the job's step) each time its step rose, read from its log (none: unknown)."""
    ranks = line.live()
    end = line.end(ranks)
    if len(ranks) < 2 or end is None or line.first is None:
        return None
    end += 1e-9  # the last sample is in
    oldest = min(line.times[r][0] for r in ranks)
    for span in SPANS:
        start = end - span
        if start < oldest - span / PARTS:
            break  # most of this span was never sampled: no longer one will be
        found = name_suspect(
            line.tally(ranks, start, end), now - line.first, wall, alpha=SPAN_ALPHA
        )
        if found is not None and steady(line, found, start, end, steps):
            return replace(found, since=wall - (now - onset(line, found, end)))
    return None


def steady(
    line: Timeline, s: Suspect, start: float, end: float, steps: Sequence[tuple[float, int]]
) -> bool:
    """In each of PARTS parts of [start, end) the suspect waits at least MARGIN less
    than every rank of another node, each rank sampled MIN_PART times there; and, when
    the job's log says its steps often enough (`regular`), the job stepped in each part:
    a rank that stalls once stops every rank's steps, a slow one only slows them."""
    if stopped(steps, start, end):
        return False
    others = [r.rank for r in s.ranks if r.node != s.node]
    width = (end - start) / PARTS
    for k in range(PARTS):
        a, b = start + k * width, start + (k + 1) * width
        mine = RankWait(s.rank, s.node, *line.count(s.rank, a, b))
        theirs = line.tally(others, a, b)
        if any(r.samples < MIN_PART for r in (mine, *theirs)):
            return False
        if mine.share > min(r.share for r in theirs) - MARGIN + 1e-9:
            return False
    return True


def stopped(steps: Sequence[tuple[float, int]], start: float, end: float) -> bool:
    """The job's log shows it stopped within [start, end): its step did not rise for
    longer than STOP_TIMES x its usual time between two rises (the median of the last
    ones), and at least STOP_MIN seconds. A job whose log shows too few steps: unknown,
    False."""
    times = [t for t, _ in steps[-STOP_OF:]]
    gaps = sorted(b - a for a, b in zip(times, times[1:]))
    if len(gaps) < MIN_GAPS:
        return False
    limit = max(STOP_MIN, STOP_TIMES * gaps[len(gaps) // 2])
    i = max(0, bisect_left(steps, (start,)) - 1)  # the last rise before the span too
    inside = [t for t, _ in steps[i:] if t < end] + [end]
    return any(min(b, end) - max(a, start) > limit for a, b in zip(inside, inside[1:]))


def onset(line: Timeline, s: Suspect, end: float) -> float:
    """When the suspect's deficit began: the start of the suffix of BIN-second bins
    whose gaps (the other nodes' pooled wait share minus the suspect node's) sum
    highest above GAP / 2."""
    mine = [r.rank for r in s.ranks if r.node == s.node]
    others = [r.rank for r in s.ranks if r.node != s.node]
    first = max(min(line.times[r.rank][0] for r in s.ranks), end - line.history)
    bins = max(1, int((end - first) // BIN))
    best, total, at = float("-inf"), 0.0, end - BIN
    for k in range(bins):  # newest first: the suffix grows backwards
        b = end - k * BIN
        a = b - BIN
        gap = _pooled(line, others, a, b) - _pooled(line, mine, a, b)
        total += gap - GAP / 2
        if total > best:
            best, at = total, a
    return at


def _pooled(line: Timeline, ranks: Sequence[int], a: float, b: float) -> float:
    n = w = 0
    for r in ranks:
        dn, dw = line.count(r, a, b)
        n, w = n + dn, w + dw
    return w / n if n else 0.0
