"""Which nodes the app marks slow: the slow-node rule, as a standing mark.

The coordinator reports a slow node once per episode (node/rules/slowrate.py); a view
needs the state instead, for as long as it lasts: a node whose step rate has stayed
below `fraction` × the median rate of all nodes for `after` seconds. Pure: the clock is
an argument, so the rule is tested without sleeping.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from mntui.sessions.poll import NodeProgress


class Pace:
    def __init__(self) -> None:
        self.below: dict[str, float] = {}  # node -> since when its rate is below the bar

    def slow(
        self, progress: Mapping[str, NodeProgress], now: float, fraction: float, after: float
    ) -> frozenset[str]:
        """Nodes slow now; a rate that cannot be compared (fewer than two nodes with one,
        or a median of 0: the whole job stopped) marks no one, and re-arms the clock."""
        rates = {n: p.rate for n, p in progress.items() if p.rate is not None}
        median = statistics.median(rates.values()) if len(rates) >= 2 else 0.0
        if median <= 0:
            self.below.clear()
            return frozenset()
        bar = fraction * median
        for node, rate in rates.items():
            if rate < bar:
                self.below.setdefault(node, now)
            else:
                self.below.pop(node, None)
        for node in set(self.below) - set(rates):
            del self.below[node]
        return frozenset(n for n, since in self.below.items() if now - since >= after)
