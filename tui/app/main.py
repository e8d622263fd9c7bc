"""The Textual app: a view and a remote control over the engine, never a second engine.

All IO runs in thread workers that call `mntui.sessions` and post typed messages;
handlers on the UI thread only update views. The app reads a run the one way every
verb does (watch/reading.py): a run the cluster watches through its coordinator's
stream (one ssh to the main; its coordinator decides, nothing here judges or acts), an
unwatched one by polling its nodes, each poll re-armed when the previous one has
finished, so a slow node can never stack polls up. Quitting stops nothing: the job, and
its watch on the cluster, go on.

Every view update runs through `draw`, which logs a failure instead of raising it: a
drawing bug never stops the stream or the polls. Widgets are held by reference, and a
widget that is gone (the app is closing) is skipped, never looked up.

The app is a chain of base classes, one concept each: ops.py (cleanup, doctor, report),
drawing.py (the views), panes.py (the attempt's panes), streaming.py (the cluster's
stream), polling.py (the poll chain), jobcontrol.py (launch, kill all, restart),
nodekeys.py (attach, log, grid or table, help, quit). This module keeps the state they
name, the layout and the order of each poll's work.
"""

from __future__ import annotations

import time
from typing import Any

import libtmux  # noqa: F401  imported before Textual swaps stdout: its import reads stdout.encoding
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.timer import Timer
from textual.widgets import DataTable, Footer, RichLog
from textual.worker import Worker, WorkerState

from mntui.sessions.config import JobConfig
from mntui.sessions.errors import ExitCode
from mntui.sessions.launch import LineSplitter
from mntui.sessions.poll import Poller
from mntui.sessions.report import Observations
from mntui.sessions.runs import RunRecord, latest
from mntui.sessions.ssh import Cluster
from mntui.sessions.watch.feedparse import LogNews
from mntui.sessions.watch.reading import by_cluster

from .historyops import HistoryOps
from .jobcontrol import JobControl
from .messages import PollDone
from .nodekeys import NodeKeys
from .pace import Pace
from .probing import Probing
from .widgets import HeaderBar, NodePane, NodeView

TABLE_ABOVE = 16  # nodes above which the app opens in the compact table view


