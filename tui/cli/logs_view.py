"""`mntui logs`: the job's output, all nodes interleaved as `[node:rank] line`, or some.

Text for a terminal or a pipe, never Textual: it runs over a bare SSH session. It reads
each node's output.log over its own connections, from offsets it keeps, so no line is
shown twice or skipped. `--fetch` copies every node's whole output.log into the run
record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from mntui.sessions.config import JobConfig
from mntui.sessions.errors import ExitCode
from mntui.sessions.runs import NodeRecord, RunRecord

if TYPE_CHECKING:  # the SSH side (remote, logs) is imported where a path needs it
    from mntui.sessions.launch import LogChunk
    from mntui.sessions.ssh import Cluster

Say = Callable[..., None]

Read = dict[str, "LogChunk | str"]  # per node: the chunk, or why it could not be read


FOLLOW_LINES = 10  # `logs -f` without `-n` starts here, as `tail -f` does


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


class Following:
    """Where each node's log is read from, and what is said of it."""

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
    if verbose:  # the logs are the nodes' own files, whoever watches the run
        say("mntui: direct connections to every node it reads", err=True)
    from mntui.sessions.ssh import Cluster

    with Cluster([cfg.node(n.node) for n in selected], cfg.ssh) as cluster:
        if fetch:
            return _fetch(record, selected, cluster, say)
        source = DirectLogs(cluster, selected)
        if follow and lines is None:  # as `tail -f`: the last lines, then what comes
            lines = FOLLOW_LINES
        state.offsets = _start_offsets(source, state, lines)
        return _follow(source, state, follow)


def _start_offsets(source: DirectLogs, state: Following, lines: int | None) -> dict[str, int]:
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


def _follow(source: DirectLogs, state: Following, follow: bool) -> ExitCode:
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
