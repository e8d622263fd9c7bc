"""The watchdog: when one node fails or hangs, take the whole job down.

Without it a dead or frozen node leaves the others blocked in a collective for
10-30 minutes (NCCL/gloo timeouts, torchrun's 900 s rendezvous timeout) with their
GPUs held. `Judge` decides (pure, given snapshots and a clock); `Watchdog` polls,
asks the judge, runs the cluster-wide kill and writes why into the run record. A
lock in the run's state directory makes sure two watchdogs (a headless one and the
app's) never both act.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .config import Action, JobConfig, WatchPolicy
from .events import Event, Phase
from .kill import kill_job
from .launch import log_tail
from .poll import NodeSnapshot, Poller
from .remote import Cluster
from .runs import RunRecord, load_run
from .states import NodeState, Verdict, derive


@dataclass(frozen=True)
class Trigger:
    node: str
    state: NodeState
    why: str
    action: Action


@dataclass
class Judge:
    """Turns a stream of snapshots into at most one decision per problem."""

    policy: WatchPolicy
    since: dict[str, tuple[NodeState, float]] = field(default_factory=dict)
    notified: set[tuple[str, NodeState]] = field(default_factory=set)

    def verdicts(self, snaps: dict[str, NodeSnapshot]) -> dict[str, Verdict]:
        return {n: derive(s, self.policy.stall_after) for n, s in snaps.items()}

    def judge(
        self, snaps: dict[str, NodeSnapshot], now: float
    ) -> tuple[dict[str, Verdict], list[Trigger]]:
        verdicts = self.verdicts(snaps)
        triggers: list[Trigger] = []
        for node, v in verdicts.items():
            prev = self.since.get(node)
            start = prev[1] if prev and prev[0] is v.state else now
            self.since[node] = (v.state, start)
            held = now - start
            p = self.policy
            failing = (
                v.state in (NodeState.FAILED, NodeState.ORPHANED)
                or (v.state is NodeState.FROZEN and held >= p.frozen_after)
                or (v.state is NodeState.UNREACHABLE and held >= p.unreachable_after)
            )
            if failing:
                action = p.on_failure
            elif v.state is NodeState.STALLED:
                action = p.on_stall
            else:
                continue
            if action is Action.NOTIFY and (node, v.state) in self.notified:
                continue
            self.notified.add((node, v.state))
            triggers.append(Trigger(node, v.state, v.why, action))
        # A failure only matters while something else still runs (or holds resources).
        if not any(v.state.is_active for v in verdicts.values()):
            triggers = [t for t in triggers if t.action is Action.NOTIFY]
        return verdicts, triggers


def _trigger_kind(t: Trigger) -> str:
    return "stall" if t.state is NodeState.STALLED else "failure"


class LockHeld(Exception):
    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


def acquire_lock(record: RunRecord) -> IO[str]:
    """One watchdog per run; the lock dies with its process, so no stale locks."""
    record.dir.mkdir(parents=True, exist_ok=True)
    fh = open(record.dir / "watch.lock", "a+")  # noqa: SIM115 - held for the process' life
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "?"
        fh.close()
        raise LockHeld(
            f"another watchdog already watches run {record.run_id} (pid {holder})", holder
        ) from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    return fh


class Watchdog:
    def __init__(
        self,
        cfg: JobConfig,
        record: RunRecord,
        cluster: Cluster,
        on_event: Callable[[Event], None] = lambda e: None,
        on_snapshots: Callable[[dict[str, NodeSnapshot], dict[str, Verdict]], None] | None = None,
    ) -> None:
        self.cfg, self.record, self.cluster, self.on_event = cfg, record, cluster, on_event
        self.on_snapshots = on_snapshots
        self.judge = Judge(cfg.watch)
        self.poller = Poller(record, cluster)
        self.poller.tail_from_end()

    def stood_down(self) -> bool:
        """A user's `mntui kill` (or a newer run) makes this watchdog leave quietly."""
        current = load_run(self.record.job, self.record.run_id)
        return current is None or current.status in ("killed", "killing", "aborted", "torn-down")

    def step(self) -> tuple[dict[str, Verdict], Trigger | None]:
        snaps = self.poller.poll()
        verdicts, triggers = self.judge.judge(snaps, time.monotonic())
        if self.on_snapshots:
            self.on_snapshots(snaps, verdicts)
        for t in triggers:
            if t.action is Action.NOTIFY:
                self.on_event(
                    Event(
                        t.node,
                        self.record.node(t.node).rank,
                        Phase.NOTICE,
                        f"{t.state.value}: {t.why} (on_{_trigger_kind(t)}: notify)",
                    )
                )
        fatal = next((t for t in triggers if t.action is Action.KILL_ALL), None)
        return verdicts, fatal

    def teardown(self, t: Trigger) -> bool:
        return teardown(self.cfg, self.record, self.cluster, t, self.on_event)

    def run(self, stop: Callable[[], bool] = lambda: False) -> Trigger | None:
        """Watch until the job ends or is torn down; returns what tore it down, if anything."""
        idle = 0
        while not stop():
            t0 = time.monotonic()
            if self.stood_down():
                return None
            verdicts, fatal = self.step()
            if fatal is not None:
                self.teardown(fatal)
                return fatal
            idle = idle + 1 if not any(v.state.is_active for v in verdicts.values()) else 0
            if idle >= 2:
                self.on_event(
                    Event(None, None, Phase.KILLED, "job is no longer running; watchdog exits")
                )
                return None
            time.sleep(max(0.0, self.cfg.watch.interval - (time.monotonic() - t0)))
        return None


