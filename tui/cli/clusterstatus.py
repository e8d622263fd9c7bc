"""`status` of a run the cluster watches: one connection to the main node, no poll of
the others.

Why: the coordinator on the main already knows every node's state from its sentinels
(each second); asking each node again over SSH is what made `status` cost N round
trips. Reading the coordinator's board is one round trip whatever N is. When the board
cannot be read (the main is unreachable, the coordinator never wrote one), `status`
polls the nodes directly as before: a status never depends on the new parts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mntui.sessions.errors import ExitCode
from mntui.sessions.poll import NodeState, Verdict
from mntui.sessions.runs import RunRecord
from mntui.sessions.termsafe import one_line
from mntui.sessions.watch import (
    adopt,
    away_lines,
    chain_lines,
    coordinator_done,
    decision_lines,
    watch_line,
)

from .runheader import status_header

if TYPE_CHECKING:
    from mntui.sessions.config import JobConfig
    from mntui.sessions.launch import BoardView
    from mntui.sessions.ssh import Cluster

Say = Callable[..., None]


def cluster_lines(record: RunRecord, view: BoardView | None) -> tuple[RunRecord, list[str]]:
    """Who watches, what happened since this machine last looked, what was decided; what
    the coordinator did is written into the records first (its restarts too), and the
    chain's latest record comes back."""
    record = adopt(record, view)
    lines = [watch_line(record, view), *away_lines(record, view), *chain_lines(view)]
    return record, lines + decision_lines(view, record.run_id)


def read_main_board(record: RunRecord, cluster: Cluster) -> BoardView | None:
    from mntui.sessions.launch import board_dir, read_board
    from mntui.sessions.results import NodeError

    main = record.nodes[0]
    try:
        view = read_board(cluster.nodes[main.node], board_dir(record))
    except (NodeError, KeyError):
        return None
    return view if view.status is not None else None


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


def _rows(record: RunRecord, view: BoardView) -> list[dict[str, Any]]:
    nodes = (view.status or {}).get("nodes")
    nodes = nodes if isinstance(nodes, dict) else {}
    rows = []
    for n in record.nodes:
        d = nodes.get(n.node)
        d = d if isinstance(d, dict) else {"state": None, "why": "not on the coordinator's board"}
        v = _verdict(d)
        rows.append(
            {
                "node": n.node,
                "rank": n.rank,
                "state": v.state.value,
                "why": v.why,
                "connected": d.get("connected") is True,
                "procs": d.get("procs") if type(d.get("procs")) is int else None,
                "output_age": _num(d.get("output_age")),
                "step": d.get("step") if type(d.get("step")) is int else None,
                "steps_per_second": _num(d.get("rate")),
            }
        )
    return rows


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _exit(rows: list[dict[str, Any]]) -> ExitCode:
    states = {NodeState(r["state"]) for r in rows}
    if any(s.is_problem for s in states):
        return ExitCode.FAILED
    if states <= {NodeState.NOT_RUNNING, NodeState.FINISHED} and NodeState.FINISHED not in states:
        return ExitCode.NOT_RUNNING
    return ExitCode.OK


def _table(record: RunRecord, rows: list[dict[str, Any]], lines: list[str], restarts: int) -> str:
    head = ("NODE", "RANK", "STATE", "PROCS", "OUTPUT", "STEP", "SENTINEL", "DETAIL")
    table = [head]
    for r in rows:
        age = r["output_age"]
        table.append(
            (
                r["node"],
                str(r["rank"]),
                r["state"],
                "-" if r["procs"] is None else str(r["procs"]),
                "-" if age is None else f"{age:.0f}s ago",
                "-" if r["step"] is None else str(r["step"]),
                "connected" if r["connected"] else "gone",
                r["why"],
            )
        )
    widths = [max(len(t[i]) for t in table) for i in range(len(head) - 1)]
    text = [
        "  ".join(c.ljust(w) for c, w in zip(t[:-1], widths, strict=False)) + "  " + t[-1]
        for t in table
    ]
    return "\n".join([status_header(record, "", restarts), *text, *lines])


def show(
    record: RunRecord, view: BoardView, as_json: bool, say: Say, indent: int | None, restarts: int
) -> ExitCode:
    record, lines = cluster_lines(record, view)
    rows = _rows(record, view)
    code = _exit(rows)
    if as_json:
        data = {
            "job": record.job,
            "run_id": record.run_id,
            "status": record.status.value,
            "attempt": record.attempt,
            "chain": record.chain,
            "cause": record.cause,
            "exit_code": int(code),
            "via": "coordinator",
            "watchdog": lines[0],
            "watched_from": "cluster",  # runheader.watched_from: its coordinator watches
            "cluster": lines[1:],
            "nodes": rows,
        }
        say(json.dumps(data, indent=indent))
    else:
        say(_table(record, rows, lines, restarts))
    return code


def status_from_cluster(
    cfg: JobConfig, record: RunRecord, as_json: bool, watch: bool, say: Say
) -> tuple[ExitCode | None, RunRecord]:
    """(None, the chain's latest record) when the nodes themselves must be asked: the
    main's board cannot be read, or its coordinator has ended (what it did is written
    into the records first, so the caller shows the chain's latest run)."""
    from dataclasses import replace

    from mntui.sessions.ssh import Cluster

    rec_main = record.nodes[0]  # the record, not the config, says where the run is
    main = [replace(n, host=rec_main.host) for n in cfg.nodes if n.name == rec_main.node]
    if not main:
        return None, record
    with Cluster(main, cfg.ssh) as cluster:
        while True:
            view = read_main_board(record, cluster)
            code = board_status(record, view, as_json, say, None if watch else 2, cfg.restart.max)
            if code is None:  # ended, ending or gone: the nodes themselves say what is left
                return None, adopt(record, view)
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
