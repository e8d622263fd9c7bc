"""The straggler over time: each rank's wait samples with the moment each was taken, and
the rule that names the rank holding the job as soon as the evidence suffices.

Why over time, not over the last N samples (straggle.Tally): a rank that turns slow
mid-run must be named from its onset, not once it has pushed minutes of clean samples
out of a window; and a rank slow from the start must be named once enough samples say
so, not after a fixed count. So the rule is judged on the spans that end at the latest
moment every rank has been sampled up to, the shortest first (SPANS): the first span
on which straggle's one rule (`name_suspect`: the shares, one node, a Fisher test, here
at SPAN_ALPHA: several spans are tried after every round) holds, on which the others
surely wait BEYOND more than the rank (`beyond`: a rank that logs more makes them wait
a little, every step), and which is steady, names the rank. Steady: in each of PARTS
parts of the span the low ranks wait at least MARGIN less than the rest, pooled
(a rank slower step after step does in every part; a burst of work does not), and the
job did not stop in the span (`stopped`): a data loader that stalls once stops every
rank's steps for seconds, which the job's log shows; a slow rank only slows them.
Without steps in the log the waits alone judge: a stall of about half the shortest span
or more may then be named (tests/unit/test_straggler_timeline.py's model).

The onset is where the rank's deficit began: the start of the run of bins (BIN seconds)
whose wait gap (the other ranks' share minus the low ones') sums highest above GAP / 2, a
CUSUM change point. Pure, the clock an argument: the coordinator (slowness.py) feeds it
the sentinels' rounds and the job's steps, and judges after each round.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import replace

from .straggle import GAP, RankWait, Suspect, behind, name_suspect

HISTORY = 150.0  # seconds of samples kept per rank
SPANS = (15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0)  # seconds the rule looks back
PARTS = 3  # the span's parts a straggler must show in, each
MIN_PART = 3  # samples a rank has in each part, at least
MARGIN = 0.20  # in each part the low ranks wait this much less than the rest
SPAN_ALPHA = 0.001  # the Fisher test's bar: several spans are tried after every round
STALE = 25.0  # seconds: a rank sampled no later than this before the newest is left out
BIN = 2.5  # seconds: the onset's resolution
SHOWN = 30.0  # seconds of samples the finding shows while nobody is named
BEYOND = 0.12  # the least the other ranks must wait more than the low ones
BEYOND_Z = 3.09  # how sure of it (one-sided, 0.1 %)
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
        if (
            found is not None
            and beyond(found) >= BEYOND_Z
            and steady(line, found, start, end, steps)
        ):
            return replace(found, since=wall - (now - onset(line, found, end)))
    return None


def split(s: Suspect) -> tuple[list[int], list[int]]:
    """The suspect's low ranks (its node's that wait GAP less than every other rank: one
    slow GPU of eight, or a whole node) and the rest, by rank."""
    low = {r.rank for r in behind(s.ranks)} or {s.rank}
    return sorted(low), sorted(r.rank for r in s.ranks if r.rank not in low)


def beyond(s: Suspect) -> float:
    """How sure it is that the other ranks wait BEYOND more than the low ones (pooled; a
    z score): a rank that works a little more every step (it logs more) makes the others
    wait a little, every step, and the Fisher test alone calls that sure on enough
    samples; a straggler makes them wait a lot."""
    low, rest = split(s)
    by = {r.rank: r for r in s.ranks}
    n1, n2 = sum(by[r].samples for r in low), sum(by[r].samples for r in rest)
    if not n1 or not n2:
        return 0.0
    p1, p2 = sum(by[r].waits for r in low) / n1, sum(by[r].waits for r in rest) / n2
    spread = math.sqrt(max(p1 * (1 - p1), 0.25 / n1) / n1 + max(p2 * (1 - p2), 0.25 / n2) / n2)
    return (p2 - p1 - BEYOND) / spread


def steady(
    line: Timeline, s: Suspect, start: float, end: float, steps: Sequence[tuple[float, int]]
) -> bool:
    """The job did not stop within [start, end) (`stopped`), and in each of its PARTS
    parts the low ranks wait at least MARGIN less than the rest (each pooled, MIN_PART
    samples a rank there at least)."""
    if stopped(steps, start, end):
        return False
    low, rest = split(s)
    width = (end - start) / PARTS
    for k in range(PARTS):
        a, b = start + k * width, start + (k + 1) * width
        if any(line.count(r, a, b)[0] < MIN_PART for r in (*low, *rest)):
            return False
        if _pooled(line, low, a, b) > _pooled(line, rest, a, b) - MARGIN + 1e-9:
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
    whose gaps (the other ranks' pooled wait share minus the low ones') sum
    highest above GAP / 2."""
    mine, others = split(s)
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
