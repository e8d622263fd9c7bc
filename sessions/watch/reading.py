"""How this machine reads a run: through its coordinator, or by polling its nodes.

Why one place: a run is watched by the cluster (sentinels on its nodes, a coordinator on
its main: the record names the coordinator's port, launch/start.py) or by nothing at all
(`launch --no-watch`; a `watch.where: here` config too, since no watch runs on this
machine any more). Every verb and the app read a run the way this module says, and no
other module of the UI asks the record how it is watched: `status` and a cold status
read the coordinator's board, the app its stream, `kill` sends it a request and
`report` saves what it recorded; an unwatched run is polled directly, its nodes'
states shown as they are, and nothing judges it: no node is torn down, no report saved.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a cold status imports this before any record is loaded
    from mntui.sessions.runs import RunRecord


class Reading(StrEnum):
    CLUSTER = "cluster"  # its coordinator's board (status) and stream (the app)
    UNWATCHED = "unwatched"  # its nodes polled directly; nothing judges it


def reading(record: RunRecord) -> Reading:
    return Reading.CLUSTER if record.watch_port is not None and record.nodes else Reading.UNWATCHED


def by_cluster(record: RunRecord) -> bool:
    return reading(record) is Reading.CLUSTER


def raw_by_cluster(data: Mapping[str, object]) -> bool:
    """The same, of a run record read raw (prestart.py: before the records' module loads)."""
    nodes = data.get("nodes")
    return isinstance(nodes, list) and bool(nodes) and type(data.get("watch_port")) is int


def coordinator(record: RunRecord) -> str:
    """`g369:29501`: where the run's coordinator listens ("" for an unwatched run)."""
    if not by_cluster(record):
        return ""
    return f"{record.main.node}:{record.watch_port}"


UNWATCHED_LINE = (
    "unwatched (launched without the cluster's watch): nothing tears a failed or hung node "
    "down and no report is saved; `mntui kill` ends it"
)


def describe(record: RunRecord) -> str:
    """How a verb reached the run, for `-v` (said on stderr)."""
    if by_cluster(record):
        return f"through its coordinator on {coordinator(record)} (the cluster watches it)"
    return "direct connections to every node (an unwatched run)"
