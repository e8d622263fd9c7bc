"""Headless views of a run as it goes: `mntui status` and `mntui watch`.

Text for a terminal or a pipe, never Textual: these run over a bare SSH session.
`status` asks the run's agent (its watchdog process, which holds every node's
connection) when one serves the run, and opens its own connections when none does or it
stops answering; the engine's heavier modules are imported only on the path that needs
them. `mntui watch` runs the watchdog in the foreground and prints what it sees and does.
`mntui logs` is tui/cli/logs_view.py's.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from mntui.sessions.agent import (
    AgentClient,
    AgentStatus,
    AgentUnavailable,
    Via,
    fetch_status,
    try_connect,
)
from mntui.sessions.config import JobConfig
from mntui.sessions.errors import ExitCode
from mntui.sessions.poll import NodeProgress, NodeSnapshot, NodeState, Verdict, snapshot_dict
from mntui.sessions.runs import RunRecord

from . import statusrows
from .output import clear_screen, json_text
from .runheader import orphan_line, status_header, unguarded_line, watched_from

if TYPE_CHECKING:
    from mntui.sessions.ssh import Cluster

STEP_BACK = 16 * 1024  # bytes of each log `status` reads to find the last step

Say = Callable[..., None]


def status_table(
    record: RunRecord,
    snaps: dict[str, NodeSnapshot],
    verdicts: dict[str, Verdict],
    progress: Mapping[str, NodeProgress] | None = None,
    summary: str = "",
    restarts: int = 0,
) -> str:
    rows = []
    for n in record.nodes:  # the cells a cluster-watched run's table shows too
        s, v, p = snaps[n.node], verdicts[n.node], (progress or {}).get(n.node)
        rows.append({**statusrows.cells_of(n.node, n.rank, s, v, p), "DETAIL": v.why})
    lines = statusrows.aligned((*statusrows.HEAD, "DETAIL"), rows)
    return status_header(record, summary, restarts) + "\n" + "\n".join(lines)


def overall_exit(verdicts: dict[str, Verdict]) -> ExitCode:
    """OK: healthy or finished; FAILED: a node has a problem; NOT_RUNNING: nothing runs."""
    states = {v.state for v in verdicts.values()}
    if any(s.is_problem for s in states):
        return ExitCode.FAILED
    if states <= {NodeState.NOT_RUNNING}:
        return ExitCode.NOT_RUNNING
    return ExitCode.OK


def status_json(
    record: RunRecord,
    snaps: dict[str, NodeSnapshot],
    verdicts: dict[str, Verdict],
    code: ExitCode,
    indent: int | None,
    progress: Mapping[str, NodeProgress] | None = None,
    via: str = "direct",
) -> str:
    nodes = []
    for n in record.nodes:
        d = snapshot_dict(snaps[n.node], verdicts[n.node].state.value, verdicts[n.node].why)
        p = (progress or {}).get(n.node)
        d["step"], d["steps_per_second"] = (p.step, p.rate) if p else (None, None)
        nodes.append(d)
    return json_text(
        {
            "job": record.job,
            "run_id": record.run_id,
            "status": record.status,
            "attempt": record.attempt,
            "chain": record.chain,
            "cause": record.cause,
            "killed_nodes": record.killed_nodes,
            "supervisor": orphan_line(record) or None,
            "watchdog": unguarded_line(record) or None,
            "watched_from": watched_from(record),  # "cluster" | "this machine" | None
            "exit_code": int(code),
            "via": via,
            "straggler": slow_json(record),
            "nodes": nodes,
        },
        indent=indent,
    )


def slow_lines(record: RunRecord) -> list[str]:
    """The straggler and throttled GPUs the run's watchdog found (report/suspect.py)."""
    from mntui.sessions.report import load_finding

    found = load_finding(record.dir)
    return found.lines if found is not None else []


def slow_json(record: RunRecord) -> dict[str, object] | None:
    from dataclasses import asdict

    from mntui.sessions.report import load_finding

    found = load_finding(record.dir)
    if found is None:
        return None
    return {**asdict(found), "lines": found.lines}


