"""A node of a run the cluster watches as a NodeSnapshot, from its sentinel's snapshot on
the coordinator's board and what the coordinator's status says of it.

Why one rule here: `status` of such a run (tui/cli/clusternodes.py) and the app's stream
(feedparse.py) read the same board, and a pane must show what `status` prints; the app
cannot import the CLI, so the rule lives below both. Its sentinel sent what a poll reads
(node/sentinel/nodesnap.py), the coordinator kept it (coord/nodes.json), node/wire/nodewire.py's
`check` let it by (exactly our keys, each typed and bounded); here each such entry
becomes the very NodeSnapshot. A node without a fresh entry (none yet, older than STALE
on the main's clock, a shape the check let by and the snapshot refuses) still gets one,
`reachable` from its sentinel's connection, None or nothing for the rest. The status is
written every second from the latest sample, fresher than the snapshot (every 2 s): its
output age and exit code win, and when it counts no live process the snapshot's
processes (and their ports) are gone: a finished node shows `0 procs`, as a poll would.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from mntui.sessions.poll.snapshot import JobProc, NodeSnapshot

if TYPE_CHECKING:
    from mntui.sessions.poll.gpu import GpuReading

STALE = 15.0  # seconds: a sentinel sends its snapshot every 2 s it changes, every 10 at most


@dataclass(frozen=True)
class Seen:
    snap: NodeSnapshot
    age: float | None  # seconds of its sentinel's snapshot on the main's clock; None: none


@dataclass(frozen=True)
class Said:
    """What the coordinator's status row says of the node, typed by its reader."""

    connected: bool  # its sentinel's link is up
    output_age: float | None
    exit_code: int | None
    procs: int | None  # the job's live processes in the coordinator's latest sample


def node_seen(
    node: str,
    rank: int,
    entry: Mapping[str, Any] | None,
    now: float | None,
    said: Said,
    rtt: float | None = None,
    gpu: GpuReading | None = None,
) -> tuple[Seen, bool]:
    """The node's snapshot from its checked board `entry` read at the main's `now`, and
    whether the entry was refused (its caller counts it malformed). `rtt`: what
    reaching the board cost, shown for a reachable node."""
    age = None if entry is None or now is None else max(0.0, now - entry["at"])
    base: dict[str, Any] = {
        "node": node,
        "rank": rank,
        "at": time.time() - (age or 0.0),
        "reachable": said.connected,
        "rtt": rtt if said.connected else None,
    }
    snap, bad = None, False
    if entry is not None and age is not None and age <= STALE:
        try:
            snap = _snapshot(base, entry)
        except (TypeError, ValueError):  # a shape nodewire.check let by: refused whole
            bad = True
    if snap is None:
        why = "no fresh snapshot from its sentinel" if said.connected else "its sentinel is gone"
        snap, age = NodeSnapshot(**base, error=why), None
    if said.procs == 0 and snap.live_procs:
        snap = replace(snap, procs=(), ports=())
    snap = replace(
        snap,
        gpu=gpu,
        output_age=said.output_age if said.output_age is not None else snap.output_age,
        exit_code=said.exit_code if said.exit_code is not None else snap.exit_code,
    )
    return Seen(snap, age), bad


def _snapshot(base: dict[str, Any], entry: Mapping[str, Any]) -> NodeSnapshot:
    """A checked entry (nodewire.check: its keys are exactly these) as a NodeSnapshot."""
    e = {k: v for k, v in entry.items() if k not in ("procs", "ports", "load", "at")}
    procs = tuple(JobProc(**p) for p in entry["procs"])
    load = entry["load"]
    load = None if load is None else (float(load[0]), float(load[1]), float(load[2]))
    return NodeSnapshot(**base, **e, procs=procs, ports=tuple(entry["ports"]), load=load)
