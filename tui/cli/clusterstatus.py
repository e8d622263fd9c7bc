"""`status` of a run the cluster watches: one connection to the main node, no poll of
the others.

Why: the coordinator on the main already knows every node's state from its sentinels
(each second); asking each node again over SSH is what made `status` cost N round
trips. Reading the coordinator's board is one round trip whatever N is. When the board
cannot be read (the main is unreachable, the coordinator never wrote one), `status`
polls the nodes directly as before: a status never depends on the new parts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mntui.sessions.errors import ExitCode
from mntui.sessions.poll import NodeState, Verdict, snapshot_dict
from mntui.sessions.runs import NodeRecord, RunRecord
from mntui.sessions.termsafe import one_line
from mntui.sessions.watch import (
    away_lines,
    chain_lines,
    coordinator_done,
    decision_lines,
    fresh_steps,
    missed_lines,
    straggler_json,
    straggler_lines,
    sync,
    watch_line,
)
from mntui.sessions.watch.mirror import read_main
from mntui.sessions.watch.reading import Reading

from .clustergpus import NO_READING, NodeGpus, malformed_line, node_gpus
from .clusternodes import Seen, node_seen, number
from .clusternodes import malformed_line as snapshots_line
from .output import json_text
from .runheader import status_header

if TYPE_CHECKING:
    from mntui.sessions.config import JobConfig
    from mntui.sessions.launch import BoardView

Say = Callable[..., None]


def cluster_lines(record: RunRecord, view: BoardView | None) -> tuple[RunRecord, list[str]]:
    """Who watches, what happened since this machine last looked, what was decided; what
    the coordinator did is written into the records first (its restarts too), and the
    chain's latest record comes back."""
    record = sync(record, view)
    lines = [watch_line(record, view), *away_lines(record, view), *chain_lines(view)]
    return record, lines + decision_lines(view, record.run_id) + missed_lines(record)


def _verdict(d: dict[str, Any]) -> Verdict:
    """The coordinator's verdict; a node it has not judged yet (its sentinel's first
    word after a start or a restart) is starting, not a problem."""
    if d.get("state") is None:
        return Verdict(NodeState.STARTING, one_line(str(d.get("why") or "not judged yet")))
    try:
        state = NodeState(d.get("state"))
    except ValueError:
        state = NodeState.UNREACHABLE
    return Verdict(state, one_line(str(d.get("why") or ""))[:200])


@dataclass(frozen=True)
class Row:
    """One node: `status --json`'s row, and what the table's cells are made of."""

    data: dict[str, Any]
    seen: Seen
    verdict: Verdict
    gpus: NodeGpus
    bad: bool  # its board entry was refused


def _row(n: NodeRecord, d: dict[str, Any], view: BoardView, gpus: NodeGpus) -> Row:
    """A polled run's row (snapshot_dict's keys, from the sentinel's snapshot) and the
    cluster's own: who reports, its steps, what the coordinator counts."""
    v = _verdict(d)
    seen, bad = node_seen(n.node, n.rank, d, view, gpus.reading)
    data = snapshot_dict(seen.snap, v.state.value, v.why)
    data.update(
        connected=d.get("connected") is True,
        step=d.get("step") if type(d.get("step")) is int else None,
        steps_per_second=number(d.get("rate")),
        # the coordinator's count, each second (`procs`: the sentinel's snapshot's)
        live_procs=d.get("procs") if type(d.get("procs")) is int else None,
        snapshot_age=None if seen.age is None else round(seen.age, 1),
    )
    return Row(data, seen, v, gpus, bad)


def _cells(n: NodeRecord, r: Row) -> dict[str, str]:
    """A polled run's cells (loaded for a table only: a cold `--json` needs none), and
    who reports."""
    from mntui.sessions.poll import NodeProgress

    from .statusrows import cells_of

    d = r.data
    p = NodeProgress(n.node, d["step"], d["steps_per_second"], None)
    cells = cells_of(n.node, n.rank, r.seen.snap, r.verdict, p)
    if r.gpus is NO_READING:  # none fresh: not "no GPU"
        cells["GPUS"] = "-"
    if r.seen.age is None:  # no snapshot: the coordinator's count, if it has one
        cells["PROCS"] = "-" if d["live_procs"] is None else str(d["live_procs"])
    cells["SENTINEL"] = "connected" if d["connected"] else "gone"
    cells["DETAIL"] = r.verdict.why
    return cells


