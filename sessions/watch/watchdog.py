"""The watchdog: when one node fails or hangs, take the whole job down.

Without it a dead or frozen node leaves the others blocked in a collective for
10-30 minutes (NCCL/gloo timeouts, torchrun's 900 s rendezvous timeout) with their
GPUs held. `Judge` decides (pure, given snapshots and a clock); `Watchdog` polls,
asks the judge and has `teardown` act (stacks, kill, record, report). It polls every
`interval`, and sooner when the judge says a state turns into a decision before the
next tick (`next_poll`): a freeze is decided when `frozen_after` runs out, not up to an
interval later. A lock in the run's state directory makes sure two watchdogs (a
headless one and the app's) never both act.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import IO

from mntui.sessions.agent import Agent
from mntui.sessions.config import Action, JobConfig
from mntui.sessions.errors import MntuiError, private_dir, state_dir
from mntui.sessions.events import Event, Phase
from mntui.sessions.history import chain_line, note_steps
from mntui.sessions.launch import kill_job
from mntui.sessions.node.gpucount import listed
from mntui.sessions.notify import (
    Notice,
    Notifier,
    NotifyEvent,
    failed_summary,
    finished_summary,
    teardown_summary,
)
from mntui.sessions.poll import NodeSnapshot, NodeState, Poller, Verdict, may_still_run
from mntui.sessions.report import (
    Ending,
    FailureReport,
    Finding,
    Suspect,
    Throttle,
    observations,
    observe,
    try_report,
)
from mntui.sessions.runs import RunRecord, RunStatus, read_status
from mntui.sessions.ssh import Cluster

from .detached import note_watching
from .judge import WAKE_MARGIN, Deadline, Judge, Trigger, next_poll, threshold_text, trigger_kind
from .sampler import Sampler
from .takedown import Teardown, teardown, user_kills, users_doing

__all__ = [
    "Judge",
    "LockHeld",
    "Teardown",
    "Trigger",
    "WatchEnd",
    "WatchOutcome",
    "Watchdog",
    "acquire_lock",
    "make_notifier",
    "teardown",
]


class LockHeld(MntuiError):
    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


def acquire_lock(record: RunRecord) -> IO[str]:
    """One watchdog per run; the lock dies with its process, so no stale locks."""
    private_dir(record.dir)
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


def make_notifier(cfg: JobConfig) -> Notifier:
    return Notifier(cfg.notify, state_dir() / cfg.job / "notify.log")


class Watchdog:
    def __init__(
        self,
        cfg: JobConfig,
        record: RunRecord,
        cluster: Cluster,
        on_event: Callable[[Event], None] = lambda e: None,
        on_snapshots: Callable[[dict[str, NodeSnapshot], dict[str, Verdict]], None] | None = None,
        notifier: Notifier | None = None,
        agent: Agent | None = None,
    ) -> None:
        self.cfg, self.record, self.cluster, self.on_event = cfg, record, cluster, on_event
        self.agent = agent  # serves this run's snapshots and connections while it watches
        self.on_snapshots = on_snapshots
        self.judge = Judge(cfg.watch)
        self.due: tuple[Deadline, ...] = ()  # the judge's deadlines after the last poll
        self.poller = Poller(record, cluster)
        self.poller.tail_from_end()
        self.obs = observations(cfg, record)
        self.notifier = notifier or make_notifier(cfg)
        self.sampler = Sampler(cfg, record, cluster, self.sampled)
        self.named: list[tuple[Suspect, Finding]] = []  # by the sampler's thread, told by
        # the poll loop: each with the finding that named it, the one a kill acts on
        self.throttled: list[Throttle] = []  # likewise: GPUs newly seen held back
        self.seen_throttles: set[tuple[str, int | None, tuple[str, ...]]] = set()

    def tell(self, event: NotifyEvent, summary: str, with_report: bool = False) -> None:
        """A notification (webhook/command, in the background): never in the way."""
        path = str(self.record.dir / "report.txt") if with_report else None
        self.notifier.send(Notice(event, self.record.job, self.record.run_id, summary, path))

    def stood_down(self) -> bool:
        """A user's `mntui kill` (or an ended run) makes this watchdog leave quietly. A
        record it cannot read right now is "unknown": it keeps guarding the job."""
        status = read_status(self.record.job, self.record.run_id)
        return status is not None and not status.is_live

    def step(self) -> tuple[dict[str, Verdict], Trigger | None]:
        # A node still silent from an earlier round is waited for only until its
        # unreachable deadline: the round that decides it ends there.
        late = {d.node: d.at + WAKE_MARGIN for d in self.due if d.state is NodeState.UNREACHABLE}
        snaps = self.poller.poll(late_until=late)
        if self.poller.polls == 1:
            note_watching(self.record)  # what a launch that started us waits for
        now = time.monotonic()
        verdicts, triggers = self.judge.judge(snaps, now, self.poller.asked())
        self.due = self.judge.deadlines(snaps, verdicts, now)
        observe(self.obs, snaps, verdicts)
        self.note_steps(snaps)
        self.learn_pace()
        self.flag_slow()
        if self.on_snapshots:
            self.on_snapshots(snaps, verdicts)
        if self.agent is not None:
            steps = self.obs.tracker.snapshot() if self.obs.tracker is not None else {}
            self.agent.publish(snaps, verdicts, steps, self.obs.progress, self.poller.offsets())
        for t in triggers:
            if t.action is Action.NOTIFY:
                self.on_event(
                    Event(
                        t.node,
                        self.record.node(t.node).rank,
                        Phase.NOTICE,
                        f"{t.state.value}: {t.why} (on_{trigger_kind(t)}: notify)",
                    )
                )
        fatal = next((t for t in triggers if t.action is Action.KILL_ALL), None)
        return verdicts, fatal or self.tell_slow()

    def sampled(self, finding: Finding, new: Suspect | None) -> None:
        if new is not None:
            self.named.append((new, finding))
        for t in finding.throttles:
            if (key := (t.node, t.index, t.reasons)) not in self.seen_throttles:
                self.seen_throttles.add(key)
                self.throttled.append(t)

    def tell_slow(self) -> Trigger | None:
        """A straggler the sampler named: told here, on the poll loop's thread; a kill
        only when `watch.on_slow: kill_all` asks for one."""
        fatal = None
        while self.throttled:  # told once per GPU and reasons; never a kill by itself
            t = self.throttled.pop(0)
            self.on_event(Event(t.node, None, Phase.NOTICE, f"throttled: {t.line}"))
            self.tell(NotifyEvent.SLOW, f"throttled: {t.line}")
        while self.named:
            s, found = self.named.pop(0)
            text, action = f"straggler: {s.line}", self.cfg.watch.on_slow
            self.on_event(Event(s.node, s.rank, Phase.NOTICE, f"{text} (on_slow: {action})"))
            self.tell(NotifyEvent.SLOW, text)
            if action is Action.KILL_ALL:
                fatal = Trigger(s.node, NodeState.RUNNING, text, Action.KILL_ALL, found)
        return fatal

    def last_word(self) -> str:
        """The chain's seff-style line, when no restart follows this failure."""
        if self.cfg.restart.max > 0:
            return ""  # the supervisor says it when the chain ends
        return chain_line(self.record.job, self.record.chain)

    def note_steps(self, snaps: dict[str, NodeSnapshot] | None = None) -> None:
        """The attempt's steps and GPUs, into the record when the clock says it is behind:
        the first step at once (the ledger's recovery ends there, and a watchdog that dies
        later must not take it along), then as it trains (a live status reads it). With
        no `snaps`, now: the watchdog is leaving. A node with no nvidia-smi has no GPU."""
        clock = self.obs.steps
        if clock is None:
            return
        for name, s in (snaps or {}).items():
            if s.reachable:  # `listed`: the coordinator's rule too (None: nvidia-smi failed)
                got = listed(len(s.gpu.gpus), bool(s.gpu.errors)) if s.gpu else listed(None, False)
                clock.see_gpus(name, self.record.node(name).nproc, got)
        if snaps is None or clock.due:
            self.record.update(lambda r: note_steps(r, clock))

    def teardown(self, t: Trigger) -> Teardown:
        # The sampler's py-spy must not hold a rank the teardown dumps, and no later round
        # may replace the finding `t` was decided on: the report reads that one.
        self.sampler.stop(keep=t.finding)
        return teardown(self.cfg, self.record, self.cluster, t, self.on_event, self.obs)

    def learn_pace(self) -> None:
        """`stall_after: auto`: the threshold follows the job's steps; each move that
        matters is said and noted in the run record, where `mntui status` reads it."""
        if self.obs.tracker is not None and self.judge.learn(self.obs.tracker.pace()):
            self.note_threshold()

    def note_threshold(self) -> None:
        text = threshold_text(self.judge)
        seconds = round(self.judge.stall_after, 1)
        self.record.update(lambda r: r.note("stall-threshold", seconds=seconds, text=text))
        self.on_event(Event(None, None, Phase.NOTICE, f"stall threshold: {text}"))

    def flag_slow(self) -> None:
        """A straggler is reported (notify only): a node whose step rate stays below
        `slow_fraction` of the median for `slow_after` seconds."""
        if self.obs.tracker is None:
            return
        w = self.cfg.watch
        for node in self.obs.tracker.slow(time.time(), w.slow_fraction, w.slow_after):
            rank = self.record.node(node).rank
            text = f"{node} is slow (node rank {rank}): below {w.slow_fraction:g}x the median "
            text += f"step rate for {w.slow_after:g}s ({self.obs.progress})"
            self.on_event(Event(node, rank, Phase.NOTICE, text))
            self.tell(NotifyEvent.SLOW, text)

    def finish(self, verdicts: dict[str, Verdict]) -> WatchEnd:
        """The job ended by itself: record how, with a report when a node failed, and
        close its sessions (their output is in the run dir and the report; a dead pane
        left behind only trips the next launch or a person)."""
        failed = [n for n, v in verdicts.items() if v.state is NodeState.FAILED]
        finished = any(v.state is NodeState.FINISHED for v in verdicts.values())
        status = RunStatus.FAILED if failed else RunStatus.FINISHED if finished else None
        killed, _ = user_kills(self.record)
        if killed:
            status = RunStatus.KILLED
        if status is not None:

            def ended(r: RunRecord) -> None:
                if r.status.is_live:
                    r.status = status
                note_steps(r, self.obs.steps)

            self.record.update(ended)
        text = f"job is no longer running ({status.value if status else 'no exit code'})"
        built = None
        if failed:
            built = try_report(
                self.cfg, self.record, self.cluster, self.obs, trigger=None, taken=None,
                ended_at=time.time(), ending=Ending.ENDED,
            )  # fmt: skip
            built = users_doing(self.record, built)
            if built is not None:
                text += f"; report: {built.headline}"
        self.close_sessions()
        self.on_event(Event(None, None, Phase.KILLED, text + "; watchdog exits"))
        if failed and not killed:
            summary = failed_summary(built.headline if built else text, self.last_word())
            self.tell(NotifyEvent.FAILED, summary, built is not None)
        elif status is RunStatus.FINISHED:
            line = chain_line(self.record.job, self.record.chain)
            self.tell(NotifyEvent.FINISHED, finished_summary(self.record.job, line))
        return WatchEnd(WatchOutcome.FAILED if failed else WatchOutcome.FINISHED, report=built)

    def close_sessions(self) -> None:
        """The same sweep a kill makes (sessions, and any tagged straggler), with no grace:
        nothing of the job is meant to run any more. A node that cannot be reached keeps
        its session; the next launch replaces it and `mntui kill` closes it."""
        results = kill_job(self.cfg, self.cluster, grace=0.0)
        for name, error in results.errors.items():
            self.on_event(Event(name, None, Phase.NOTICE, f"session not closed: {error}"))

    def run(self, stop: Callable[[], bool] = lambda: False) -> WatchEnd:
        """Watch until the job ends, is torn down, or a user's kill stands us down; the
        agent serves this run meanwhile (and finishes its requests before we return)."""
        if self.agent is None:
            return self._run(stop)
        self.agent.attach(self.cfg, self.record, self.cluster)
        try:
            return self._run(stop)
        finally:
            self.agent.detach()

    def _run(self, stop: Callable[[], bool]) -> WatchEnd:
        self.sampler.start()
        try:
            return self._watch(stop)
        finally:
            self.sampler.stop()

    def _watch(self, stop: Callable[[], bool]) -> WatchEnd:
        idle = 0
        self.note_threshold()
        while not stop():
            t0 = time.monotonic()
            if self.stood_down():
                self.note_steps()  # a user's kill: how long it trained, up to its last step
                return WatchEnd(WatchOutcome.STOOD_DOWN)
            verdicts, fatal = self.step()
            if fatal is not None:
                done = self.teardown(fatal)
                headline = done.report.headline if done.report else None
                summary = teardown_summary(fatal.node, fatal.why, headline, self.last_word())
                self.tell(NotifyEvent.TEARDOWN, summary, done.report is not None)
                return WatchEnd(WatchOutcome.TORN_DOWN, fatal, done, done.report)
            idle = 0 if may_still_run(v.state for v in verdicts.values()) else idle + 1
            if idle >= 2:
                return self.finish(verdicts)
            wake = next_poll(t0, self.cfg.watch.interval, (d.at for d in self.due))
            time.sleep(max(0.0, wake - time.monotonic()))
        self.note_steps()
        return WatchEnd(WatchOutcome.STOPPED)


class WatchOutcome(StrEnum):
    TORN_DOWN = "torn-down"  # the watchdog killed the job
    FAILED = "failed"  # the job ended by itself, a node with a non-zero exit code
    FINISHED = "finished"  # the job ended by itself, cleanly (or with no exit code)
    STOOD_DOWN = "stood-down"  # a user's kill, or the run ended under someone else
    STOPPED = "stopped"  # our caller asked us to stop (the app quitting)


@dataclass(frozen=True)
class WatchEnd:
    outcome: WatchOutcome
    trigger: Trigger | None = None
    teardown: Teardown | None = None
    report: FailureReport | None = None
