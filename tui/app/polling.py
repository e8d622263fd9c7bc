"""The app's poll chain.

A base class of the app, kept apart so the app module stays one concept. A poll runs in
a thread worker and is re-armed only when the previous one has finished, so a slow node
can never stack polls up; when the run's agent feeds the views (tui/app/following.py), no
poll of our own runs. The watchdog that judges each poll is the base below
(watching.py): under the same lock as `mntui watch`, so the two never both act.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import partial

from textual import work

from mntui.sessions.launch import LineSplitter
from mntui.sessions.poll import NodeProgress, NodeSnapshot, Poller, Verdict
from mntui.sessions.report import load_finding, observations
from mntui.sessions.runs import RunRecord
from mntui.sessions.watch import Judge, Sampler, clusterfeed, next_poll

from .following import START_BACK
from .messages import NodeSnap, Notice, PollDone
from .pace import Pace
from .streaming import Streaming
from .watching import Watching

LOG_KEEP = 5000  # lines of log kept per node in the app


class Polling(Watching, Streaming):
    """The polling side of MntuiApp; the app keeps the state named here."""

    splitters: dict[str, LineSplitter]
    polling_enabled: bool
    poll_timer_pending: bool
    poll_inflight: bool
    pace: Pace
    progress_line: str

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
        self.fitted = None  # every view's verdict was cleared above: fit them again
        # a spare a launch routed in (a quarantine) gets a pane; it has no connection
        # here: a run watched from here is the headless watchdog's, which reads the record
        unseen = [n.node for n in record.nodes if n.node not in self.cluster.nodes]
        self.fit_panes({n.node: n.rank for n in record.nodes}, f"attempt {record.attempt + 1}")
        if unseen and not self.streams(record):
            self.log_event(f"{', '.join(unseen)} run(s) this attempt and are not polled from "
                           "here: `mntui` again polls every node of the run")  # fmt: skip
        if watch_here and record.status.is_live:
            self.take_watch(record)
            if self.lock is not None and (self.cfg.restart.max > 0 or unseen):
                self.release_lock()  # restarts are the headless supervisor's
                self.watcher = "headless (starting)"
                self.hand_over(record, self.generation + 1)
        if self.lock is not None:
            self.sampler = Sampler(self.cfg, record, self.cluster, self.sampled)
            self.sampler.start()
        self.stand_by(record)  # the cluster's run: a lost main is replaced from here
        self.generation += 1
        self.subscribed = False
        self.fresh = set(self.views)
        self.stop_following()
        if self.polling_enabled and self.streams(record):
            self.follow_cluster()  # one stream from the main, no poll of any node
        elif self.lock is None and self.polling_enabled:
            self.try_agent()
        else:
            self.schedule_poll(0)

    def after_board(self) -> None:
        """A board from the cluster's stream shown: the table and header, as after a poll."""
        if self.table_mode:
            self.draw("table", self.refresh_table)
        self.draw("header", self.refresh_header)

    def final_poll(self) -> None:
        """One direct read of the nodes after the coordinator ended; the stream's
        `subscribed` stays on, so nothing re-arms it."""
        if self.poller is not None and not self.poll_inflight:
            self.fresh = set(self.views)  # its reads start the panes over
            self.poller.start_near_end(START_BACK)
            self.poll_inflight = True
            self.poll(self.poller, self.generation)

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
        view = self.views.get(snap.node)
        if view is None:  # a node of the run without a pane here (attach_run said so)
            return
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
        newest = clusterfeed.newer_attempt(rec)
        if newest is None:
            return False
        main = newest.main.node
        moved = f", the main moved to {main}" if main != rec.main.node else ""
        self.log_event(f"attempt {newest.attempt + 1}{moved}: following run {newest.run_id}")
        for v in self.views.values():
            v.log = []
        self.splitters = {n: LineSplitter() for n in self.views}
        self.attach_run(newest, watch_here=False)
        return True

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
        found = load_finding(self.record.dir) if self.record is not None else None
        named = found.suspect if found is not None else None  # the header's straggler too
        for name, view in self.views.items():
            line = f"straggler: {named.line}" if named is not None and named.node == name else None
            seen = (progress.get(name), name in slow or line is not None, line)
            if seen != (view.progress, view.slow, view.straggler):
                view.progress, view.slow, view.straggler = seen
                self.draw("node pane", partial(self.redraw_node, view, False))