def _show_status(
    record: RunRecord,
    st: AgentStatus,
    as_json: bool,
    watch: bool,
    via: Via,
    say: Say,
    restarts: int = 0,
    cluster: list[str] | None = None,
) -> ExitCode:
    code = overall_exit(st.verdicts)
    if as_json:
        indent = None if watch else 2
        text = status_json(record, st.snaps, st.verdicts, code, indent, st.progress, via.name)
        if cluster is not None:  # the cluster's watch: who watches, what it decided
            data = json.loads(text)
            data["watchdog"], data["cluster"] = cluster[0], cluster[1:]
            text = json_text(data, indent)
        say(text)
    else:
        if watch and sys.stdout.isatty():
            clear_screen()  # say() writes no escape sequence
        say(status_table(record, st.snaps, st.verdicts, st.progress, st.summary, restarts))
        for line in slow_lines(record):  # the watchdog's sampler: who holds the job
            say(line)
        from mntui.sessions.history import chain_line

        if line := chain_line(record.job, record.chain):  # the chain's seff-style line
            say(line[2:])
        for line in cluster or []:
            say(line)
    return code


def _cluster_watch(cfg: JobConfig, record: RunRecord, cluster: Cluster) -> list[str] | None:
    """For a run the cluster watches, polled directly (its board was unreadable a
    moment ago, or its coordinator has ended): the coordinator's word if it can be read
    now, and the reports of the attempts that ended since the last look saved (the
    connections are open: watch/mirror.py); None for a run watched from here."""
    from mntui.sessions.watch import save_reports

    from .clusterstatus import cluster_lines, read_main_board

    if record.watch_port is None or not record.nodes:
        return None
    view = read_main_board(record, cluster)
    latest, lines = cluster_lines(record, view)
    save_reports(cfg, latest, view, cluster)
    return lines


def cmd_status(
    cfg: JobConfig, record: RunRecord, as_json: bool, watch: bool, say: Say, verbose: bool = False
) -> ExitCode:
    """Through the run's agent when one serves it (its latest poll, one local round trip);
    otherwise, or when it stops answering, over direct connections. A run the cluster
    watches: from its coordinator's board on the main node (one connection)."""
    if record.watch_port is not None and record.nodes:
        from .clusterstatus import status_from_cluster

        code, record = status_from_cluster(cfg, record, as_json, watch, say)
        if code is not None:
            return code
    client, via = try_connect(record.dir)
    if client is not None:
        with client:
            try:
                return _status_via_agent(cfg, record, client, as_json, watch, via, say, verbose)
            except AgentUnavailable as exc:
                via = Via(False, str(exc))
    if verbose:
        say(f"mntui: {via.describe()}", err=True)
    return _status_direct(cfg, record, as_json, watch, via, say)


def _status_via_agent(
    cfg: JobConfig,
    record: RunRecord,
    client: AgentClient,
    as_json: bool,
    watch: bool,
    via: Via,
    say: Say,
    verbose: bool,
) -> ExitCode:
    nodes = [n.node for n in record.nodes]
    st = fetch_status(client, record.run_id, nodes)
    if verbose:
        say(f"mntui: {via.describe()}", err=True)
    while True:
        code = _show_status(record, st, as_json, watch, via, say, cfg.restart.max)
        if not watch:
            return code
        time.sleep(cfg.watch.interval)
        st = fetch_status(client, record.run_id, nodes)


