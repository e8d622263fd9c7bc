"""The app's poll chain and its watchdog.

A base class of the app, kept apart so the app module stays one concept. A poll runs in
a thread worker and is re-armed only when the previous one has finished, so a slow node
can never stack polls up; when the run's agent feeds the views (tui/app/following.py), no
poll of our own runs. The watchdog runs here too, under the same lock as `mntui watch`,
so the two never both act, and quitting hands it to a headless one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import partial

from textual import work

from mntui.sessions import notify
from mntui.sessions.config import Action
from mntui.sessions.launch import LineSplitter
from mntui.sessions.poll import (
    NodeProgress,
    NodeSnapshot,
    NodeState,
    Poller,
    Verdict,
    may_still_run,
)
from mntui.sessions.report import Finding, Observations, Suspect, observations, observe
from mntui.sessions.runs import RunRecord, latest
from mntui.sessions.watch import (
    Deadline,
    Judge,
    LockHeld,
    Sampler,
    Trigger,
    acquire_lock,
    next_poll,
    teardown,
    threshold_text,
)

from .drawing import Drawing
from .following import START_BACK
from .messages import KillDone, NodeSnap, Notice, PollDone
from .pace import Pace

LOG_KEEP = 5000  # lines of log kept per node in the app


class Polling(Drawing):
    """The polling and watching side of MntuiApp; the app keeps the state named here."""

    splitters: dict[str, LineSplitter]
    judge: Judge
    obs: Observations
    notifier: notify.Notifier
    polling_enabled: bool
    poll_timer_pending: bool
    poll_inflight: bool
    due: tuple[Deadline, ...]
    pace: Pace
    progress_line: str
    sampler: Sampler | None = None  # while the app is the run's watchdog
    left_unwatched: str | None = None  # the job runs on, and no watchdog took it over

    def attach_run(self, record: RunRecord, watch_here: bool) -> None:
        """Start showing `record`; act as its watchdog if none is watching it already."""
        assert self.cluster is not None
        self.record = record
        self.poller = Poller(record, self.cluster)
        self.poller.start_near_end(START_BACK)
        self.judge = Judge(self.cfg.watch)
        self.due = ()
        self.obs = observations(self.cfg, record)
        self.pace, self.progress_line = Pace(), ""
        for view in self.views.values():  # nothing of the run shown before stays on screen
            view.progress, view.slow, view.snap, view.verdict = None, False, None, None
        self.draw("views", self.refresh_views)
        self.draw("header", self.refresh_header)
        self.release_lock()
        if watch_here and record.status.is_live:
            self.take_watch(record)
            if self.lock is not None and self.cfg.restart.max > 0:
                self.release_lock()  # restarts are the headless supervisor's
                self.watcher = "headless (starting)"
                self.hand_over(record, self.generation + 1)
        if self.lock is not None:
            self.sampler = Sampler(self.cfg, record, self.cluster, self.sampled)
            self.sampler.start()
        self.generation += 1
        self.subscribed = False
        self.fresh = set(self.views)
        self.stop_following()
        if self.lock is None and self.polling_enabled:
            self.try_agent()
        else:
            self.schedule_poll(0)

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

    def take_watch(self, record: RunRecord) -> None:
        try:
            self.lock = acquire_lock(record)
            self.watcher = "here"
        except LockHeld as exc:
            self.watcher = f"headless (pid {exc.holder})"
            self.log_event(f"watchdog: {exc}")

    def next_poll_delay(self) -> float:
        """The regular interval, or sooner when a deadline of the judge runs out first."""
        interval, now = self.cfg.watch.interval, time.monotonic()
        return max(0.0, next_poll(now, interval, (d.at for d in self.due)) - now)

    def schedule_poll(self, delay: float) -> None:
        """One poll chain only: a poll starts when none is running or already scheduled,
        and none while the agent's stream feeds the views."""
        if self.subscribed or not self.polling_enabled:
            return
        if self.poll_timer_pending or self.poll_inflight:
            return
        self.poll_timer_pending = True
        if delay > 0:
            self.set_timer(delay, self._start_poll)
        else:
            self.call_later(self._start_poll)  # Textual's timers divide by their interval

    def _start_poll(self) -> None:
        self.poll_timer_pending = False
        if self.poll_inflight or self.poller is None or self.subscribed:
            return  # a timer armed before the agent's stream took over stays unused
        self.poll_inflight = True
        self.poll(self.poller, self.generation)

    @work(thread=True, group="poll", exit_on_error=False)
    def poll(self, poller: Poller, generation: int) -> None:
        try:
            snaps = poller.poll(on_node=lambda s: self.post_message(NodeSnap(s, generation)))
        except Exception as exc:  # never let one bad poll kill the polling
            self.post_message(Notice(f"poll failed: {exc}", "error"))
            snaps = {}
        self.post_message(PollDone(snaps, generation, poller.asked()))

    def on_node_snap(self, message: NodeSnap) -> None:
        if message.generation in (None, self.generation):
            self.apply_snapshot(message.snap)

    def apply_snapshot(self, snap: NodeSnapshot, verdict: Verdict | None = None) -> None:
        view = self.views[snap.node]
        view.snap = snap
        view.verdict = verdict or self.judge.verdicts({snap.node: snap})[snap.node]
        if snap.node in self.fresh and snap.reachable:  # our first read of this log
            self.fresh.discard(snap.node)
            self.restart_log(snap.node, snap.new_output)
        else:
            self.apply_log(snap.node, snap.new_output)

    def apply_log(self, node: str, data: bytes) -> None:
        view = self.views[node]
        new_lines = bool(data)
        if new_lines:
            lines = self.splitters[node].feed(data)
            view.log = ((view.log or []) + lines)[-LOG_KEEP:]
        self.draw("node pane", lambda: self.redraw_node(view, new_lines))

    def restart_log(self, node: str, data: bytes) -> None:
        """The pane starts over from `data`: a new source's first bytes, which may
        overlap what the old one showed."""
        view = self.views[node]
        self.splitters[node] = LineSplitter()
        view.log = self.splitters[node].feed(data)[-LOG_KEEP:]
        self.draw("node pane", lambda: self.redraw_node(view, True, restart=True))

    def follow_chain(self) -> bool:
        """A restart's next attempt (same chain, a newer run) replaces the run shown; the
        headless supervisor launched it, and its agent serves the new run too."""
        rec = self.record
        if rec is None or rec.chain is None or self.lock is not None:
            return False
        newest = latest(self.cfg.job)
        if newest is None or newest.run_id == rec.run_id or newest.chain != rec.chain:
            return False
        self.log_event(f"attempt {newest.attempt + 1}: following run {newest.run_id}")
        for v in self.views.values():
            v.log = []
        self.splitters = {n: LineSplitter() for n in self.views}
        self.attach_run(newest, watch_here=False)
        return True

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
            self.views[name].verdict = v
        if self.busy != "kill":  # a kill in progress looks like failures; it is not one
            self.act_on(triggers)

    def note_progress(
        self, progress: Mapping[str, NodeProgress] | None, summary: str | None
    ) -> None:
        """Each node's step, rate and slow mark, and the job's progress line: the agent's
        when it sent them (it read every line since the launch), else our tracker's."""
        tracker = self.obs.tracker
        if progress is None:
            progress = tracker.snapshot() if tracker is not None else {}
        self.progress_line = summary if summary is not None else self.obs.progress
        w = self.cfg.watch
        slow = self.pace.slow(progress, time.time(), w.slow_fraction, w.slow_after)
        for name, view in self.views.items():
            seen = (progress.get(name), name in slow)
            if seen != (view.progress, view.slow):
                view.progress, view.slow = seen
                self.draw("node pane", partial(self.redraw_node, view, False))

    def act_on(self, triggers: list[Trigger]) -> None:
        for t in triggers:
            if self.lock is None:  # someone else (or no one) acts on it
                if t.state.is_problem:
                    self.notify(f"{t.node}: {t.state.value} ({t.why})", severity="warning")
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
        active = may_still_run(v.verdict.state for v in self.views.values() if v.verdict)
        if active:
            from mntui.sessions.watch import WatcherFailed, start_detached

            try:
                start_detached(self.cfg, self.record)
            except WatcherFailed as exc:  # said after the app's last line (run_app)
                self.left_unwatched = (
                    f"mntui: {self.cfg.job} runs UNWATCHED: its headless watchdog did not "
                    f"start: {exc}; `mntui watch` guards it, `mntui kill` stops it"
                )
