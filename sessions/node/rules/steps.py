"""Training progress per node, read from its log: last step, steps per second, the
job's pace, stragglers.

A hang is caught by the watchdog (no output, frozen processes); a straggler is not: it
prints, just slower than its peers, and drags every collective down with it. Comparing
each node's rate with the median of all nodes names it. Everything here is pure and
takes the clock as an argument, so the window arithmetic is tested without sleeping.
It lives in the node package so that a sentinel reads its node's steps where the log
is written, and the coordinator learns `stall_after: auto` from the same pace as the
manager (poll/progress.py re-exports it).

Log lines are node data: a line is looked at through a 4,000-character cap, absurd
step numbers are skipped and counted, and nothing a node prints makes this raise.
"""

from __future__ import annotations

import re
import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from .slowrate import SlowEpisodes
from .termsafe import clean


@dataclass(frozen=True)
class NodeProgress:
    node: str
    step: int | None  # highest step seen; None: no line matched yet
    rate: float | None  # steps/s over the window; None: fewer than two steps seen
    at: float | None  # when the step last advanced (the `now` of that feed)


@dataclass(frozen=True)
class Pace:
    """How the job steps while it is healthy: what a learnt stall threshold is made of."""

    step_interval: float  # seconds a step: the median over nodes of time / steps advanced
    longest_gap: float  # the longest wait between two advances seen on any node
    gaps: int  # advances seen, over all nodes


# `step N`, `global_step=N`, `iter N`, `iteration N`, `Epoch N` (any case), N optionally
# after `:`, `=`, `#` or `[`. An epoch counts only when no step/iteration follows within
# 200 characters ("Epoch 3 step 120" is step 120). A fraction is not a step, and the word
# must be followed by the number: HF Trainer's `'epoch': 0.27` and "Total optimization
# steps = 1000" are not progress. Node lines are untrusted, so the pattern is written
# to cost linear time on any line: the epoch look-ahead is bounded, and a run of spaces
# can be split only one way (`\s*:?\s*` against 4,000 spaces backtracks for minutes).
_NUM = r"\s*(?:[:=#]\s*)?(?:\[\s*)?"
DEFAULT_PATTERN = (
    r"(?i)(?:\b(?:global[_ ]?)?step|\biter(?:ation)?"
    rf"|\bepoch(?={_NUM}[0-9])(?!.{{0,200}}?\b(?:(?:global[_ ]?)?step|iter(?:ation)?){_NUM}[0-9]))"
    rf"{_NUM}(?P<step>[0-9]{{1,15}})(?![0-9]|\.[0-9])"
)

MAX_LINE = 4000
MAX_STEP = 10**12


MIN_GAPS = 3  # advances a node must have made before its pace counts
MAX_GAPS = 64  # the last advances a node's pace is taken over


@dataclass
class _Series:
    # (time, step) each time the step advanced; the oldest one may predate the window,
    # so the step at the window's start is always known.
    samples: deque[tuple[float, int]] = field(default_factory=deque)
    first: float | None = None  # when the first step was seen
    advanced: bool = False  # seen two different steps: a rate means something
    # (seconds since the previous advance, steps advanced) of the last MAX_GAPS advances
    gaps: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=MAX_GAPS))