def _status_direct(
    cfg: JobConfig, record: RunRecord, as_json: bool, watch: bool, via: Via, say: Say
) -> ExitCode:
    from mntui.sessions.config import compile_pattern
    from mntui.sessions.launch import LineSplitter
    from mntui.sessions.poll import DEFAULT_PATTERN, Poller, ProgressTracker, derive, describe
    from mntui.sessions.ssh import Cluster

    pattern = compile_pattern(cfg.progress_pattern or DEFAULT_PATTERN)
    tracker = ProgressTracker(pattern)  # not postmortem's Observations: its
    splitters = {n.node: LineSplitter() for n in record.nodes}  # imports cost 80 ms
    ranks = {n.node: n.rank for n in record.nodes}
    with Cluster(cfg.nodes, cfg.ssh) as cluster:  # a node that cannot be reached: its row
        poller = Poller(record, cluster)
        poller.start_near_end(STEP_BACK)
        while True:
            snaps = poller.poll()
            pace = tracker.pace()
            learnt = (pace.step_interval, pace.longest_gap) if pace is not None else (None, None)
            stall = cfg.watch.stall_threshold(*learnt)
            verdicts = {n: derive(s, stall) for n, s in snaps.items()}
            now = time.time()
            for node, snap in snaps.items():
                lines = splitters[node].feed(snap.new_output)
                tracker.feed(node, lines, now, splitters[node].pending())
            steps = tracker.snapshot(now)
            summary = describe(steps, ranks, now, pace)
            st = AgentStatus(snaps, verdicts, steps, summary, now)
            said = _cluster_watch(cfg, record, cluster)
            code = _show_status(record, st, as_json, watch, via, say, cfg.restart.max, said)
            if not watch:
                return code
            time.sleep(cfg.watch.interval)


def _stall_words(stall_after: float | str) -> str:
    if stall_after == "auto":
        return "a threshold learnt from the job's steps (auto)"
    return f"{stall_after:g}s"


def _stand_by(cfg: JobConfig, record: RunRecord, say: Say) -> ExitCode:
    from mntui.sessions.recover.standby import Standby
    from mntui.sessions.watch import WatchOutcome

    t0 = time.time()
    end = Standby(cfg, record, on_event=lambda e: say(e.format(t0))).run()
    return ExitCode.FAILED if end.outcome is WatchOutcome.FAILED else ExitCode.OK


def cmd_watch(cfg: JobConfig, record: RunRecord, say: Say) -> ExitCode:
    """The supervisor in the foreground; on a chain whose supervisor died, it resumes
    the chain where it stood (watching, in its backoff, or mid-relaunch)."""
    from mntui.sessions.launch import ChainView, run_config
    from mntui.sessions.recover import Supervisor
    from mntui.sessions.watch import LockHeld, WatchOutcome, acquire_lock

    ongoing = record.status.is_live or record.status.may_restart  # a main given up: ended
    if record.watch_port is not None and ongoing and record.nodes and cfg.restart.max > 0:
        return _stand_by(cfg, record, say)  # a lost main is replaced from here (recover/standby)
    if record.watch_port is not None and record.status.is_live and record.nodes:
        main = record.main.node
        say(f"mntui: the cluster watches {record.job} run {record.run_id} (its coordinator on "
            f"{main}:{record.watch_port}); a second watch from here would judge it twice: "
            "`mntui status` shows what it sees", err=True)  # fmt: skip
        return ExitCode.USAGE
    try:  # say so at once if another watchdog holds this run; the supervisor locks each run
        acquire_lock(record).close()
    except LockHeld as exc:
        say(f"mntui: {exc}", err=True)
        return ExitCode.FAILED
    cfg = run_config(cfg, ChainView((record,)))  # this attempt's nodes: a spare, not the file's
    t0 = time.time()
    restart = cfg.restart
    say(
        f"watching {record.job} run {record.run_id}: on failure {cfg.watch.on_failure.value}, "
        f"on stall {cfg.watch.on_stall.value} after {_stall_words(cfg.watch.stall_after)}"
        + (f"; restarts: up to {restart.max}" if restart.max else "")
    )
    end = Supervisor(cfg, record, on_event=lambda e: say(e.format(t0))).run()
    if end.trigger is not None:
        t = end.trigger
        say(f"torn down: {t.node} {t.state.value} ({t.why})")
        return ExitCode.FAILED
    return ExitCode.FAILED if end.outcome is WatchOutcome.FAILED else ExitCode.OK
