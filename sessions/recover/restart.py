"""Whether, when and where to bring a failed job back: pure decisions (whether and
when are node/restarts.py's, which the coordinator on the cluster runs too).

A restart turns "woke up to a dead job" into "woke up to a job that lost 5 minutes",
but a job that can never work must not be relaunched forever: the policy restarts
only for the causes and exit codes it is given (never a clean exit, never by default
the codes that mean the command or config is wrong), backs off exponentially, gives
up after `max` attempts in a row, and forgets old failures once an attempt has made
progress for `reset_after` seconds. Where the next attempt runs (a repeat culprit or a
quarantined node swapped for a spare that fits) is node/placing.py's rule, the one the
coordinator runs on the cluster: here it is only given this machine's inputs.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from mntui.sessions.config import JobConfig
from mntui.sessions.node.placing import Placement, place
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
    "laid_out",
    "place_here",
    "repeat_culprit",
]


def place_here(
    cfg: JobConfig, history: Sequence[AttemptEnd], held: Collection[str]
) -> tuple[JobConfig, Placement]:
    """placing.place for a chain this machine watches: `cfg`'s nodes by rank, its spares
    in the config's order, `held` (this machine's quarantines) used no more. Every spare
    counts as ready (no sentinel waits on one here: a spare that does not answer fails
    its launch, an attempt ended like any other), and the main may move, as only this
    machine can move it. The next attempt's config, with what was swapped."""
    layout = [n.name for n in sorted(cfg.nodes, key=lambda n: n.rank)]
    spares = [s.name for s in cfg.spares]
    nprocs = {n.name: cfg.nproc(n) for n in (*cfg.nodes, *cfg.spares)}
    p = place(layout, history, held, spares, spares, nprocs, here=True)
    return laid_out(cfg, p.layout), p


def laid_out(cfg: JobConfig, layout: Sequence[str]) -> JobConfig:
    """`cfg` on `layout` (node names by rank, the main first, from its nodes and spares):
    a spare takes the rank it is given, and a main that moved takes the master with it."""
    known = {n.name: n for n in (*cfg.spares, *cfg.nodes)}
    nodes = tuple(replace(known[name], rank=r) for r, name in enumerate(layout))
    master = cfg.master_addr if layout[0] == cfg.main else None
    return replace(cfg, nodes=nodes, main=layout[0], master_addr=master)
