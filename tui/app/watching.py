"""The app as the run's watchdog: the watch lock it shares with `mntui watch`, the
judge's turn on each poll, the teardown it starts, the sampler's stragglers, and the
headless watchdog it hands the run to when it quits.

A base class of the app, apart from the poll chain (polling.py) because this is the
part that acts on the job: only while the app holds the run's lock (so it and `mntui
watch` never both act), judging each poll before any view is drawn, through the same
teardown as the headless watchdog. The poll chain only reads the nodes and shows them.
"""

from __future__ import annotations

import time

from textual import work

from mntui.sessions import notify
from mntui.sessions.config import Action
from mntui.sessions.poll import NodeSnapshot, NodeState, may_still_run
from mntui.sessions.report import Finding, Observations, Suspect, observe
from mntui.sessions.runs import RunRecord
from mntui.sessions.watch import (
    Deadline,
    Judge,
    LockHeld,
    Sampler,
    Spawned,
    Trigger,
    acquire_lock,
    teardown,
    threshold_text,
)

from .messages import KillDone
from .panes import Panes


class Watching(Panes):
    """The watchdog side of MntuiApp; the app keeps the state named here."""

    judge: Judge
    obs: Observations
    notifier: notify.Notifier
    due: tuple[Deadline, ...]
    sampler: Sampler | None = None  # while the app is the run's watchdog
    left_unwatched: str | None = None  # the job runs on, and no watchdog took it over
    handed: tuple[RunRecord, Spawned] | None = None  # the watchdog quitting started
    standby: str | None = None  # the chain handed to a stand-by here (recover/standby.py)
    standby_pid: int | None = None
    watchdog_enabled: bool

    @work(thread=True, group="watchdog", exit_on_error=False)
    def hand_over(self, record: RunRecord, generation: int) -> None:
        """The headless supervisor keeps the chain going after the app quits; its start
        waits for its first poll (seconds), so it is made here, off the app's thread."""
        from mntui.sessions.watch import WatcherFailed, start_detached

        try:
            start_detached(self.cfg, record)
        except WatcherFailed as exc:
            self.call_from_thread(self.watch_instead, record, generation, str(exc))
        else:
            self.call_from_thread(self.handed_over, generation)

    def handed_over(self, generation: int) -> None:
        if generation == self.generation:
            self.watcher = "headless"
            self.refresh_header()

    def watch_instead(self, record: RunRecord, generation: int, why: str) -> None:
        """The headless one did not start: the app watches while it is open (and
        restarts nothing)."""
        self.log_event(f"watchdog: the headless one did not start: {why}")
        if generation != self.generation or self.record is not record:
            return
        self.take_watch(record)
        if self.lock is not None:
            assert self.cluster is not None
            self.sampler = Sampler(self.cfg, record, self.cluster, self.sampled)
            self.sampler.start()
        self.refresh_header()

    def stand_by(self, record: RunRecord) -> None:
        """A live run the cluster watches, with restarts: its coordinator cannot replace
        its own main, a process here can; the app hands that to `mntui watch` at once
        (it goes on after the app quits), once a chain."""
        chain = record.chain or record.run_id
        if record.watch_port is None or not record.status.is_live or self.standby == chain:
            return
        if self.cfg.restart.max <= 0 or not self.watchdog_enabled:
            return
        self.standby = chain
        if _guarded(record):  # a stand-by runs (maybe mid-swap): starting one would kill it
            self.log_event("stand-by: another process here guards this chain; the app only shows")
            return
        self.start_standby(record)

    @work(thread=True, group="standby", exit_on_error=False)
    def start_standby(self, record: RunRecord) -> None:
        from mntui.sessions.watch import WatcherFailed, start_detached

        try:
            up = start_detached(self.cfg, record)
        except WatcherFailed as exc:
            said = f"stand-by: did not start: {exc}; a lost main is replaced by `mntui watch`"
            self.call_from_thread(self.log_event, said)
        else:
            self.call_from_thread(self.stood_by, up.pid)

    def stood_by(self, pid: int) -> None:
        """Said in the event log; the header's watcher stays the cluster's."""
        self.standby_pid = pid
        self.log_event(f"stand-by here (pid {pid}): if the main is lost, a spare takes its place")

    def take_watch(self, record: RunRecord) -> None:
        if record.watch_port is not None:  # its coordinator decides; the app only shows
            self.watcher = "cluster"
            return
        try:
            self.lock = acquire_lock(record)
            self.watcher = "here"
        except LockHeld as exc:
            self.watcher = f"headless (pid {exc.holder})"
            self.log_event(
                f"watchdog: pid {exc.holder} already watches this run; this app only shows it"
            )

    def watch_over(
        self, snaps: dict[str, NodeSnapshot], asked: dict[str, float] | None = None
    ) -> None:
        """The watchdog's turn, before any drawing: judge, and act on what it decides. A
        freeze counts only up to when its evidence was asked for (the headless rule): a
        slow poll must not stretch a py-spy pause into `frozen_after`."""
        now = time.monotonic()
        verdicts, triggers = self.judge.judge(snaps, now, asked)
        self.due = self.judge.deadlines(snaps, verdicts, now)
        observe(self.obs, snaps, verdicts)
        if self.obs.tracker is not None and self.judge.learn(self.obs.tracker.pace()):
            self.log_event(f"stall threshold: {threshold_text(self.judge)}")
        for name, v in verdicts.items():
            if name in self.views:
                self.views[name].verdict = v
        if self.busy != "kill":  # a kill in progress looks like failures; it is not one
            self.act_on(triggers)

    def act_on(self, triggers: list[Trigger]) -> None:
        for t in triggers:
            if self.lock is None:  # someone else (or no one) acts on it
                if t.state.is_problem:  # R: the watchdog's report, or a snapshot of the nodes
                    self.notify(
                        f"{t.node}: {t.state.value} ({t.why}); R: the report", severity="warning"
                    )
                continue
            if t.action.value == "notify":
                self.notify(f"{t.node}: {t.state.value} ({t.why})", severity="warning")
            elif self.busy is None:
                self.busy = "kill"
                self.teardown(t)  # first: telling the user must not stand in its way
                self.bell()
                self.notify(
                    f"watchdog: {t.node} {t.state.value}; tearing the job down",
                    severity="error",
                    timeout=10,
                )
                break

    @work(thread=True, exclusive=True, group="ops", exit_on_error=False)
    def teardown(self, trigger: Trigger) -> None:
        assert self.cluster is not None and self.record is not None
        if self.sampler is not None:
            # its py-spy must not hold a rank the teardown dumps; the report reads the
            # finding the trigger was decided on, never a later round's
            self.sampler.stop(keep=trigger.finding)
        done = teardown(self.cfg, self.record, self.cluster, trigger, self.post_event, self.obs)
        why = done.report.headline if done.report else f"{trigger.node} {trigger.state.value}"
        path = str(self.record.dir / "report.txt") if done.report else None
        event = notify.NotifyEvent.TEARDOWN
        self.notifier.send(notify.Notice(event, self.record.job, self.record.run_id, why, path))
        summary = f"watchdog tore the job down: {why} (R: the report)"
        self.post_message(KillDone(done.clean, summary))

    def sampled(self, finding: Finding, new: Suspect | None) -> None:
        """The sampler's thread: a newly named straggler goes to the app's thread."""
        if new is not None:
            self.call_from_thread(self.slow_named, new, finding)

    def slow_named(self, s: Suspect, finding: Finding) -> None:
        """Told, and acted on only as `watch.on_slow` says (the sampler decides nothing)."""
        text = f"straggler: {s.line}"
        self.log_event(f"{text} (on_slow: {self.cfg.watch.on_slow})")
        if self.record is not None:
            n = notify.Notice(notify.NotifyEvent.SLOW, self.record.job, self.record.run_id, text)
            self.notifier.send(n)
        self.refresh_header()
        if self.cfg.watch.on_slow is Action.KILL_ALL:
            self.act_on([Trigger(s.node, NodeState.RUNNING, text, Action.KILL_ALL, finding)])
        else:
            self.notify(text, severity="warning", timeout=10)

    def release_lock(self) -> None:
        if self.sampler is not None:
            self.sampler.stop(wait=False)
            self.sampler = None
        if self.lock is not None:
            self.lock.close()
            self.lock = None

    def hand_over_watchdog(self) -> None:
        """Quitting never stops the job, nor its watching: a headless watchdog takes over."""
        if self.lock is None or self.record is None:
            return
        self.release_lock()
        views = self.in_attempt()
        seen = [v.verdict.state for v in views if v.verdict]
        # a node not polled yet may run: quitting before the first poll hands over too
        active = len(seen) < len(views) or may_still_run(seen)
        if active:  # started here, confirmed by run_app once the app is gone: the
            # confirmation waits for the watchdog's first poll, never on the app's loop
            from mntui.sessions.watch import WatcherFailed, signals_deferred, spawn

            try:
                with signals_deferred():
                    self.handed = (self.record, spawn(self.cfg, self.record))
            except WatcherFailed as exc:  # said after the app's last line (run_app)
                self.left_unwatched = unwatched(self.cfg.job, exc)


def unwatched(job: str, why: object) -> str:
    """The app's last line when the watchdog it handed the job to did not start."""
    return (
        f"mntui: {job} runs UNWATCHED: its headless watchdog did not start: {why}; "
        "`mntui watch` guards it, `mntui kill` stops it"
    )


def _guarded(record: RunRecord) -> bool:
    """The chain's lock is held (a `mntui watch` stands by): start_detached would
    kill its tmux session first, whatever it was doing."""
    from mntui.sessions.launch import chain_of, guarded

    view = chain_of(record.job, record)
    return view is not None and guarded(view)
