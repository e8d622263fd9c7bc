"""Headless views: `mntui status`, `mntui logs`, `mntui watch`.

Text for a terminal or a pipe, never Textual: these run over a bare SSH session.
`status` and `logs` ask the run's agent (its watchdog process, which holds every
node's connection) when one serves the run, and open their own connections when none
does or it stops answering; the engine's heavier modules are imported only on the
path that needs them.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from mntui.sessions.agentclient import (
    AgentClient,
    AgentStatus,
    AgentUnavailable,
    Via,
    fetch_status,
    read_logs,
    try_connect,
)
from mntui.sessions.config import JobConfig
from mntui.sessions.errors import ExitCode
from mntui.sessions.poll import NodeSnapshot, snapshot_dict
from mntui.sessions.progress import NodeProgress
from mntui.sessions.runs import NodeRecord, RunRecord
from mntui.sessions.states import NodeState, Verdict

from . import cells

if TYPE_CHECKING:  # the SSH side (remote, logs) is imported where a path needs it
    from mntui.sessions.logs import LogChunk
    from mntui.sessions.remote import Cluster

STEP_BACK = 16 * 1024  # bytes of each log `status` reads to find the last step

Say = Callable[..., None]


def status_header(record: RunRecord, progress: str, restarts: int = 0) -> str:
    """The run in a few lines: its status, its place in a restart chain, why it ended."""
    attempt = ""
    if record.attempt or restarts:
        attempt = f"  attempt {record.attempt + 1}/{restarts + 1}"
    lines = [f"job {record.job}  run {record.run_id}  ({record.status}){attempt}"]
    for earlier in record.attempts:
        lines.append(f"  attempt {int(earlier.get('attempt', 0)) + 1}: {earlier.get('cause', '')}")
    if (record.cause and not record.status.is_live) or record.status.value == "restarting":
        lines.append(f"cause: {record.cause or record.error or '-'}  (`mntui report`)")
    if progress:
        lines.append(f"progress: {progress}")
    return "\n".join(lines)


def status_table(
    record: RunRecord,
    snaps: dict[str, NodeSnapshot],
    verdicts: dict[str, Verdict],
    progress: Mapping[str, NodeProgress] | None = None,
    summary: str = "",
    restarts: int = 0,
) -> str:
    head = ("NODE", "RANK", "STATE", "GPUS", "PROCS", "PORTS", "OUTPUT", "STEP", "RTT", "DETAIL")
    rows = [head]
    for n in record.nodes:
        s, v = snaps[n.node], verdicts[n.node]
        rows.append(
            (
                n.node,
                str(n.rank),
                v.state.value,
                cells.gpu_summary(s),
                str(len(s.live_procs)) if s.reachable else "-",
                ",".join(map(str, s.ports)) or "-",
                cells.age(s.output_age),
                cells.step((progress or {}).get(n.node)),
                cells.rtt(s),
                v.why,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=False)) + "  " + r[-1]
        for r in rows
    ]
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
    return json.dumps(
        {
            "job": record.job,
            "run_id": record.run_id,
            "status": record.status,
            "attempt": record.attempt,
            "chain": record.chain,
            "cause": record.cause,
            "exit_code": int(code),
            "via": via,
            "nodes": nodes,
        },
        indent=indent,
    )


def _show_status(
    record: RunRecord,
    st: AgentStatus,
    as_json: bool,
    watch: bool,
    via: Via,
    say: Say,
    restarts: int = 0,
) -> ExitCode:
    code = overall_exit(st.verdicts)
    if as_json:
        indent = None if watch else 2
        say(status_json(record, st.snaps, st.verdicts, code, indent, st.progress, via.name))
    else:
        if watch and sys.stdout.isatty():
            say("\033[H\033[2J", end="")
        say(status_table(record, st.snaps, st.verdicts, st.progress, st.summary, restarts))
    return code


def cmd_status(
    cfg: JobConfig, record: RunRecord, as_json: bool, watch: bool, say: Say, verbose: bool = False
) -> ExitCode:
    """Through the run's agent when one serves it (its latest poll, one local round trip);
    otherwise, or when it stops answering, over direct connections."""
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
    from mntui.sessions import progress
    from mntui.sessions.logs import LineSplitter
    from mntui.sessions.poll import Poller
    from mntui.sessions.remote import Cluster
    from mntui.sessions.states import derive

    pattern = progress.compile_pattern(cfg.progress_pattern or progress.DEFAULT_PATTERN)
    tracker = progress.ProgressTracker(pattern)  # not postmortem's Observations: its
    splitters = {n.node: LineSplitter() for n in record.nodes}  # imports cost 80 ms
    ranks = {n.node: n.rank for n in record.nodes}
    with Cluster(cfg.nodes, cfg.ssh) as cluster:  # a node that cannot be reached: its row
        poller = Poller(record, cluster)
        poller.start_near_end(STEP_BACK)
        while True:
            snaps = poller.poll()
            verdicts = {n: derive(s, cfg.watch.stall_after) for n, s in snaps.items()}
            now = time.time()
            for node, snap in snaps.items():
                tracker.feed(node, splitters[node].feed(snap.new_output), now)
            steps = tracker.snapshot(now)
            summary = progress.describe(steps, ranks)
            st = AgentStatus(snaps, verdicts, steps, summary, now)
            code = _show_status(record, st, as_json, watch, via, say, cfg.restart.max)
            if not watch:
                return code
            time.sleep(cfg.watch.interval)


# -- logs --------------------------------------------------------------------------

Read = dict[str, "LogChunk | str"]  # per node: the chunk, or why it could not be read


class DirectLogs:
    """Log reads over our own connections, every node at once."""

    def __init__(self, cluster: Cluster, selected: Sequence[NodeRecord]) -> None:
        self.cluster, self.dirs = cluster, {n.node: n.run_dir for n in selected}

    def tail(self, lines: int) -> dict[str, tuple[list[str], int] | str]:
        from mntui.sessions.logs import last_lines

        got = self.cluster.map(lambda node: last_lines(node, self.dirs[node.name], lines))
        return {n: o.value if o.value is not None else o.error or "?" for n, o in got.items()}

    def read(self, offsets: Mapping[str, int]) -> Read:
        from mntui.sessions.logs import read_new

        got = self.cluster.map(
            lambda node: read_new(node, self.dirs[node.name], offsets[node.name]), list(offsets)
        )
        return {n: o.value if o.value is not None else o.error or "?" for n, o in got.items()}


class AgentLogs:
    """The same reads on the agent's open connections."""

    def __init__(self, client: AgentClient, run_id: str, selected: Sequence[NodeRecord]) -> None:
        self.client, self.run_id, self.names = client, run_id, [n.node for n in selected]

    def tail(self, lines: int) -> dict[str, tuple[list[str], int] | str]:
        got = read_logs(self.client, self.run_id, {n: {"lines": lines} for n in self.names})
        return {n: g.get("error") or (g["lines"], g["offset"]) for n, g in got.items()}

    def read(self, offsets: Mapping[str, int]) -> Read:
        from mntui.sessions.logs import LogChunk

        got = read_logs(self.client, self.run_id, {n: {"offset": o} for n, o in offsets.items()})
        return {
            n: g.get("error") or LogChunk(g["data"], g["offset"], g["size"], None)
            for n, g in got.items()
        }