class MntuiApp(NodeKeys, JobControl, HistoryOps, Probing):
    TITLE = "mntui"
    CSS = """
    #grid { layout: grid; grid-size: 2; grid-gutter: 0 1; grid-rows: 16; overflow-y: auto; }
    #table { height: 1fr; }
    #events { dock: bottom; height: 6; border-top: solid $primary-darken-2; }
    .hidden { display: none; }
    """
    BINDINGS = [  # help and quit first: a narrow footer keeps them (issue 38, 80x24)
        Binding("question_mark", "help", "help"),
        Binding("q", "quit_app", "quit"),
        Binding("l", "launch", "launch"),
        Binding("K", "kill_all", "kill all"),
        Binding("c", "cleanup", "cleanup ports"),
        Binding("r", "restart", "restart"),
        Binding("a,enter", "attach", "attach"),
        Binding("v", "view_log", "log"),
        Binding("t", "toggle_view", "grid/table"),
        Binding("d", "doctor", "doctor"),
        Binding("R", "report", "report", show=False),  # in the help and the teardown notice
        Binding("h", "node_history", "node history"),
        Binding("H", "history", "ledger", show=False),
    ]

    def __init__(
        self,
        cfg: JobConfig,
        *,
        record: RunRecord | None = None,
        launch_now: bool = False,
        restart: bool = False,
        poll: bool = True,
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.record = record if record is not None else latest(cfg.job)
        self.launch_now, self.restart = launch_now, restart
        self.polling_enabled = poll
        self.views = {n.name: NodeView(n.name, n.rank, log=[]) for n in cfg.nodes}
        self.splitters = {n.name: LineSplitter() for n in cfg.nodes}
        self.held: dict[str, LogNews] = {}  # log of nodes without a pane yet
        self.cluster: Cluster | None = None
        self.poller: Poller | None = None
        self.obs = Observations()
        self.busy: str | None = None  # launch / kill / cleanup in progress
        self.generation = 0  # bumped when a new poller replaces the old one
        self.poll_timer_pending = False
        self.poll_inflight = False
        self.subscribed = False  # the cluster's stream feeds the views: no polls of our own
        self.fresh: set[str] = set()  # nodes whose next read of ours starts their pane over
        self.pace = Pace()  # the slow marks
        self.progress_line = ""  # `ranks 0-1 at step 34`, as `mntui status` says it
        self.started = time.time()
        self.table_mode = len(cfg.nodes) > TABLE_ABOVE
        self.table_columns: list[Any] = []
        self.table_cells: dict[str, tuple[object, ...]] = {}
        # The widgets, by reference: no DOM query per snapshot, and none from a timer that
        # fires while the app is closing (`NoMatches: '#header'` once crashed a 32-node run).
        self.header = HeaderBar(id="header")
        self.grid = Grid(id="grid", classes="hidden" if self.table_mode else "")
        self.panes = {v.node: NodePane(v) for v in self.views.values()}
        self.table: DataTable[Any] = DataTable(
            id="table",
            cursor_type="row",
            zebra_stripes=True,
            classes="" if self.table_mode else "hidden",
        )
        self.events = RichLog(id="events", markup=False, max_lines=500)
        self.header_timer: Timer | None = None
        self.draw_failed: set[str] = set()

    # -- layout ---------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield self.header
        with self.grid:
            yield from self.panes.values()
        yield self.table
        yield self.events
        yield Footer()

    def on_mount(self) -> None:
        self.table_columns = self.table.add_columns(
            "node", "rank", "state", "step", "GPUs", "memory", "output", "rtt"
        )
        self.cluster = Cluster(self.cfg.nodes, self.cfg.ssh)
        self.draw("header", self.refresh_header)
        self.draw("views", self.refresh_views)
        self.header_timer = self.set_interval(1.0, self.tick)
        if self.record is not None:
            self.attach_run(self.record)
            if not self.launch_now and by_cluster(self.record):
                self.look_back(self.record)  # what the cluster did while no one looked
        if self.launch_now:
            self.action_launch(self.restart)
        elif self.record is None:
            self.log_event(f"no run of {self.cfg.job} recorded here yet: press l to launch")
            self.probe_nodes()  # the panes show the nodes themselves until a run exists

    def on_resize(self) -> None:
        self.reflow_grid()

    def on_unmount(self) -> None:
        if self.header_timer is not None:
            self.header_timer.stop()
        self.stop_following()
        if self.cluster is not None:
            self.cluster.close()

    # -- each poll: what it saw, then the views ----------------------------------------
    def on_poll_done(self, message: PollDone) -> None:
        if message.generation is not None:
            self.poll_inflight = False
            if message.generation != self.generation:  # from a replaced poller
                self.schedule_poll(0)
                return
        if self.follow_chain():
            return
        try:
            if message.snaps:
                self.observe_poll(message.snaps)
                self.note_progress(message.progress, message.summary)
        finally:  # the next poll is armed only now that this one is done
            if message.generation is not None:
                self.schedule_poll(self.cfg.watch.interval)
        if self.table_mode:
            self.draw("table", self.refresh_table)
        self.draw("header", self.refresh_header)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A failed worker is a notification and an unlocked UI, never a crash."""
        if event.state is WorkerState.ERROR:
            error = event.worker.error
            self.notify(
                f"{event.worker.name}: {type(error).__name__}: {error}",
                title="error",
                severity="error",
                timeout=15,
            )
            self.log_event(f"error in {event.worker.name}: {error!r}")
            if event.worker.group == "ops":
                self.busy = None
            else:
                self.poll_inflight = False
                self.schedule_poll(self.cfg.watch.interval)


def run_app(cfg: JobConfig, *, launch_now: bool = False, restart: bool = False) -> int:
    if not launch_now:  # a live chain is shown where it runs (a spare), not where the file says
        from mntui.sessions.launch import chain_of, run_config

        view = chain_of(cfg.job)
        cfg = run_config(cfg, view) if view is not None and view.live else cfg
    app = MntuiApp(cfg, launch_now=launch_now, restart=restart)
    app.run()
    return app.return_code or ExitCode.OK