def teardown(
    cfg: JobConfig,
    record: RunRecord,
    cluster: Cluster,
    t: Trigger,
    on_event: Callable[[Event], None] = lambda e: None,
) -> bool:
    """Kill the whole job because of `t`, and write why into the run record."""
    rank = record.node(t.node).rank
    on_event(
        Event(
            t.node,
            rank,
            Phase.KILLING,
            f"watchdog: {t.state.value} ({t.why}); tearing the job down",
        )
    )
    last = (
        log_tail(cluster.nodes[t.node], record.node(t.node).run_dir)
        if t.state is not NodeState.UNREACHABLE
        else ""
    )
    started = time.time()
    results = kill_job(cfg, cluster, on_event=on_event)
    clean = all(
        o.ok and o.value is not None and o.value.clean
        for n, o in results.items()
        if n != t.node or t.state is not NodeState.UNREACHABLE
    )
    record.status = "torn-down"
    record.error = f"{t.node} {t.state.value}: {t.why}"
    record.note(
        "watchdog-teardown",
        node=t.node,
        state=t.state.value,
        why=t.why,
        last_lines=last.splitlines()[-20:],
        kill_seconds=round(time.time() - started, 3),
        clean=clean,
        results={n: (o.value.summary() if o.value else o.error) for n, o in results.items()},
    )
    record.save()
    return clean


def watch_session_name(job: str) -> str:
    from . import tmux  # one encoding for every session name

    return tmux.watch_session_name(job)


def start_detached(cfg: JobConfig, record: RunRecord) -> str:
    """Run `mntui watch` in a detached local tmux session, so teardown needs no open UI."""
    import shlex
    import sys

    import libtmux

    name = watch_session_name(cfg.job)
    server = libtmux.Server()
    for old in server.sessions.filter(session_name=name):
        old.kill()
    argv = [
        sys.executable,
        "-m",
        "mntui.tui.cli",
        "-c",
        os.path.abspath(cfg.path),
        "watch",
        "--run",
        record.run_id,
    ]
    env = {k: os.environ[k] for k in ("XDG_STATE_HOME", "PATH") if k in os.environ}
    log = Path(record.dir) / "watch.log"
    command = f"{shlex.join(argv)} 2>&1 | tee -a {shlex.quote(str(log))}"
    server.new_session(session_name=name, window_command=command, attach=False, environment=env)
    return name
