"""Each node of a run the cluster watches as a NodeSnapshot, from its sentinel's snapshot.

Why: `status` of such a run reads the coordinator's board, not the nodes, yet its rows
must be what a polled run's are (snapshot_dict's keys, scripts read them). Its sentinel
sent what a poll reads (node/sentinel/nodesnap.py), the coordinator kept it (coord/nodes.json),
launch/board.py checked it (node/wire/nodewire.py's `check`: exactly our keys, each typed
and bounded, any other shape refused and counted); here each checked entry becomes the
very NodeSnapshot, without a second check of the same fields. A node without a
fresh entry (none yet, older than STALE on the main's clock, malformed) still gets one,
with `reachable` from its sentinel's connection, what the coordinator's status says
(its output's age, its exit code) and None or nothing for the rest. `rtt` is the round
trip of the board's read: what reaching its numbers cost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mntui.sessions.watch.nodeseen import STALE, Said, Seen
from mntui.sessions.watch.nodeseen import node_seen as seen_from

if TYPE_CHECKING:
    from mntui.sessions.launch import BoardView
    from mntui.sessions.poll.gpu import GpuReading

__all__ = ["STALE", "Seen", "malformed_line", "node_seen", "number"]


def number(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def node_seen(
    node: str, rank: int, row: dict[str, Any], view: BoardView, gpu: GpuReading | None
) -> tuple[Seen, bool]:
    """The node's snapshot, and whether its board entry was malformed (refused here):
    the rule the app's stream uses too (sessions/watch/nodeseen.py)."""
    code, procs = row.get("exit_code"), row.get("procs")
    said = Said(
        row.get("connected") is True,
        number(row.get("output_age")),
        code if type(code) is int else None,
        procs if type(procs) is int else None,
    )
    return seen_from(node, rank, view.nodes.get(node), view.now, said, view.rtt, gpu)


def malformed_line(view: BoardView, refused: int) -> list[str]:
    """What the board held that was no snapshot of ours: counted, never shown."""
    n = view.nodes_malformed + refused
    return [f"node snapshots on the coordinator's board: {n} malformed, ignored"] if n else []
