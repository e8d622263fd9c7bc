"""The app's poll chain: how it reads a run nothing on the cluster watches.

A base class of the app, kept apart so the app module stays one concept. A run the
cluster watches is followed through its coordinator's stream (streaming.py), and none of
these polls runs for it but one, after its coordinator ended. An unwatched run
(`launch --no-watch`) is polled directly: a poll runs in a thread worker and is re-armed
only when the previous one has finished, so a slow node can never stack polls up. Each
node's state is derived from what the poll saw (node/rules/states.py); nothing is judged and
nothing acts on it: no watch runs on this machine (watch/reading.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import partial

from textual import work

from mntui.sessions.launch import LineSplitter
from mntui.sessions.poll import NodeProgress, NodeSnapshot, Poller, Verdict, derive
from mntui.sessions.report import Observations, load_finding, observations, observe
from mntui.sessions.runs import RunRecord
from mntui.sessions.watch import clusterfeed

from .messages import NodeSnap, Notice, PollDone
from .pace import Pace
from .streaming import Streaming

LOG_KEEP = 5000  # lines of log kept per node in the app
START_BACK = 16 * 1024  # bytes of each log a pane starts from on a new source


class Polling(Streaming):
    """The polling side of MntuiApp; the app keeps the state named here."""

    splitters: dict[str, LineSplitter]
    polling_enabled: bool
    poll_timer_pending: bool
    poll_inflight: bool
    poller: Poller | None
    generation: int
    obs: Observations
    pace: Pace
    progress_line: str
    asked_run: str | None = None  # the run whose record the last restart's sync looked for

    def attach_run(self, record: RunRecord) -> None:
        """Start showing `record`: through its coordinator's stream, or by our polls."""
        assert self.cluster is not None
        self.record = record
        self.poller = Poller(record, self.cluster)
        self.poller.start_near_end(START_BACK)
        self.obs = observations(self.cfg, record)
        self.pace, self.progress_line = Pace(), ""
        for view in self.views.values():  # nothing of the run shown before stays on screen
            view.progress, view.slow, view.snap, view.verdict = None, False, None, None
        self.draw("views", self.refresh_views)
        self.draw("header", self.refresh_header)
        self.fitted = None  # every view's verdict was cleared above: fit them again
        # a spare a launch routed in (a quarantine) gets a pane; it has no connection
        # here: an unwatched run's polls do not reach it
        unseen = [n.node for n in record.nodes if n.node not in self.cluster.nodes]
        self.fit_panes({n.node: n.rank for n in record.nodes}, f"attempt {record.attempt + 1}")
        if unseen and not self.streams(record):
            self.log_event(f"{', '.join(unseen)} run(s) this attempt and are not polled from "
                           "here: `mntui` again polls every node of the run")  # fmt: skip
        self.generation += 1
        self.subscribed = False
        self.fresh = set(self.views)
        self.stop_stream()
        if self.polling_enabled and self.streams(record):
            self.follow_cluster()  # one stream from the main, no poll of any node
        else:
            self.schedule_poll(0)

    def stop_following(self) -> None:
        """End what feeds the views now (closing the app, another run)."""
        self.stop_stream()

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

    def schedule_poll(self, delay: float) -> None:
        """One poll chain only: a poll starts when none is running or already scheduled,
        and none while the cluster's stream feeds the views."""
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
            return  # a timer armed before the stream took over stays unused
        self.poll_inflight = True
        self.poll(self.poller, self.generation)

    @work(thread=True, group="poll", exit_on_error=False)
    def poll(self, poller: Poller, generation: int) -> None:
        try:
            snaps = poller.poll(on_node=lambda s: self.post_message(NodeSnap(s, generation)))
        except Exception as exc:  # never let one bad poll kill the polling
            self.post_message(Notice(f"poll failed: {exc}", "error"))
            snaps = {}
        self.post_message(PollDone(snaps, generation))

    def on_node_snap(self, message: NodeSnap) -> None:
        if message.generation in (None, self.generation):
            self.apply_snapshot(message.snap)

    def observe_poll(self, snaps: Mapping[str, NodeSnapshot]) -> None:
        """A poll's states and output into the run's observations: its steps and pace,
        the progress line (report/postmortem.py's Observations, as `report` reads them)."""
        stall = self.stall_after()
        observe(self.obs, snaps, {n: derive(s, stall) for n, s in snaps.items()})

    def stall_after(self) -> float:
        """The stall threshold a poll's states are derived with: the config's, or, with
        `auto`, learnt from the steps the app has read (as `status` derives them)."""
        tracker = self.obs.tracker
        pace = tracker.pace() if tracker is not None else None
        learnt = (pace.step_interval, pace.longest_gap) if pace is not None else (None, None)
        return self.cfg.watch.stall_threshold(*learnt)

    def apply_snapshot(self, snap: NodeSnapshot, verdict: Verdict | None = None) -> None:
        """`verdict`: the coordinator's (the stream's); a poll's state is derived here."""
        view = self.views.get(snap.node)
        if view is None:  # a node of the run without a pane here (attach_run said so)
            return
        view.snap = snap
        view.verdict = verdict or derive(snap, self.stall_after())
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
        """The chain's next attempt, once this machine recorded it (the mirror's sync, at
        a `status` or a kill), replaces the run shown: its coordinator restarted the job."""
        rec = self.record
        if rec is None or rec.chain is None:
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
        self.attach_run(newest)
        return True

    def restarted(self, run: str | None) -> None:
        """The stream's board is of another run than the one shown: the coordinator
        restarted the job. The records are synced from its board as `status` syncs them
        (watch/mirror.py), once a run, and the app shows the new attempt's record; the
        stream goes on (the same coordinator)."""
        rec = self.record
        if rec is None or run is None or run in (rec.run_id, self.asked_run):
            return
        self.asked_run = run
        self.sync_attempt(rec, run, self.generation)

    @work(thread=True, group="sync", exit_on_error=False)
    def sync_attempt(self, record: RunRecord, run: str, generation: int) -> None:
        from mntui.sessions.runs import load_run
        from mntui.sessions.watch.mirror import read_main, sync

        assert self.cluster is not None
        sync(record, read_main(record, self.cluster))
        newest = load_run(record.job, run)
        if newest is not None and newest.chain == (record.chain or record.run_id):
            self.call_from_thread(self.show_attempt, newest, generation)

    def show_attempt(self, record: RunRecord, generation: int) -> None:
        if generation != self.generation or self.cluster is None:
            return
        self.record = record
        self.poller = Poller(record, self.cluster)  # the one direct read after the end
        self.log_event(f"attempt {record.attempt + 1}: following run {record.run_id}")
        self.draw("header", self.refresh_header)

    def note_progress(
        self, progress: Mapping[str, NodeProgress] | None, summary: str | None
    ) -> None:
        """Each node's step, rate and slow mark, and the job's progress line: the
        stream's when it sent them, else our tracker's."""
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