LogSource = DirectLogs | AgentLogs


class Following:
    """Where each node's log is read from; kept when the agent goes away midway, so the
    direct reads that take over neither repeat nor skip a line."""

    def __init__(self, selected: Sequence[NodeRecord], prefixed: bool, say: Say) -> None:
        from mntui.sessions.logs import LineSplitter

        self.selected, self.prefixed, self.say = selected, prefixed, say
        self.offsets: dict[str, int] | None = None
        self.splitters = {n.node: LineSplitter() for n in selected}
        self.failed = False
        self.rank = {n.node: n.rank for n in selected}

    def show(self, node: str, line: str) -> None:
        self.say(f"[{node}:{self.rank[node]}] {line}" if self.prefixed else line)

    def error(self, node: str, text: str) -> None:
        self.say(f"[{node}:{self.rank[node]}] mntui: {text}", err=True)
        self.failed = True


def cmd_logs(
    cfg: JobConfig,
    record: RunRecord,
    nodes: Sequence[str],
    follow: bool,
    lines: int | None,
    fetch: bool,
    say: Say,
    verbose: bool = False,
) -> ExitCode:
    selected = [n for n in record.nodes if not nodes or n.node in nodes]
    state = Following(selected, len(selected) > 1 or not nodes, say)
    via = Via(False, "--fetch copies over its own connections")
    if not fetch:
        client, via = try_connect(record.dir)
        if client is not None:
            with client:
                try:
                    source = AgentLogs(client, record.run_id, selected)
                    return _logs(source, state, lines, follow, via if verbose else None)
                except AgentUnavailable as exc:
                    via = Via(False, str(exc))
    if verbose:
        say(f"mntui: {via.describe()}", err=True)
    from mntui.sessions.remote import Cluster

    with Cluster([cfg.node(n.node) for n in selected], cfg.ssh) as cluster:
        if fetch:
            return _fetch(record, selected, cluster, say)
        return _logs(DirectLogs(cluster, selected), state, lines, follow, None)


