"""A node slow by its steps: its step rate below `fraction` of the median for `after`
seconds (`watch.slow_fraction`, `watch.slow_after`).

Why its own module: the manager's progress tracker (steps.py, fed by its polls) and the
cluster's coordinator (fed the rates its sentinels read from their own logs) judge the
same episodes with this one rule. Pure, the clock an argument. Each slow episode is
reported once; a node that climbs back over the bar, or whose rate can no longer be
compared, is re-armed.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping


class SlowEpisodes:
    def __init__(self) -> None:
        self._below: dict[str, float] = {}  # node -> since when its rate is below the bar
        self._reported: set[str] = set()  # nodes already returned this episode

    def see(
        self, rates: Mapping[str, float | None], now: float, fraction: float, after: float
    ) -> list[str]:
        """The nodes newly found below `fraction` x the median rate for `after` seconds;
        `rates`: every node's rate now, None for one that has none (yet)."""
        known = {n: r for n, r in rates.items() if r is not None}
        if len(known) < 2:
            self._below.clear()
            self._reported.clear()
            return []
        bar = fraction * statistics.median(known.values())
        found: list[str] = []
        for node in rates:
            rate = known.get(node)
            if rate is None or rate >= bar:
                self._below.pop(node, None)
                self._reported.discard(node)
                continue
            since = self._below.setdefault(node, now)
            if now - since >= after and node not in self._reported:
                self._reported.add(node)
                found.append(node)
        return sorted(found)
