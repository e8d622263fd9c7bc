"""`restart.quarantine_after`: a node that caused N teardowns within a window is kept out.

Sisyphus' temporary exclude list, by rule: the supervisor asks after each failed
attempt whose cause was one node. Every job's records count (a node that broke three
different jobs this morning is as suspect as one that broke one job three times), and a
node already quarantined is left as it is: its first quarantine's reason and expiry stand.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mntui.sessions.config import QuarantineAfter
from mntui.sessions.node.placing import quarantine_why

from .blame import fold
from .quarantines import Quarantine, active_quarantines, quarantine_node, who_am_i
from .records import scan


@dataclass(frozen=True)
class PolicyQuarantine:
    quarantine: Quarantine
    caused: int  # teardowns within the window, this one included

    def describe(self) -> str:
        q = self.quarantine
        return f"{q.node} quarantined {q.describe()}"


def apply_policy(
    node: str, rule: QuarantineAfter, now: float | None = None
) -> PolicyQuarantine | None:
    """Quarantine `node` if the records say it caused `rule.count` failures within
    `rule.within`; None when it did not, or is quarantined already."""
    now = time.time() if now is None else now
    if node in active_quarantines(now):
        return None
    history = next((h for h in fold(scan(since=rule.within, now=now)) if h.node == node), None)
    caused = history.caused_within(rule.within, now) if history is not None else 0
    if caused < rule.count:
        return None
    q = quarantine_node(
        node, rule.hold, quarantine_why(caused, rule), who=f"policy, {who_am_i()}", now=now
    )
    return PolicyQuarantine(q, caused)