def _logs(
    source: LogSource, state: Following, lines: int | None, follow: bool, via: Via | None
) -> ExitCode:
    if state.offsets is None:
        state.offsets = _start_offsets(source, state, lines)
        if via is not None:  # said once the agent has answered
            state.say(f"mntui: {via.describe()}", err=True)
    return _follow(source, state, follow)


def _start_offsets(source: LogSource, state: Following, lines: int | None) -> dict[str, int]:
    """Where each node's log is read from: its start, or its last `lines` lines (shown)."""
    if lines is None:
        return {n.node: 0 for n in state.selected}
    offsets: dict[str, int] = {}
    got = source.tail(lines)
    for n in state.selected:
        answer = got[n.node]
        if isinstance(answer, str):
            state.error(n.node, answer)
            continue
        tail, offsets[n.node] = answer
        for line in tail:
            state.show(n.node, line)
    return offsets


def _follow(source: LogSource, state: Following, follow: bool) -> ExitCode:
    assert state.offsets is not None
    offsets = state.offsets
    while True:
        idle = True
        got = source.read(offsets) if offsets else {}
        for n in state.selected:
            chunk = got.get(n.node)
            if chunk is None:
                continue
            if isinstance(chunk, str):  # said, and tried again on the next read
                state.error(n.node, chunk)
                continue
            offsets[n.node] = chunk.offset
            idle = idle and chunk.offset >= chunk.size
            for line in state.splitters[n.node].feed(chunk.data):
                state.show(n.node, line)
        if not follow and idle:
            for n in state.selected:
                for line in state.splitters[n.node].flush():
                    state.show(n.node, line)
            return ExitCode.FAILED if state.failed else ExitCode.OK
        if idle:
            time.sleep(0.3)


def _fetch(
    record: RunRecord, selected: Sequence[NodeRecord], cluster: Cluster, say: Say
) -> ExitCode:
    """Copy every node's output.log into the local run record, byte for byte."""
    from mntui.sessions.logs import read_new
    from mntui.sessions.remote import NodeError

    out_dir = record.dir / "logs"
    out_dir.mkdir(parents=True, exist_ok=True)
    ok = True
    for n in selected:
        name, run_dir = n.node, n.run_dir
        path = out_dir / f"{name}.log"
        try:
            with path.open("wb") as fh:
                offset = 0
                while True:
                    chunk = read_new(cluster.nodes[name], run_dir, offset)
                    fh.write(chunk.data)
                    offset = chunk.offset
                    if offset >= chunk.size or not chunk.data:
                        break
            say(f"{name}: {offset} bytes -> {path}")
        except NodeError as exc:
            say(f"{name}: {exc.message}", err=True)
            ok = False
    return ExitCode.OK if ok else ExitCode.FAILED


def cmd_watch(cfg: JobConfig, record: RunRecord, say: Say) -> ExitCode:
    from mntui.sessions.supervise import Supervisor
    from mntui.sessions.watch import LockHeld, WatchOutcome, acquire_lock

    try:  # say so at once if another watchdog holds this run; the supervisor locks each run
        acquire_lock(record).close()
    except LockHeld as exc:
        say(f"mntui: {exc}", err=True)
        return ExitCode.FAILED
    t0 = time.time()
    restart = cfg.restart
    say(
        f"watching {record.job} run {record.run_id}: on failure {cfg.watch.on_failure.value}, "
        f"on stall {cfg.watch.on_stall.value} after {cfg.watch.stall_after:g}s"
        + (f"; restarts: up to {restart.max}" if restart.max else "")
    )
    end = Supervisor(cfg, record, on_event=lambda e: say(e.format(t0))).run()
    if end.trigger is not None:
        t = end.trigger
        say(f"torn down: {t.node} {t.state.value} ({t.why})")
        return ExitCode.FAILED
    return ExitCode.FAILED if end.outcome is WatchOutcome.FAILED else ExitCode.OK
