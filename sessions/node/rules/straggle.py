"""Which rank holds a synchronous job: the one that waits least while the others wait most.

Every rank runs the same step and meets the others in a collective; the slow one arrives
last and never waits, the others wait for it. So each rank's Python stack is sampled
and every sample counts as waiting or not (waits.py's `sample_of`, the one test of "this
stack waits in a collective"). Pure: the rule below, on each rank's count of samples and
waits. One rule for both watches: the manager's sampler (watch/sampler.py, its stacks
over SSH, a tally per rank over the last `WINDOW` samples) and the cluster's coordinator
(its sentinels' rounds, slowness.py, judged over time spans by waitline.py) name with
this module; the manager's watch/straggler.py and report/suspect.py re-export it.

The rule, from the bench's measurements (README, "Stragglers"): a clean job's ranks all
wait little and alike, whatever their share; a rank f times slower leaves every other
rank waiting 1 - 1/f of the time more than it does (the steps it takes longer, over the
job's step): 2x half the time, 1.5x a third, 1.1x a tenth. So the wait gap measures
what the rank costs the job, however much time the collectives themselves take. Named
when, over each rank's samples, every rank has at least MIN_SAMPLES samples and the low
ranks (those that wait GAP less than every other rank: 1.25x and more) all sit on one
node. A node slowed by a CPU quota is stopped wherever its quota runs out, inside the
collective it just entered too, where it "waits" with the others: the bench's node at
half a CPU "waited" 50 % of its samples, its partner 100 %; at 1/1.5 of a CPU 17 %
against 40 %. A node of several ranks made slow as a whole shows as all its ranks low:
the node is named by its lowest rank. And the difference must not be luck: with the low
ranks' samples and the others' pooled, a one-sided Fisher exact test (the chance that so
few waits fall on the low ranks if all ranks waited alike) must come out at most ALPHA.
On few samples the shares alone are noise: the bench's one false suspect in 8 clean
runs was 2 waits in 6 samples against 0 (p = 0.23). MIN_SAMPLES is a floor under the
test, not a substitute for it.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

WINDOW = 30  # samples per rank the rule looks at: a straggler that recovers is let go
MIN_SAMPLES = 10
ALPHA = 0.01
GAP = 0.20  # the least every other rank waits more than the low ones: 1.25x slower


@dataclass(frozen=True)
class RankWait:
    """One rank's samples so far: how many, and how many waited in a collective."""

    rank: int
    node: str
    samples: int
    waits: int

    @property
    def share(self) -> float:
        return self.waits / self.samples if self.samples else 0.0


@dataclass(frozen=True)
class Suspect:
    """The rank that holds the job, and the evidence: every rank's wait share."""

    rank: int
    node: str
    after: float  # seconds from the first sample to the naming
    named_at: float  # wall clock
    ranks: tuple[RankWait, ...]
    since: float | None = None  # wall clock: when its slowness began (waitline.onset)
    step: float | None = None  # seconds a step of the job since then (its log)
    step_before: float | None = None  # seconds a step before then

    @property
    def mine(self) -> RankWait:
        return next(r for r in self.ranks if r.rank == self.rank)

    @property
    def others(self) -> tuple[RankWait, ...]:
        return tuple(r for r in self.ranks if r.rank != self.rank)

    @property
    def line(self) -> str:
        """`status`'s line, the same whichever side named it."""
        shares = sorted(round(100 * r.share) for r in self.others)
        spread = f"{shares[0]}" if shares[0] == shares[-1] else f"{shares[0]}–{shares[-1]}"
        other = "the other" if len(shares) == 1 else "the others"
        step = ""
        if self.step is not None:
            was = f" (was {_secs(self.step_before)})" if self.step_before is not None else ""
            step = f", a step {_secs(self.step)}{was}"
        since = ""
        if self.since is not None:
            since = f", since {time.strftime('%H:%M:%S', time.localtime(self.since))}"
        return (
            f"rank {self.rank} ({self.node}) waits {round(100 * self.mine.share)} % of the "
            f"time, {other} {spread} %{step}{since}: it holds the job"
        )


def _secs(s: float) -> str:
    """A step time as people read it: 0.21 s, 1.4 s, 12 s."""
    return f"{s:.2f} s" if s < 1 else f"{s:.1f} s" if s < 10 else f"{s:.0f} s"


@dataclass(frozen=True)
class Sample:
    rank: int
    node: str
    waiting: bool


class Tally:
    """The last WINDOW samples of each rank (keyed by rank: a restarted job's ranks keep
    their numbers, and each is on one node)."""

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self.seen: dict[int, deque[bool]] = {}
        self.nodes: dict[int, str] = {}
        self.rounds = 0

    def add(self, samples: Iterable[Sample]) -> None:
        self.rounds += 1
        for s in samples:
            self.seen.setdefault(s.rank, deque(maxlen=self.window)).append(s.waiting)
            self.nodes[s.rank] = s.node

    def ranks(self) -> tuple[RankWait, ...]:
        return tuple(
            RankWait(r, self.nodes[r], len(q), sum(q)) for r, q in sorted(self.seen.items())
        )


def name_suspect(
    ranks: Sequence[RankWait],
    after: float,
    now: float,
    min_samples: int = MIN_SAMPLES,
    alpha: float = ALPHA,
) -> Suspect | None:
    """The suspect by the rule above, or None (too few samples, no clear odd one)."""
    if len(ranks) < 2 or any(r.samples < min_samples for r in ranks):
        return None
    low = behind(ranks)
    if not low or len({r.node for r in low}) != 1 or chance(low, ranks) > alpha:
        return None
    worst = min(low, key=lambda r: (r.share, r.rank))
    return Suspect(worst.rank, worst.node, after, now, tuple(ranks))


def behind(ranks: Sequence[RankWait]) -> list[RankWait]:
    """The fewest lowest ranks that wait GAP less than every other rank, or none."""
    by_share = sorted(ranks, key=lambda r: r.share)
    for k in range(1, len(by_share)):
        if by_share[k].share >= by_share[k - 1].share + GAP:
            return by_share[:k]
    return []


def chance(low: Sequence[RankWait], ranks: Sequence[RankWait]) -> float:
    """One-sided Fisher exact test: the probability that the low ranks' samples hold as
    few waits as they do (or fewer) if every sample were alike, the total waits fixed."""
    n = sum(r.samples for r in low)
    total = sum(r.samples for r in ranks)
    waits = sum(r.waits for r in ranks)
    mine = sum(r.waits for r in low)
    if not waits or n == total:
        return 1.0
    ways = _lcomb(total, waits)
    tail = sum(
        math.exp(_lcomb(n, k) + _lcomb(total - n, waits - k) - ways)
        for k in range(max(0, waits - (total - n)), min(mine, waits) + 1)
    )
    return min(1.0, tail)


def _lcomb(n: int, k: int) -> float:
    """log C(n, k) in floats: a job of thousands of ranks makes exact integers slow."""
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def finding_json(
    suspect: Suspect | None, ranks: Sequence[RankWait], rounds: int, malformed: int
) -> dict[str, Any]:
    """A finding as the manager keeps it (report/suspect.py's `straggler.json`, no GPU
    throttles: the sentinels sample no clocks): what the coordinator writes for `status`
    and `report` to read as a here-watched run's."""
    return {
        "suspect": None if suspect is None else asdict(suspect),
        "throttles": [],
        "ranks": [asdict(r) for r in ranks],
        "rounds": rounds,
        "malformed": malformed,
    }
