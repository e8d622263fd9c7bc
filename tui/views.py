"""Headless views: `mntui status`, `mntui logs`, `mntui watch`.

Text for a terminal or a pipe, never Textual: these run over a bare SSH session.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from mntui.sessions.config import JobConfig
from mntui.sessions.errors import ExitCode
from mntui.sessions.logs import LineSplitter, last_lines, read_new
from mntui.sessions.poll import NodeSnapshot, Poller, snapshot_dict
from mntui.sessions.postmortem import observations, observe
from mntui.sessions.progress import NodeProgress
from mntui.sessions.remote import Cluster, NodeError
from mntui.sessions.runs import NodeRecord, RunRecord
from mntui.sessions.states import NodeState, Verdict, derive

from . import cells

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
            "nodes": nodes,
        },
        indent=indent,
    )


def cmd_status(cfg: JobConfig, record: RunRecord, as_json: bool, watch: bool, say: Say) -> ExitCode:
    with Cluster(cfg.nodes, cfg.ssh) as cluster:
        cluster.connect()  # in parallel; an unreachable node shows up in its row
        poller = Poller(record, cluster)
        poller.start_near_end(STEP_BACK)
        obs = observations(cfg, record)
        while True:
            snaps = poller.poll()
            verdicts = {n: derive(s, cfg.watch.stall_after) for n, s in snaps.items()}
            observe(obs, snaps, verdicts)
            steps = obs.tracker.snapshot() if obs.tracker is not None else {}
            code = overall_exit(verdicts)
            if as_json:
                say(status_json(record, snaps, verdicts, code, None if watch else 2, steps))
            else:
                if watch and sys.stdout.isatty():
                    say("\033[H\033[2J", end="")
                say(status_table(record, snaps, verdicts, steps, obs.progress, cfg.restart.max))
            if not watch:
                return code
            time.sleep(cfg.watch.interval)


def cmd_logs(
    cfg: JobConfig,
    record: RunRecord,
    nodes: Sequence[str],
    follow: bool,
    lines: int | None,
    fetch: bool,
    say: Say,
) -> ExitCode:
    selected = [n for n in record.nodes if not nodes or n.node in nodes]
    with Cluster([cfg.node(n.node) for n in selected], cfg.ssh) as cluster:
        if fetch:
            return _fetch(record, selected, cluster, say)
        prefixed = len(selected) > 1 or not nodes

        def show(n: NodeRecord, line: str) -> None:
            say(f"[{n.node}:{n.rank}] {line}" if prefixed else line)

        offsets = _start_offsets(cluster, selected, lines, show, say)
        return _follow(cluster, selected, offsets, follow, show, say)


def _start_offsets(
    cluster: Cluster,
    selected: Sequence[NodeRecord],
    lines: int | None,
    show: Callable[[NodeRecord, str], None],
    say: Say,
) -> dict[str, int]:
    """Where each node's log is read from: its start, or its last `lines` lines (shown)."""
    offsets: dict[str, int] = {}
    for n in selected:
        try:
            if lines is not None:
                tail, offsets[n.node] = last_lines(cluster.nodes[n.node], n.run_dir, lines)
                for line in tail:
                    show(n, line)
            else:
                offsets[n.node] = 0
        except NodeError as exc:
            say(f"[{n.node}:{n.rank}] mntui: {exc.message}", err=True)
    return offsets


def _follow(
    cluster: Cluster,
    selected: Sequence[NodeRecord],
    offsets: dict[str, int],
    follow: bool,
    show: Callable[[NodeRecord, str], None],
    say: Say,
) -> ExitCode:
    splitters = {n.node: LineSplitter() for n in selected}
    failed = False
    while True:
        idle = True
        for n in selected:
            if n.node not in offsets:
                continue
            try:
                chunk = read_new(cluster.nodes[n.node], n.run_dir, offsets[n.node])
            except NodeError as exc:
                say(f"[{n.node}:{n.rank}] mntui: {exc.message}", err=True)
                failed = True
                continue
            offsets[n.node] = chunk.offset
            idle = idle and chunk.offset >= chunk.size
            for line in splitters[n.node].feed(chunk.data):
                show(n, line)
        if not follow and idle:
            for n in selected:
                for line in splitters[n.node].flush():
                    show(n, line)
            return ExitCode.FAILED if failed else ExitCode.OK
        if idle:
            time.sleep(0.3)


def _fetch(
    record: RunRecord, selected: Sequence[NodeRecord], cluster: Cluster, say: Say
) -> ExitCode:
    """Copy every node's output.log into the local run record, byte for byte."""
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