def _exit(rows: list[Row]) -> ExitCode:
    states = {NodeState(r.data["state"]) for r in rows}
    if any(s.is_problem for s in states):
        return ExitCode.FAILED
    if states <= {NodeState.NOT_RUNNING, NodeState.FINISHED} and NodeState.FINISHED not in states:
        return ExitCode.NOT_RUNNING
    return ExitCode.OK


def show(
    record: RunRecord, view: BoardView, as_json: bool, say: Say, indent: int | None, restarts: int
) -> ExitCode:
    record, lines = cluster_lines(record, view)
    lines += straggler_lines(record)  # the coordinator's straggler: a here-watched run's line
    gpus = node_gpus(view, [n.node for n in record.nodes])
    nodes = (view.status or {}).get("nodes")
    nodes = nodes if isinstance(nodes, dict) else {}
    rows = []
    for n in record.nodes:
        d = nodes.get(n.node)
        d = d if isinstance(d, dict) else {"state": None, "why": "not on the coordinator's board"}
        rows.append(_row(n, d, view, gpus.get(n.node, NO_READING)))
    lines += malformed_line(view) + snapshots_line(view, sum(r.bad for r in rows))
    code = _exit(rows)
    if as_json:
        data = {
            "job": record.job,
            "run_id": record.run_id,
            "status": record.status.value,
            "attempt": record.attempt,
            "chain": record.chain,
            "cause": record.cause,
            "killed_nodes": record.killed_nodes,
            "exit_code": int(code),
            "via": "coordinator",
            "watchdog": lines[0],
            "watch": Reading.CLUSTER.value,  # watch/reading.py: its coordinator watches
            "cluster": lines[1:],
            "straggler": straggler_json(record),
            "nodes": [r.data for r in rows],
        }
        say(json_text(data, indent))
    else:
        from mntui.sessions.history import chain_line

        from .statusrows import HEAD, aligned, terminal_width

        cells = [_cells(n, r) for n, r in zip(record.nodes, rows, strict=True)]
        table = aligned((*HEAD, "SENTINEL", "DETAIL"), cells, terminal_width())
        # the chain's seff-style line, as a here-watched run's status has it, from the
        # steps the coordinator clocked (synced into the records by cluster_lines)
        line = chain_line(record.job, record.chain, fresh_steps(record, view))
        chain = [line[2:]] if line else []
        head = status_header(record, "", restarts, learnt_threshold(view))
        say("\n".join([head, *table, *chain, *lines]))
    return code


def learnt_threshold(view: BoardView) -> str | None:
    """The stall threshold the coordinator learnt from the job's steps (`stall_after:
    auto`: node/coord/coordinator.py journals each move of it), as the header says it."""
    for e in reversed(view.journal):
        data = e.get("data") if e.get("kind") == "stall-threshold" else None
        seconds = number(data.get("seconds")) if isinstance(data, dict) else None
        if seconds is not None:
            return f"{seconds:.0f} s (auto: learnt by the coordinator from the job's steps)"
    return None


def status_from_cluster(
    cfg: JobConfig, record: RunRecord, as_json: bool, watch: bool, say: Say
) -> tuple[ExitCode | None, RunRecord]:
    """(None, the chain's latest record) when the nodes themselves must be asked: the
    main's board cannot be read, or its coordinator has ended (what it did is written
    into the records first, so the caller shows the chain's latest run)."""
    from dataclasses import replace

    from mntui.sessions.ssh import Cluster

    rec_main = record.main  # the record, not the config, says where the run is
    main = [replace(n, host=rec_main.host) for n in cfg.nodes if n.name == rec_main.node]
    if not main:
        return None, record
    with Cluster(main, cfg.ssh) as cluster:
        while True:
            view = read_main(record, cluster)
            code = board_status(record, view, as_json, say, None if watch else 2, cfg.restart.max)
            if code is None:  # ended, ending or gone: the nodes themselves say what is left
                return None, sync(record, view)
            if not watch:
                return code, record
            time.sleep(cfg.watch.interval)


def board_status(
    record: RunRecord,
    view: BoardView | None,
    as_json: bool,
    say: Say,
    indent: int | None,
    restarts: int,
) -> ExitCode | None:
    """The run's status from its coordinator's board while the coordinator is there and
    watching (the one rule both a cold status, quickstatus.py, and this module's own
    loop follow); None when the board was not read, is stale, or its chain has ended."""
    if view is None or not view.alive or not view.fresh or coordinator_done(view):
        return None
    return show(record, view, as_json, say, indent, restarts)
