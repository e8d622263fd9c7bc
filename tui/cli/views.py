"""`mntui status`: a run as it goes, read the one way it is read (watch/reading.py).

Text for a terminal or a pipe, never Textual: it runs over a bare SSH session. A run
the cluster watches is read from its coordinator's board on the main (clusterstatus.py,
one connection); an unwatched one, or one whose board cannot be read, by polling its
nodes over direct connections, where each node's state is derived from what the poll
saw and nothing is judged. The engine's heavier modules are imported only on the path
that needs them. `mntui logs` is tui/cli/logs_view.py's.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mntui.sessions.config import JobConfig
from mntui.sessions.errors import ExitCode
from mntui.sessions.poll import NodeProgress, NodeSnapshot, NodeState, Verdict, snapshot_dict
from mntui.sessions.runs import RunRecord, RunStatus
from mntui.sessions.watch.reading import by_cluster, describe, reading

from . import statusrows
from .output import clear_screen, json_text
from .runheader import status_header, unwatched_line

if TYPE_CHECKING:
    from mntui.sessions.ssh import Cluster

STEP_BACK = 16 * 1024  # bytes of each log `status` reads to find the last step

Say = Callable[..., None]


@dataclass(frozen=True)
class Polled:
    """One direct poll of the run's nodes, as `status` shows it."""

    snaps: dict[str, NodeSnapshot]
    verdicts: dict[str, Verdict]
    progress: dict[str, NodeProgress]
    summary: str


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
    lines = statusrows.aligned((*statusrows.HEAD, "DETAIL"), rows, statusrows.terminal_width())
    return status_header(record, summary, restarts) + "\n" + "\n".join(lines)


# An ended run's exit code is its end's, whatever its nodes show now (one rule for every
# end: a torn-down run exited 3 by its nodes, not running, and a gave-up one 1 by the
# exit codes its panes kept): it failed (1), it finished (0), a user or the launch
# stopped it (3, nothing runs).
ENDED_EXIT = {
    RunStatus.FINISHED: ExitCode.OK,
    RunStatus.FAILED: ExitCode.FAILED,
    RunStatus.TORN_DOWN: ExitCode.FAILED,
    RunStatus.GAVE_UP: ExitCode.FAILED,
    RunStatus.KILLED: ExitCode.NOT_RUNNING,
    RunStatus.ABORTED: ExitCode.NOT_RUNNING,
}


def overall_exit(verdicts: dict[str, Verdict], ended: RunStatus | None = None) -> ExitCode:
    """`ended`: the run's own end (ENDED_EXIT); while it lives, OK: healthy or finished;
    FAILED: a node has a problem; NOT_RUNNING: nothing runs."""
    if ended in ENDED_EXIT:
        return ENDED_EXIT[ended]
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
            "watchdog": unwatched_line(record) or None,
            "watch": reading(record).value,  # "cluster" | "unwatched" (watch/reading.py)
            "exit_code": int(code),
            "via": "direct",
            "straggler": slow_json(record),
            "nodes": nodes,
        },
        indent=indent,
    )


def slow_lines(record: RunRecord) -> list[str]:
    """The straggler its coordinator named (report/suspect.py, synced by watch/mirror.py)."""
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
    st: Polled,
    as_json: bool,
    watch: bool,
    say: Say,
    restarts: int = 0,
    cluster: list[str] | None = None,
    ended: RunStatus | None = None,
) -> ExitCode:
    code = overall_exit(st.verdicts, ended)
    if as_json:
        indent = None if watch else 2
        text = status_json(record, st.snaps, st.verdicts, code, indent, st.progress)
        if cluster is not None:  # the cluster's watch: who watches, what it decided
            data = json.loads(text)
            data["watchdog"], data["cluster"] = cluster[0], cluster[1:]
            text = json_text(data, indent)
        say(text)
    else:
        if watch and sys.stdout.isatty():
            clear_screen()  # say() writes no escape sequence
        say(status_table(record, st.snaps, st.verdicts, st.progress, st.summary, restarts))
        if line := out_of_reach(record, st.verdicts):
            say(line)
        for line in slow_lines(record):  # the coordinator's straggler: who holds the job
            say(line)
        from mntui.sessions.history import chain_line

        if line := chain_line(record.job, record.chain):  # the chain's seff-style line
            say(line[2:])
        for line in cluster or []:
            say(line)
    return code


def out_of_reach(record: RunRecord, verdicts: Mapping[str, Verdict]) -> str:
    """One line when no node answered: this machine is cut off (or every node is down),
    which the rows alone say node by node (issue 38: a cut looked like N lost nodes)."""
    if not verdicts or any(v.state is not NodeState.UNREACHABLE for v in verdicts.values()):
        return ""
    goes_on = "the cluster's watch acts without it" if by_cluster(record) else "nothing watches it"
    return (
        "out of reach: this machine reaches none of the run's nodes (its network, or every "
        f"node, down); {goes_on}; `mntui status` again once it is back"
    )


def _cluster_watch(
    cfg: JobConfig, record: RunRecord, cluster: Cluster
) -> tuple[RunRecord, list[str] | None]:
    """For a run the cluster watches, polled directly (its board was unreadable a
    moment ago, or its coordinator has ended): the coordinator's word if it can be read
    now, and the reports of the attempts that ended since the last look saved (the
    connections are open: watch/mirror.py), with the chain's latest record; no lines
    for an unwatched run."""
    from mntui.sessions.watch import save_reports
    from mntui.sessions.watch.mirror import read_main

    from .clusterstatus import cluster_lines

    if not by_cluster(record):
        return record, None
    view = read_main(record, cluster)
    latest, lines = cluster_lines(record, view)
    save_reports(cfg, latest, view, cluster)
    return latest, lines


def cmd_status(
    cfg: JobConfig, record: RunRecord, as_json: bool, watch: bool, say: Say, verbose: bool = False
) -> ExitCode:
    """A run the cluster watches: from its coordinator's board on the main node (one
    connection); an unwatched one, or one whose board cannot be read now, over direct
    connections to its nodes."""
    if verbose:
        say(f"mntui: {describe(record)}", err=True)
    if by_cluster(record):
        from .clusterstatus import status_from_cluster

        code, record = status_from_cluster(cfg, record, as_json, watch, say)
        if code is not None:
            return code
    return _status_direct(cfg, record, as_json, watch, say)


def _status_direct(
    cfg: JobConfig, record: RunRecord, as_json: bool, watch: bool, say: Say
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
            st = Polled(snaps, verdicts, steps, summary)
            latest, said = _cluster_watch(cfg, record, cluster)
            ended = latest.status if latest.run_id == record.run_id else None
            code = _show_status(record, st, as_json, watch, say, cfg.restart.max, said, ended)
            if not watch:
                return code
            time.sleep(cfg.watch.interval)
