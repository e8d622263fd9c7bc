"""Each node of a run the cluster watches as a NodeSnapshot, from its sentinel's snapshot.

Why: `status` of such a run reads the coordinator's board, not the nodes, yet its rows
must be what a polled run's are (snapshot_dict's keys, scripts read them). Its sentinel
sent what a poll reads (node/nodesnap.py), the coordinator kept it (coord/nodes.json),
launch/board.py checked it (node/nodewire.py's `check`: exactly our keys, each typed
and bounded, any other shape refused and counted); here each checked entry becomes the
very NodeSnapshot (not through sessions/wire.py's decoder: it would load the socket
module into a cold status for a second check of the same fields). A node without a
fresh entry (none yet, older than STALE on the main's clock, malformed) still gets one,
with `reachable` from its sentinel's connection, what the coordinator's status says
(its output's age, its exit code) and None or nothing for the rest. `rtt` is the round
trip of the board's read: what reaching its numbers cost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from mntui.sessions.poll.snapshot import JobProc, NodeSnapshot

if TYPE_CHECKING:
    from mntui.sessions.launch import BoardView
    from mntui.sessions.poll.gpu import GpuReading

STALE = 15.0  # seconds: a sentinel sends its snapshot every 2 s it changes, every 10 at most


@dataclass(frozen=True)
class Seen:
    snap: NodeSnapshot
    age: float | None  # seconds of its sentinel's snapshot on the main's clock; None: none


def number(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def node_seen(
    node: str, rank: int, row: dict[str, Any], view: BoardView, gpu: GpuReading | None
) -> tuple[Seen, bool]:
    """The node's snapshot, and whether its board entry was malformed (refused here)."""
    reachable = row.get("connected") is True
    now = time.time()
    entry = view.nodes.get(node)
    age = None if entry is None or view.now is None else max(0.0, view.now - entry["at"])
    base: dict[str, Any] = {
        "node": node,
        "rank": rank,
        "at": now - (age or 0.0),
        "reachable": reachable,
        "rtt": view.rtt if reachable else None,
    }
    snap, bad = None, False
    if entry is not None and age is not None and age <= STALE:
        try:
            snap = _snapshot(base, entry)
        except (TypeError, ValueError):  # a shape nodewire.check let by: refused whole
            bad = True
    if snap is None:
        why = "no fresh snapshot from its sentinel" if reachable else "its sentinel is gone"
        snap, age = NodeSnapshot(**base, error=why), None
    # the coordinator's status is written every second from the latest sample: fresher
    out_age, code = number(row.get("output_age")), row.get("exit_code")
    snap = replace(
        snap,
        gpu=gpu,
        output_age=out_age if out_age is not None else snap.output_age,
        exit_code=code if type(code) is int else snap.exit_code,
    )
    return Seen(snap, age), bad


def _snapshot(base: dict[str, Any], entry: dict[str, Any]) -> NodeSnapshot:
    """A checked entry (nodewire.check: its keys are exactly these) as a NodeSnapshot."""
    e = {k: v for k, v in entry.items() if k not in ("procs", "ports", "load", "at")}
    procs = tuple(JobProc(**p) for p in entry["procs"])
    load = entry["load"]
    load = None if load is None else (float(load[0]), float(load[1]), float(load[2]))
    return NodeSnapshot(**base, **e, procs=procs, ports=tuple(entry["ports"]), load=load)


def malformed_line(view: BoardView, refused: int) -> list[str]:
    """What the board held that was no snapshot of ours: counted, never shown."""
    n = view.nodes_malformed + refused
    return [f"node snapshots on the coordinator's board: {n} malformed, ignored"] if n else []
