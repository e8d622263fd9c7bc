"""Whether, when and where to bring a failed job back: pure decisions (whether and
when are node/restarts.py's, which the coordinator on the cluster runs too).

A restart turns "woke up to a dead job" into "woke up to a job that lost 5 minutes",
but a job that can never work must not be relaunched forever: the policy restarts
only for the causes and exit codes it is given (never a clean exit, never by default
the codes that mean the command or config is wrong), backs off exponentially, gives
up after `max` attempts in a row, and forgets old failures once an attempt has made
progress for `reset_after` seconds. A node that caused two teardowns in a row is
swapped for a spare, keeping ranks contiguous.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mntui.sessions.config import JobConfig, NodeSpec
from mntui.sessions.node.restarts import (
    AttemptEnd,
    Decision,
    counted_failures,
    decide,
    ends_from,
    repeat_culprit,
)

__all__ = [
    "AttemptEnd",
    "Decision",
    "counted_failures",
    "decide",
    "ends_from",
    "repeat_culprit",
    "swap_in_spare",
]


def swap_in_spare(
    cfg: JobConfig, spares: Sequence[NodeSpec], out: str
) -> tuple[JobConfig, NodeSpec] | None:
    """`cfg` with node `out` replaced by the first spare not already in use; ranks stay
    contiguous (the spare takes the culprit's rank), and if the culprit was the main
    the spare becomes the main, so master_addr follows it."""
    used = {n.name for n in cfg.nodes}
    spare = next((s for s in spares if s.name not in used), None)
    if spare is None or out not in used:
        return None
    nodes = tuple(replace(spare, rank=n.rank) if n.name == out else n for n in cfg.nodes)
    main = spare.name if cfg.main == out else cfg.main
    master = None if cfg.main == out else cfg.master_addr
    return replace(cfg, nodes=nodes, main=main, master_addr=master), spare
