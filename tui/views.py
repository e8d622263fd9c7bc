"""Headless views: `mntui status`, `mntui logs`, `mntui watch`.

Text for a terminal or a pipe, never Textual: these run over a bare SSH session.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence

from mntui.sessions.config import JobConfig
from mntui.sessions.logs import LineSplitter, last_lines, read_new
from mntui.sessions.poll import NodeSnapshot, Poller, snapshot_dict
from mntui.sessions.remote import Cluster, NodeError
from mntui.sessions.runs import NodeRecord, RunRecord
from mntui.sessions.states import NodeState, Verdict, derive

Say = Callable[..., None]


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def gpu_cell(s: NodeSnapshot) -> str:
    if not s.reachable:
        return "-"
    if s.gpu is None:
        load = f"load {s.load[0]:.1f}/{s.ncpu}" if s.load and s.ncpu else "load ?"
        mem = (
            f" mem {(s.mem_total_mib - s.mem_available_mib) / 1024:.1f}"
            f"/{s.mem_total_mib / 1024:.0f}G"
            if s.mem_total_mib and s.mem_available_mib is not None
            else ""
        )
        return f"no GPU: {load}{mem}"
    if not s.gpu.gpus:
        return "GPU ERROR: " + "; ".join(s.gpu.errors)[:60]
    utils = [g.util for g in s.gpu.gpus if g.util is not None]
    used = sum(g.mem_used or 0 for g in s.gpu.gpus) / 1024
    total = sum(g.mem_total or 0 for g in s.gpu.gpus) / 1024
    cell = (
        f"{len(s.gpu.gpus)}x {sum(utils) / len(utils):.0f}%" if utils else f"{len(s.gpu.gpus)}x ?%"
    )
    cell += f" {used:.0f}/{total:.0f}G"
    if s.gpu.errors:
        cell += " +ERR"
    if s.gpu.foreign_apps:
        cell += f" {len(s.gpu.foreign_apps)} foreign"
    return cell


def status_table(
    record: RunRecord, snaps: dict[str, NodeSnapshot], verdicts: dict[str, Verdict]
) -> str:
    head = ("NODE", "RANK", "STATE", "GPUS", "PROCS", "PORTS", "OUTPUT", "RTT", "DETAIL")
    rows = [head]
    for n in record.nodes:
        s, v = snaps[n.node], verdicts[n.node]
        rows.append(
            (
                n.node,
                str(n.rank),
                v.state.value,
                gpu_cell(s),
                str(len(s.live_procs)) if s.reachable else "-",
                ",".join(map(str, s.ports)) or "-",
                _age(s.output_age),
                f"{s.rtt * 1000:.0f}ms" if s.rtt is not None else "-",
                v.why,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=False)) + "  " + r[-1]
        for r in rows
    ]
    return f"job {record.job}  run {record.run_id}  ({record.status})\n" + "\n".join(lines)


def overall_exit(verdicts: dict[str, Verdict]) -> int:
    """0: healthy or finished; 1: a node has a problem; 3: nothing is running."""
    states = {v.state for v in verdicts.values()}
    if any(s.is_problem for s in states):
        return 1
    if states <= {NodeState.NOT_RUNNING}:
        return 3
    return 0


def cmd_status(cfg: JobConfig, record: RunRecord, as_json: bool, watch: bool, say: Say) -> int:
    with Cluster(cfg.nodes, cfg.ssh) as cluster:
        cluster.connect()  # in parallel; an unreachable node shows up in its row
        poller = Poller(record, cluster)
        poller.tail_from_end()
        while True:
            snaps = poller.poll()
            verdicts = {n: derive(s, cfg.watch.stall_after) for n, s in snaps.items()}
            code = overall_exit(verdicts)
            if as_json:
                say(
                    json.dumps(
                        {
                            "job": record.job,
                            "run_id": record.run_id,
                            "status": record.status,
                            "exit_code": code,
                            "nodes": [
                                snapshot_dict(
                                    snaps[n.node],
                                    verdicts[n.node].state.value,
                                    verdicts[n.node].why,
                                )
                                for n in record.nodes
                            ],
                        },
                        indent=None if watch else 2,
                    )
                )
            else:
                if watch and sys.stdout.isatty():
                    say("\033[H\033[2J", end="")
                say(status_table(record, snaps, verdicts))
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
) -> int:
    selected = [n for n in record.nodes if not nodes or n.node in nodes]
    with Cluster([cfg.node(n.node) for n in selected], cfg.ssh) as cluster:
        if fetch:
            return _fetch(record, selected, cluster, say)
        offsets: dict[str, int] = {}
        splitters = {n.node: LineSplitter() for n in selected}
        prefix = len(selected) > 1 or not nodes
        for n in selected:
            try:
                if lines is not None:
                    tail, offsets[n.node] = last_lines(cluster.nodes[n.node], n.run_dir, lines)
                    for line in tail:
                        say(f"[{n.node}:{n.rank}] {line}" if prefix else line)
                else:
                    offsets[n.node] = 0
            except NodeError as exc:
                say(f"[{n.node}:{n.rank}] mntui: {exc.message}", err=True)
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
                    say(f"[{n.node}:{n.rank}] {line}" if prefix else line)
            if not follow and idle:
                for n in selected:
                    for line in splitters[n.node].flush():
                        say(f"[{n.node}:{n.rank}] {line}" if prefix else line)
                return 1 if failed else 0
            if idle:
                time.sleep(0.3)


def _fetch(record: RunRecord, selected: Sequence[NodeRecord], cluster: Cluster, say: Say) -> int:
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
    return 0 if ok else 1


def cmd_watch(cfg: JobConfig, record: RunRecord, say: Say) -> int:
    from mntui.sessions.supervise import Supervisor
    from mntui.sessions.watch import LockHeld, WatchOutcome, acquire_lock

    try:  # say so at once if another watchdog holds this run; the supervisor locks each run
        acquire_lock(record).close()
    except LockHeld as exc:
        say(f"mntui: {exc}", err=True)
        return 1
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
        return 1
    return 1 if end.outcome is WatchOutcome.FAILED else 0
