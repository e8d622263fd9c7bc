"""`mntui logs`: the job's output, all nodes interleaved as `[node:rank] line`, or some.

Text for a terminal or a pipe, never Textual: it runs over a bare SSH session. It reads
through the run's agent (its watchdog process, which holds every node's connection) when
one serves the run, and over its own connections when none does; if the agent stops
answering midway, the direct reads take over from the same offsets, so no line is shown
twice or skipped. `--fetch` copies every node's whole output.log into the run record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from mntui.sessions.agent import AgentClient, AgentUnavailable, Via, read_logs, try_connect
from mntui.sessions.config import JobConfig
from mntui.sessions.errors import ExitCode
from mntui.sessions.runs import NodeRecord, RunRecord

if TYPE_CHECKING:  # the SSH side (remote, logs) is imported where a path needs it
    from mntui.sessions.launch import LogChunk
    from mntui.sessions.ssh import Cluster

Say = Callable[..., None]

Read = dict[str, "LogChunk | str"]  # per node: the chunk, or why it could not be read


class DirectLogs:
    """Log reads over our own connections, every node at once."""

    def __init__(self, cluster: Cluster, selected: Sequence[NodeRecord]) -> None:
        self.cluster, self.dirs = cluster, {n.node: n.run_dir for n in selected}

    def tail(self, lines: int) -> dict[str, tuple[list[str], int] | str]:
        from mntui.sessions.launch import last_lines

        got = self.cluster.map(lambda node: last_lines(node, self.dirs[node.name], lines))
        return {n: o.value if o.value is not None else o.error or "?" for n, o in got.items()}

    def read(self, offsets: Mapping[str, int]) -> Read:
        from mntui.sessions.launch import read_new

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
        from mntui.sessions.launch import LogChunk

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
        from mntui.sessions.launch import LineSplitter

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
    from mntui.sessions.ssh import Cluster

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
    from mntui.sessions.launch import read_new
    from mntui.sessions.results import NodeError

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
