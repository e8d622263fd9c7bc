"""The chain's nodes in `coord/chain.json`: which nodes each attempt ran on, the spares
swapped in, and the nodes quarantined within the chain.

Why in chain.json: the record says where a run runs, not the config. The manager
writes each attempt's record from this file (watch/clusterchain.py), so `status`,
`kill`, `report` and `history` reach a swapped-in spare; a coordinator started again
mid-chain (resume.py) goes on with the same nodes and the same quarantines; and the
manager's history gets the quarantines at its next contact. Each attempt's entry has
`nodes` (the node of each rank, the main first); an attempt that ended with a restart
decided has `next_nodes`, the placement for the next one (placing.py), and `swapped`,
what was done; the chain has `quarantined`, each node's quarantine.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from mntui.sessions.node.rules.placing import (
    Failure,
    Placement,
    past_quarantine,
    place,
    quarantine_why,
)
from mntui.sessions.node.rules.restarts import AttemptEnd
from mntui.sessions.node.wire.watchcfg import WatchConfig

QUARANTINED = "quarantined"
LOST = "lost"  # the mains lost for good, each replaced by a successor (succession.py)


def layout_of(entry: object, cfg: WatchConfig, key: str = "nodes") -> tuple[str, ...] | None:
    """An attempt's nodes as its entry says, if they are a layout of this run: one node a
    rank, each the run's or a spare (a spare at rank 0 succeeded a lost main:
    succession.py)."""
    got = entry.get(key) if isinstance(entry, dict) else None
    if not isinstance(got, list) or len(got) != len(cfg.nodes) or len(set(got)) != len(got):
        return None
    if not all(isinstance(n, str) and n in cfg.members for n in got):
        return None
    return tuple(got)


def next_layout(entries: list[dict[str, Any]], cfg: WatchConfig) -> tuple[str, ...]:
    """The nodes of the attempt after the last of `entries`: its placement, else the
    nodes it ran on, else the run's own."""
    last = entries[-1] if entries else None
    return layout_of(last, cfg, "next_nodes") or layout_of(last, cfg) or cfg.nodes


def out_of(data: dict[str, Any]) -> set[str]:
    """The nodes this chain quarantined, or lost for good (a main a successor replaced:
    succession.py): used no more."""
    q, lost = data.get(QUARANTINED), data.get(LOST)
    out = {n for n in q if isinstance(n, str)} if isinstance(q, dict) else set()
    return out | ({n for n in lost if isinstance(n, str)} if isinstance(lost, list) else set())


def mend(data: dict[str, Any]) -> bool:
    """A `quarantined` that is not an object (a predecessor's file is read back, and a
    file is node data) taken as none, so the chain goes on instead of failing at each
    restart; True when it had to be (the caller counts it as malformed)."""
    if QUARANTINED in data and not isinstance(data[QUARANTINED], dict):
        data[QUARANTINED] = {}
        return True
    return False


def quarantine(data: dict[str, Any], cfg: WatchConfig, now: float) -> list[tuple[str, str]]:
    """`restart.quarantine_after` over the chain's ended attempts (`data`, chain.json's):
    each node newly past it is quarantined in `data` (until `now + hold`, for the
    manager's history); (node, one line) for each."""
    mend(data)
    rule = cfg.quarantine
    if rule is None:
        return []
    failures = []
    for e in data.get("attempts") or []:
        end = e.get("end") if isinstance(e, dict) else None
        at = _number(e.get("ended_at")) if isinstance(e, dict) else None
        culprit = end.get("culprit") if isinstance(end, dict) else None
        if isinstance(culprit, str) and culprit in cfg.members and at is not None:
            failures.append(Failure(culprit, at))
    held = data.setdefault(QUARANTINED, {})
    said: list[tuple[str, str]] = []
    for node, caused in sorted(past_quarantine(failures, rule, now).items()):
        if node in held:
            continue
        why = quarantine_why(caused, rule)
        held[node] = {"at": now, "until": now + rule.hold, "why": why, "caused": caused}
        said.append((node, f"{node} quarantined: {why}"))
    return said


def placement(
    data: dict[str, Any], cfg: WatchConfig, history: list[AttemptEnd], ready: Collection[str]
) -> Placement:
    """Where the next attempt runs, by placing.place, from the chain as `data` has it."""
    entries = [e for e in data.get("attempts") or [] if isinstance(e, dict)]
    now = layout_of(entries[-1], cfg) if entries else None
    nprocs = {n: cfg.nproc(n) or 1 for n in cfg.members}
    return place(now or cfg.nodes, history, out_of(data), cfg.spares, ready, nprocs)


def _number(v: object) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e12
    return float(v) if ok and isinstance(v, (int, float)) else None