class ProgressTracker:
    """Feed it every node's new log lines on every poll, even when there are none:
    an empty feed is what lets a node's rate fall to 0 when it stops printing."""

    def __init__(self, pattern: re.Pattern[str], window: float = 30.0) -> None:
        if "step" not in pattern.groupindex:  # jobchecks.compile_pattern() says so to the user
            raise ValueError("the progress pattern has no named group `step`")
        self.pattern = pattern
        self.window = window
        self.skipped = 0  # matched lines whose step was unusable (absurd, not a number)
        self._series: dict[str, _Series] = {}
        self._clock: float | None = None
        self._slow = SlowEpisodes()  # the coordinator judges its sentinels' rates alike

    def feed(self, node: str, lines: Iterable[str], now: float, pending: str = "") -> bool:
        """True if the node's step advanced (or was first seen). `pending` is the line
        still being written (LineSplitter.pending): a progress bar redrawn with `\\r`
        never ends its line, and its step counts once the number is whole."""
        s = self._series.setdefault(node, _Series())
        self._clock = now if self._clock is None else max(self._clock, now)
        best: int | None = None
        for line in lines:
            step = self._step_of(line)
            if step is not None and (best is None or step > best):
                best = step
        step = self._step_of(pending, whole=False) if pending else None
        if step is not None and (best is None or step > best):
            best = step
        # Several local ranks share a node's log and print the same steps slightly out
        # of order: the node's step is the highest seen, so one late line is no setback.
        last = s.samples[-1] if s.samples else None
        if best is None or (last is not None and best <= last[1]):
            self._prune(s, now)
            return False
        if last is None:
            s.first = now
        else:
            s.advanced = True
            if now > last[0]:
                s.gaps.append((now - last[0], best - last[1]))
        if last is not None and last[0] >= now:
            s.samples[-1] = (last[0], best)
        else:
            s.samples.append((now, best))
        self._prune(s, now)
        return True

    def _step_of(self, line: str, whole: bool = True) -> int | None:
        # A progress bar rewrites itself with \r: its latest state is at the end. A line
        # not `whole` may end inside the number ("step 42" of "step 4200"): not a step yet.
        text = line[-MAX_LINE:] if "\r" in line else line[:MAX_LINE]
        for raw_segment in reversed(text.split("\r")):
            segment = clean(raw_segment)  # colours split a step from its number
            m = self.pattern.search(segment)
            if m is None:
                continue
            raw = m.group("step")
            if raw is None:
                continue
            if not whole and segment[m.end("step") :] in ("", "."):
                return None
            try:
                value = int(raw)
            except ValueError:
                self.skipped += 1
                return None
            if 0 <= value <= MAX_STEP:
                return value
            self.skipped += 1
            return None
        return None

    def _prune(self, s: _Series, now: float) -> None:
        start = now - self.window
        while len(s.samples) >= 2 and s.samples[1][0] <= start:
            s.samples.popleft()

    def _rate(self, s: _Series, now: float) -> float | None:
        if not s.advanced or s.first is None or not s.samples:
            return None
        span = min(self.window, now - s.first)
        if span <= 0:
            return None
        start = now - span
        base = s.samples[0][1]
        for t, step in s.samples:
            if t > start:
                break
            base = step
        return max(0.0, (s.samples[-1][1] - base) / span)

    def snapshot(self, now: float | None = None) -> dict[str, NodeProgress]:
        """Every node fed so far; rates as of `now` (default: the latest feed's time)."""
        when = now if now is not None else self._clock
        out: dict[str, NodeProgress] = {}
        for node, s in self._series.items():
            last = s.samples[-1] if s.samples else None
            out[node] = NodeProgress(
                node,
                step=last[1] if last else None,
                rate=self._rate(s, when) if when is not None else None,
                at=last[0] if last else None,
            )
        return out

    def pace(self) -> Pace | None:
        """The job's step interval and longest pause so far, once a node has advanced
        MIN_GAPS times; None before. A node's interval is its time over its steps (polls
        see steps in bunches: 1 step in one, 2 in the next); only finished gaps count,
        so a hang in progress never stretches the pace it is judged by."""
        per_node = [
            sum(g[0] for g in s.gaps) / sum(g[1] for g in s.gaps)
            for s in self._series.values()
            if len(s.gaps) >= MIN_GAPS
        ]
        if not per_node:
            return None
        gaps = [g for s in self._series.values() for g in s.gaps]
        return Pace(statistics.median(per_node), max(g[0] for g in gaps), len(gaps))

    def slow(self, now: float, fraction: float, after: float) -> list[str]:
        """Nodes newly found below `fraction` × the median rate for `after` seconds.

        Each slow episode is reported once; a node that climbs back over the bar (or
        whose rate can no longer be compared) is re-armed."""
        rates = {n: self._rate(s, now) for n, s in self._series.items()}
        return self._slow.see(rates, now, fraction, after)
