"""Where the ranks stand: each node's progress, the job's pace, which ranks stopped,
and the one line that says it.

Apart from the tracker (node/rules/steps.py, where NodeProgress and Pace are made), which
reads log lines into these values, because what is said about them has readers of its
own: the cluster's stream carries NodeProgress to the app, and a look's observations put
the line in a report and the app's header; none of them needs the log parsing. Pure, and
the clock is an argument, as in the tracker.
"""

from __future__ import annotations

from collections.abc import Mapping

from mntui.sessions.node.rules.steps import NodeProgress, Pace

# The values themselves are the tracker's (node/rules/steps.py), re-exported for poll's readers.
__all__ = ["NodeProgress", "Pace"]

MAX_WHO = 6  # rank spans and names named in one part of a description
STOP_AFTER = 10.0  # seconds without a step, at least, before a rank behind is stopped
STOP_STEPS = 5  # ... or this many of the job's step intervals, once its pace is known


def _who(nodes: list[str], ranks: Mapping[str, int]) -> str:
    """`rank 1`, `ranks 0-3, 7`, node names for nodes without a rank, at most MAX_WHO
    of them: a report line names the outliers, not all 64 nodes."""
    nums = sorted({ranks[n] for n in nodes if n in ranks})
    names = sorted(n for n in nodes if n not in ranks)
    runs: list[list[int]] = []
    for r in nums:
        if runs and runs[-1][1] == r - 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    parts = [(f"{a}" if a == b else f"{a}-{b}", b - a + 1) for a, b in runs]
    parts += [(n, 1) for n in names]
    shown = [text for text, _ in parts[:MAX_WHO]]
    if len(parts) > MAX_WHO:
        shown.append(f"{sum(count for _, count in parts[MAX_WHO:])} more")
    head = ("rank " if len(nums) == 1 else "ranks ") if nums else ""
    return head + ", ".join(shown)


def stop_after(pace: Pace | None) -> float:
    """Seconds without a step before a rank behind counts as stopped: STOP_AFTER, or
    STOP_STEPS of the job's step intervals once its pace is known, so a job at a minute
    a step is not called stopped between two of its steps."""
    return max(STOP_AFTER, STOP_STEPS * pace.step_interval) if pace is not None else STOP_AFTER


def stopped(p: NodeProgress, top: int, now: float, pace: Pace | None = None) -> bool:
    """Behind the furthest rank (`top`), and no step for `stop_after(pace)` seconds.

    A rank one step behind that still advances is not stopped: its line came a moment
    later, or its log was read a moment earlier, than the furthest rank's (issue 29: 32
    healthy ranks were called "stopped at step 93" for being one poll behind rank 0)."""
    if p.step is None or p.at is None or p.step >= top:
        return False
    return now - p.at >= stop_after(pace)


def _span(values: list[int], word: str = "") -> str:
    """`step 93`, `steps 93–94`; without a word: `93`, `93–94`."""
    lo, hi = min(values), max(values)
    nums = f"{lo}" if lo == hi else f"{lo}–{hi}"
    if not word:
        return nums
    return f"{word} {nums}" if lo == hi else f"{word}s {nums}"


def describe(
    progress: Mapping[str, NodeProgress],
    ranks: Mapping[str, int],
    now: float | None = None,
    pace: Pace | None = None,
) -> str:
    """One line for a report and the status header: the ranks that stopped first (see
    `stopped`), then how far the others got, e.g. "rank 1 stopped at step 4812; ranks 0,
    2-3 reached 4813–4815", or "ranks 0-31 at steps 93–94" while none has stopped. Each
    part names its ranks in spans, so 64 nodes still make one readable line. `now`:
    the clock of the `at`s; None: the latest advance seen on any node."""
    steps = {n: p.step for n, p in progress.items() if p.step is not None}
    if not steps:
        return ""
    top = max(steps.values())
    if now is None:
        now = max((p.at for p in progress.values() if p.at is not None), default=None)
    halted = {n for n in steps if now is not None and stopped(progress[n], top, now, pace)}
    moving = [n for n in steps if n not in halted]
    ahead = _span([steps[n] for n in moving], "" if halted else "step")
    parts = [f"{_who(moving, ranks)} {'reached' if halted else 'at'} {ahead}"]
    if halted:  # first: they are the news
        stop = _span([steps[n] for n in halted], "step")
        parts.insert(0, f"{_who(sorted(halted), ranks)} stopped at {stop}")
    silent = [n for n, p in progress.items() if p.step is None]
    if silent:
        parts.append(f"{_who(silent, ranks)}: no step seen")
    return "; ".join(parts)
