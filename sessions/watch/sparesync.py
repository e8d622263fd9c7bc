"""What the cluster's restarts did with nodes, written here on this machine's next
contact: the nodes each attempt ran on (a spare swapped in), and the nodes the chain
quarantined.

Why: `status`, `kill`, `report` and `history` take a run's nodes from its record, so
the record of an attempt the coordinator started on a spare must name the spare, at
the host the launch noted for it (the coordinator knows node names only). And a node
the coordinator stopped using by `restart.quarantine_after` is kept out of the next
launch from here too: once (a quarantine the user released is not written again at
the next contact).
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial
from typing import Any

from mntui.sessions.jsonshape import number
from mntui.sessions.launch.sparenote import spares_of
from mntui.sessions.runs import NodeRecord, RunRecord
from mntui.sessions.termsafe import one_line

SYNCED = "cluster-quarantine"  # the first record's note of a quarantine written here


def attempt_nodes(first: RunRecord, names: object) -> list[NodeRecord]:
    """The nodes an attempt ran on, as chain.json names them by rank; the first
    attempt's nodes for an entry without them, or with a node this launch never had."""
    own = {n.node: n for n in first.nodes}
    if not isinstance(names, list) or len(names) != len(first.nodes):
        return list(first.nodes)
    known = {**spares_of(first), **own}
    if not all(isinstance(n, str) and n in known for n in names) or len(set(names)) != len(names):
        return list(first.nodes)
    return [replace(known[n], rank=rank) for rank, n in enumerate(names)]


def sync_quarantines(first: RunRecord, chain: dict[str, Any]) -> list[str]:
    """The chain's quarantines (chain.json `quarantined`) into this machine's, each
    once; the nodes written."""
    q = chain.get("quarantined")
    if not isinstance(q, dict) or not q:
        return []
    # here, not at the top: a cold `status` (quickstatus.py) loads no config module,
    # and the history's quarantine list needs one; only a chain that quarantined does
    from mntui.sessions.history import active_quarantines, quarantine_node

    done = {h.get("node") for h in first.history if h.get("what") == SYNCED}
    known = {n.node for n in first.nodes} | set(spares_of(first))
    held, now, wrote = active_quarantines(), time.time(), []
    main = first.main.node if first.nodes else "the main"
    for node, e in q.items():
        if node not in known or node in done or not isinstance(e, dict):
            continue
        at, until = number(e.get("at")), number(e.get("until"))
        if at is None or until is None or until <= now or until < at:
            continue
        if node not in held:
            why = one_line(str(e.get("why") or "restart.quarantine_after"))[:200]
            quarantine_node(node, until - at, why, who=f"policy, coordinator on {main}", now=at)
        first.update(partial(_noted, node=node, until=until))
        wrote.append(node)
    return wrote


def _noted(r: RunRecord, *, node: str, until: float) -> None:
    r.note(SYNCED, node=node, until=until)
