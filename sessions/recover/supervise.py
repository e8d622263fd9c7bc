"""The supervisor: watch a run, and when it breaks, bring the job back.

It is the watchdog process (`mntui watch`, started detached by `launch --no-ui`): it
watches one run at a time under that run's lock; after a teardown (or a run that
failed by itself) it asks the restart policy, marks the run `restarting`, waits the
backoff, and relaunches through the normal launch path as the next attempt of the
chain (new run id, `MNTUI_RESTART_COUNT` in the job's env). A user's `mntui kill`
marks the run killed, which ends the chain, in the backoff as anywhere else (a run that
had already ended keeps its ending and carries the kill as a note). Each attempt is
watched on the nodes its record says it runs on: a spare may have taken a node's
place, by the coordinator's own rule (restart.place_here: node/placing.py). When the
policy gives up, the run is marked `gave-up`. What the records say of the chain, and
the marks on them, are chainstate.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import IO

from mntui.sessions.agent import Agent, start_agent
from mntui.sessions.config import JobConfig
from mntui.sessions.errors import LaunchError
from mntui.sessions.events import Event, Phase
from mntui.sessions.history import active_quarantines, apply_policy, chain_line
from mntui.sessions.launch import (
    Attempt,
    ChainView,
    guard_chain,
    heartbeat,
    kill_job,
    launch,
    run_config,
    stop_job,
)
from mntui.sessions.notify import Notice, NotifyEvent, gave_up_summary, restart_summary
from mntui.sessions.poll import NodeState
from mntui.sessions.results import NodeError
from mntui.sessions.runs import RunRecord, RunStatus
from mntui.sessions.ssh import Cluster
from mntui.sessions.watch import (
    LockHeld,
    Watchdog,
    WatchEnd,
    WatchOutcome,
    acquire_lock,
    make_notifier,
    user_kills,
)

from .chainstate import (
    WAIT_STEP,
    Chain,
    attempt_end,
    earlier,
    head,
    mark,
    restart_ends,
    stopped,
    wait_backoff,
)
from .restart import AttemptEnd, Decision, decide, place_here

__all__ = ["DRAIN", "WAIT_STEP", "Chain", "EventSink", "Supervisor", "attempt_end", "wait_backoff"]

EventSink = Callable[[Event], None]
DRAIN = 10.0  # seconds a finishing supervisor waits for its last notifications


class Supervisor:
    def __init__(self, cfg: JobConfig, record: RunRecord, on_event: EventSink) -> None:
        self.chain = Chain(cfg, record, earlier(record))
        self.on_event = on_event
        self.notifier = make_notifier(cfg)
        self.agent: Agent | None = None

    def run(self) -> WatchEnd:
        """Watch attempt after attempt until one ends for good; then give pending
        notifications a bounded moment (the teardown is long done). The chain's lock is
        held throughout (backoffs and relaunches included), and the run's agent serves
        the whole chain, attempt after attempt."""
        with guard_chain(self.chain.record) as guard:
            if guard is None:
                self._say(
                    f"another supervisor guards chain {self.chain.record.chain}; not watching"
                )
                return WatchEnd(WatchOutcome.STOOD_DOWN)
            with heartbeat(guard):
                self.agent = start_agent(self.chain.cfg.job, self.on_event)
                try:
                    return self._run()
                finally:
                    if self.agent is not None:
                        self.agent.stop()
                    left = self.notifier.close(DRAIN)
                    if left:
                        self._say(f"{len(left)} notification(s) not delivered; see notify.log")

    def _run(self) -> WatchEnd:
        history = self._resume()
        if history is not None:  # a supervisor died in a backoff or mid-relaunch
            nxt = self._next(history)
            if nxt is None:
                return WatchEnd(WatchOutcome.STOOD_DOWN)
            self.chain = nxt
        while True:
            end, last_progress = self._watch(self.chain)
            if end.outcome in (WatchOutcome.STOOD_DOWN, WatchOutcome.STOPPED):
                return end
            if end.outcome is WatchOutcome.FINISHED:
                return end
            killed, _ = user_kills(self.chain.record)
            if killed:
                self._say(f"no restart: the user killed {', '.join(killed)}")
                return end
            history = (*self.chain.history, attempt_end(self.chain, end, last_progress))
            self._quarantine(history[-1])
            nxt = self._next(history)
            if nxt is None:
                return end
            self.chain = nxt

    def _resume(self) -> tuple[AttemptEnd, ...] | None:
        """Where a chain whose supervisor died stands: None to watch its run as it is;
        else the attempts' ends to decide on. A relaunch left half-done is stopped first."""
        rec = self.chain.record
        if rec.status is RunStatus.RESTARTING:
            self._say(f"resuming chain {rec.chain}: its supervisor died in the backoff")
            return restart_ends(rec) or self.chain.history
        if rec.status is not RunStatus.LAUNCHING or rec.attempt == 0:
            return None
        self._say(f"resuming chain {rec.chain}: attempt {rec.attempt} was left mid-launch")
        with Cluster(self.chain.cfg.nodes, self.chain.cfg.ssh) as cluster:
            kill_job(self.chain.cfg, cluster, on_event=self.on_event)
        mark(rec, RunStatus.ABORTED, "aborted", why="its launcher died mid-launch")
        lost = AttemptEnd(rec.attempt, rec.run_id, NodeState.FAILED, None, (), 0.0,
                          "the launch was interrupted (its supervisor died)")  # fmt: skip
        return (*self.chain.history, lost)

    def _watch(self, chain: Chain) -> tuple[WatchEnd, float | None]:
        try:
            lock: IO[str] = acquire_lock(chain.record)
        except LockHeld as exc:
            self.on_event(Event(None, None, Phase.NOTICE, f"{exc}; not watching"))
            return WatchEnd(WatchOutcome.STOOD_DOWN), None
        try:
            with Cluster(chain.cfg.nodes, chain.cfg.ssh) as cluster:
                dog = Watchdog(
                    chain.cfg, chain.record, cluster, on_event=self.on_event,
                    notifier=self.notifier, agent=self.agent,
                )  # fmt: skip
                return dog.run(), dog.obs.last_progress
        finally:
            lock.close()

    def _next(self, history: tuple[AttemptEnd, ...]) -> Chain | None:
        """Decide; on a restart, wait the backoff and launch; a launch that fails is an
        attempt that ended too, decided on again."""
        cfg, record = self.chain.cfg, self.chain.record
        while True:
            decision = decide(cfg.restart, history)
            if not decision.restart:
                self._stop(record, decision, history)
                return None
            cfg, placed = place_here(cfg, history, active_quarantines())
            if placed.stop is not None:  # a node used no more and no spare fits
                self._stop(record, replace(decision, restart=False, why=placed.stop), history)
                return None
            swapped = "; ".join(placed.said)
            n = history[-1].attempt + 1
            ends = [e.plain() for e in history]
            if not mark(record, RunStatus.RESTARTING, "restart", attempt=n, why=decision.why,
                         delay=decision.delay, swapped=swapped, ends=ends):  # fmt: skip
                self._say("no restart: the user killed the chain")
                return None
            text = f"attempt {n}/{cfg.restart.max} in {decision.delay:g}s ({decision.why})"
            text += f"; {swapped}" if swapped else ""
            self._say(text)
            last = history[-1].cause
            told = restart_summary(n, cfg.restart.max, decision.delay, decision.why, last, swapped)
            self._tell(NotifyEvent.RESTART, told)
            if not wait_backoff(record, decision.delay):
                self._say("restart cancelled: the run was killed during the backoff")
                return None
            attempt = Attempt(n, record.chain or record.run_id, tuple(e.plain() for e in history))
            try:
                result = launch(cfg, on_event=self.on_event, attempt=attempt)
            except (LaunchError, NodeError) as exc:
                state = NodeState.UNREACHABLE if "unreachable" in str(exc) else NodeState.FAILED
                history = (*history, AttemptEnd(n, None, state, None, (), 0.0, str(exc)))
                self._say(f"attempt {n} did not start: {str(exc).splitlines()[0]}")
                if stopped(record):  # a kill while it started, before its record existed
                    self._say("no restart: the user killed the chain")
                    return None
                record = head(record)  # an aborted attempt's record: the chain's latest
                continue
            ran = run_config(cfg, ChainView((result.record,)))  # a spare the launch routed in
            if stopped(record) or stopped(result.record):
                self._killed_meanwhile(ran)
                return None
            return Chain(ran, result.record, history)

    def _killed_meanwhile(self, cfg: JobConfig) -> None:
        """A user's kill that came while this relaunch was starting may have looked before
        the new run existed: it is the user's word, so the new run is killed too."""
        self._say("the chain was killed during the relaunch: stopping the new attempt")
        with Cluster(cfg.nodes, cfg.ssh) as cluster:
            stop_job(cfg, cluster, on_event=self.on_event)

    def _quarantine(self, end: AttemptEnd) -> None:
        """`restart.quarantine_after`: this failure's culprit may have earned a quarantine;
        the next placement (place_here) then puts a spare in its place or ends the chain."""
        rule = self.chain.cfg.restart.quarantine_after
        if rule is None or end.culprit is None:
            return
        done = apply_policy(end.culprit, rule)
        if done is not None:
            self._say(done.describe())
            self._tell(NotifyEvent.QUARANTINED, done.describe())

    def _stop(self, record: RunRecord, decision: Decision, history: tuple[AttemptEnd, ...]) -> None:
        if decision.gave_up:
            mark(record, RunStatus.GAVE_UP, "gave-up", why=decision.why, attempts=len(history))
            self._say(f"gave up: {decision.why}; last: {history[-1].cause}")
            line = chain_line(record.job, record.chain)
            self._say(line[2:])
            told = gave_up_summary(decision.why, history[-1].cause, line)
            self._tell(NotifyEvent.GAVE_UP, told)
        elif self.chain.cfg.restart.max > 0:
            self._say(f"no restart: {decision.why}{chain_line(record.job, record.chain)}")

    def _tell(self, event: NotifyEvent, summary: str) -> None:
        rec = self.chain.record
        self.notifier.send(Notice(event, rec.job, rec.run_id, summary, str(rec.dir / "report.txt")))

    def _say(self, text: str) -> None:
        self.on_event(Event(None, None, Phase.NOTICE, text))
