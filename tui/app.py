"""The Textual app: a view and a remote control over the engine, never a second engine.

All IO runs in thread workers that call `mntui.sessions` and post typed messages;
handlers on the UI thread only update views. A poll is re-armed when the previous one
has finished, so a slow node can never stack polls up. The watchdog runs here too,
under the same lock as `mntui watch`, so the two never both act.

One poll stream per run: when a headless watchdog watches the run, the app subscribes
to its agent (sessions/agent.py) and only renders what that agent polled; it polls the
nodes itself only when no agent answers (and tries the agent again now and then).

Drawing is never allowed to stop the watchdog: on each poll the judge decides (and a
teardown starts) before any view is touched, and every view update runs through
`draw`, which logs a failure instead of raising it. Widgets are held by reference, and
a widget that is gone (the app is closing) is skipped, never looked up.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import IO, Any

import libtmux  # noqa: F401  imported before Textual swaps stdout: its import reads stdout.encoding
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.timer import Timer
from textual.widgets import DataTable, Footer, RichLog
from textual.worker import Worker, WorkerState

from mntui.sessions import notify
from mntui.sessions.agentclient import AgentClient, AgentUnavailable, try_connect
from mntui.sessions.config import JobConfig
from mntui.sessions.errors import ExitCode, log_exception
from mntui.sessions.events import Event, Phase
from mntui.sessions.logs import LineSplitter
from mntui.sessions.poll import NodeSnapshot, Poller
from mntui.sessions.postmortem import Observations, observations, observe
from mntui.sessions.remote import Cluster
from mntui.sessions.runs import RunRecord, latest
from mntui.sessions.states import Verdict
from mntui.sessions.watch import Judge, LockHeld, Trigger, acquire_lock, make_notifier, teardown

from .following import Following
from .messages import (
    EngineEvent,
    KillDone,
    LaunchDone,
    NodeSnap,
    Notice,
    PollDone,
)
from .render import kill_preview, overall_state, table_row
from .widgets import (
    ConfirmScreen,
    HeaderBar,
    HelpScreen,
    LogScreen,
    NodePane,
    NodeView,
)

LOG_KEEP = 5000  # lines of log kept per node in the app
TABLE_ABOVE = 16  # nodes above which the app opens in the compact table view
START_BACK = 16 * 1024  # bytes of existing log shown when the app opens on a running job


class MntuiApp(Following):
    TITLE = "mntui"
    CSS = """
    #grid { layout: grid; grid-size: 2; grid-gutter: 0 1; grid-rows: 16; overflow-y: auto; }
    #table { height: 1fr; }
    #events { dock: bottom; height: 6; border-top: solid $primary-darken-2; }
    .hidden { display: none; }
    """
    BINDINGS = [
        Binding("l", "launch", "launch"),
        Binding("K", "kill_all", "kill all"),
        Binding("c", "cleanup", "cleanup ports"),
        Binding("r", "restart", "restart"),
        Binding("a,enter", "attach", "attach"),
        Binding("v", "view_log", "log"),
        Binding("t", "toggle_view", "grid/table"),
        Binding("d", "doctor", "doctor"),
        Binding("R", "report", "report", show=False),  # in the help and the teardown notice
        Binding("question_mark", "help", "help"),
        Binding("q", "quit_app", "quit"),
    ]

    def __init__(
        self,
        cfg: JobConfig,
        *,
        record: RunRecord | None = None,
        launch_now: bool = False,
        restart: bool = False,
        poll: bool = True,
        watchdog: bool = True,
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.record = record if record is not None else latest(cfg.job)
        self.launch_now, self.restart = launch_now, restart
        self.polling_enabled, self.watchdog_enabled = poll, watchdog
        self.views = {n.name: NodeView(n.name, n.rank, log=[]) for n in cfg.nodes}
        self.splitters = {n.name: LineSplitter() for n in cfg.nodes}
        self.cluster: Cluster | None = None
        self.poller: Poller | None = None
        self.judge = Judge(cfg.watch)
        self.obs = Observations()
        self.notifier = make_notifier(cfg)
        self.lock: IO[str] | None = None
        self.watcher = "none"  # who watches the run: "here", "headless (pid N)" or "none"
        self.busy: str | None = None  # launch / kill / cleanup in progress
        self.generation = 0  # bumped when a new poller replaces the old one
        self.poll_timer_pending = False
        self.poll_inflight = False
        self.subscribed = False  # the agent's stream feeds the views: no polls of our own
        self.agent_tried = 0.0  # monotonic time of the last try to reach the agent
        self.agent_snaps = 0  # snapshots that came from the agent
        self.agent_client: AgentClient | None = None
        self.agent_offsets: tuple[int, dict[str, int]] = (-1, {})  # where its stream left
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
            "node", "rank", "state", "GPUs", "memory", "output", "rtt"
        )
        self.cluster = Cluster(self.cfg.nodes, self.cfg.ssh)
        self.draw("header", self.refresh_header)
        self.draw("views", self.refresh_views)
        self.header_timer = self.set_interval(1.0, self.tick)
        if self.record is not None:
            self.attach_run(self.record, watch_here=self.watchdog_enabled)
        if self.launch_now:
            self.action_launch(self.restart)
        elif self.record is None:
            self.log_event(f"no run of {self.cfg.job} recorded here yet: press l to launch")

    def on_resize(self) -> None:
        """Reflow: as many 64-column panes per row as fit, rows sharing the height."""
        cols = min(max(1, self.size.width // 64), len(self.views))
        rows = -(-len(self.views) // cols)
        self.grid.styles.grid_size_columns = cols
        self.grid.styles.grid_rows = str(max(10, (self.size.height - 9) // rows))

    def on_unmount(self) -> None:
        if self.header_timer is not None:
            self.header_timer.stop()
        self.hand_over_watchdog()
        self.stop_following()
        if self.cluster is not None:
            self.cluster.close()

    # -- runs and polling ------------------------------------------------------------
    def attach_run(self, record: RunRecord, watch_here: bool) -> None:
        """Start showing `record`; act as its watchdog if none is watching it already."""
        assert self.cluster is not None
        self.record = record
        self.poller = Poller(record, self.cluster)
        self.poller.start_near_end(START_BACK)
        self.judge = Judge(self.cfg.watch)
        self.obs = observations(self.cfg, record)
        self.release_lock()
        if watch_here and record.status.is_live:
            try:
                self.lock = acquire_lock(record)
                self.watcher = "here"
            except LockHeld as exc:
                self.watcher = f"headless (pid {exc.holder})"
                self.log_event(f"watchdog: {exc}")
            if self.lock is not None and self.cfg.restart.max > 0:
                from mntui.sessions.watch import start_detached

                self.release_lock()  # restarts are the headless supervisor's: it keeps
                start_detached(self.cfg, record)  # the chain going after the app quits
                self.watcher = "headless"
        self.generation += 1
        self.subscribed = False
        self.stop_following()
        if self.lock is None and self.polling_enabled:
            self.try_agent(START_BACK)
        else:
            self.schedule_poll(0)

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
        if self.poll_inflight or self.poller is None:
            return
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

    def apply_snapshot(self, snap: NodeSnapshot, verdict: Verdict | None = None) -> None:
        view = self.views[snap.node]
        view.snap = snap
        view.verdict = verdict or self.judge.verdicts({snap.node: snap})[snap.node]
        self.apply_log(snap.node, snap.new_output)

    def apply_log(self, node: str, data: bytes) -> None:
        view = self.views[node]
        new_lines = bool(data)
        if new_lines:
            lines = self.splitters[node].feed(data)
            view.log = ((view.log or []) + lines)[-LOG_KEEP:]
        self.draw("node pane", lambda: self.redraw_node(view, new_lines))

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
                self.watch_over(message.snaps)
        finally:
            if message.generation is not None:
                self.schedule_poll(self.cfg.watch.interval)  # re-armed only when this one is done
                self.retry_agent()
        if self.table_mode:
            self.draw("table", self.refresh_table)
        self.draw("header", self.refresh_header)

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

    def watch_over(self, snaps: dict[str, NodeSnapshot]) -> None:
        """The watchdog's turn, before any drawing: judge, and act on what it decides."""
        verdicts, triggers = self.judge.judge(snaps, time.monotonic())
        observe(self.obs, snaps, verdicts)
        for name, v in verdicts.items():
            self.views[name].verdict = v
        if self.busy != "kill":  # a kill in progress looks like failures; it is not one
            self.act_on(triggers)

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
        done = teardown(self.cfg, self.record, self.cluster, trigger, self.post_event, self.obs)
        why = done.report.headline if done.report else f"{trigger.node} {trigger.state.value}"
        path = str(self.record.dir / "report.txt") if done.report else None
        event = notify.NotifyEvent.TEARDOWN
        self.notifier.send(notify.Notice(event, self.record.job, self.record.run_id, why, path))
        summary = f"watchdog tore the job down: {why} (R: the report)"
        self.post_message(KillDone(done.clean, summary))

    # -- launch / kill / cleanup -----------------------------------------------------
    def post_event(self, event: Event) -> None:
        self.post_message(EngineEvent(event))

    def on_engine_event(self, message: EngineEvent) -> None:
        self.log_event(message.event.format(self.started))

    def log_event(self, text: str) -> None:
        """`text` (node output, error texts) goes in as written: the log has markup off."""

        def write() -> None:
            if self.events.is_attached:
                self.events.write(text)

        self.draw("event log", write)

    def action_launch(self, restart: bool = False) -> None:
        if not self.claim("launch"):
            return
        self.log_event(f"launching {self.cfg.job} on {len(self.cfg.nodes)} node(s)...")
        self.do_launch(restart)

    @work(thread=True, exclusive=True, group="ops", exit_on_error=False)
    def do_launch(self, restart: bool) -> None:
        from mntui.sessions import launch
        from mntui.sessions.remote import NodeError
        from mntui.sessions.watch import start_detached

        assert self.cluster is not None
        try:
            result = launch.launch(
                self.cfg, on_event=self.post_event, restart=restart, cluster=self.cluster
            )
        except (launch.LaunchError, NodeError) as exc:
            self.post_message(LaunchDone(None, str(exc)))
            return
        if self.watchdog_enabled:
            start_detached(self.cfg, result.record)  # keeps watching after the app quits
            self.watcher = "headless"
        self.post_message(LaunchDone(result.record, None))

    def on_launch_done(self, message: LaunchDone) -> None:
        self.busy = None
        if message.error:
            self.notify(
                message.error.splitlines()[0], title="launch failed", severity="error", timeout=15
            )
            self.log_event(message.error)
            return
        assert message.record is not None
        self.notify(f"{self.cfg.job} running on {len(self.cfg.nodes)} node(s)", title="launched")
        for v in self.views.values():
            v.log = []
        self.splitters = {n: LineSplitter() for n in self.views}
        self.attach_run(message.record, watch_here=False)

    def action_kill_all(self, then_launch: bool = False) -> None:
        if not self.claim(None):  # `busy` only once the user says yes
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.busy = "kill"
                self.release_lock()
                self.do_kill(then_launch)

        verb = "Restart" if then_launch else "Kill"
        title = f"{verb} {self.cfg.job} on all {len(self.views)} node(s)?"
        self.push_screen(
            ConfirmScreen(
                title,
                kill_preview(list(self.views.values()), self.cfg.job, self.cfg.grace),
                "Kill" if not then_launch else "Restart",
            ),
            answered,
        )

    @work(thread=True, exclusive=True, group="ops", exit_on_error=False)
    def do_kill(self, then_launch: bool) -> None:
        """On the agent's open connections while we follow it; else (or if it goes away
        midway: a kill is safe to repeat) on ours."""
        from mntui.sessions import agentclient
        from mntui.sessions.kill import stop_job, summarize

        assert self.cluster is not None
        if self.subscribed and self.record is not None:
            client, _ = try_connect(self.record.dir)
            if client is not None:
                with client:
                    try:
                        done = agentclient.kill(client, None, self.cfg.grace, self.post_event)
                        self.post_message(KillDone(*done, then_launch))
                        return
                    except AgentUnavailable as exc:
                        self.post_event(Event(None, None, Phase.NOTICE, f"agent: {exc}"))
        clean, summary = summarize(
            self.cfg.job, stop_job(self.cfg, self.cluster, on_event=self.post_event)
        )
        self.post_message(KillDone(clean, summary, then_launch))

    def on_kill_done(self, message: KillDone) -> None:
        self.busy = None
        self.release_lock()
        self.watcher = "none"
        self.notify(
            message.summary,
            title="kill",
            severity="information" if message.clean else "error",
            timeout=10,
        )
        self.log_event(message.summary)
        if message.then_launch and message.clean:
            self.action_launch()
        else:
            self.schedule_poll(0)

    def action_restart(self) -> None:
        self.action_kill_all(then_launch=True)

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

    # -- attach, views, quit ---------------------------------------------------------
    def focused_node(self) -> str:
        if self.table_mode:
            return list(self.views)[min(self.table.cursor_row, len(self.views) - 1)]
        focused = self.focused
        if isinstance(focused, NodePane):
            return focused.view.node
        return self.cfg.main

    def attach_command(self, node: str) -> list[str]:
        from mntui.sessions.attach import attach_argv

        argv = attach_argv(self.cfg, node, inside_tmux=False)
        return ["env", "-u", "TMUX", *argv]  # nest inside this terminal; detach returns here

    def action_attach(self) -> None:
        node = self.focused_node()
        argv = self.attach_command(node)
        with self.suspend():
            print(f"attaching to {node} (detach with Ctrl-b d to come back to mntui)", flush=True)
            subprocess.run(argv)

    def action_view_log(self) -> None:
        self.push_screen(LogScreen(self.views[self.focused_node()]))

    def action_toggle_view(self) -> None:
        self.table_mode = not self.table_mode
        self.grid.set_class(self.table_mode, "hidden")
        self.table.set_class(not self.table_mode, "hidden")
        self.draw("views", self.refresh_views)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_quit_app(self) -> None:
        self.notify("the job keeps running; `mntui kill` stops it", timeout=3)
        self.exit(message=Text(f"mntui: left {self.cfg.job} running (mntui status / mntui kill)"))

    def release_lock(self) -> None:
        if self.lock is not None:
            self.lock.close()
            self.lock = None

    def hand_over_watchdog(self) -> None:
        """Quitting never stops the job, nor its watching: a headless watchdog takes over."""
        if self.lock is None or self.record is None:
            return
        self.release_lock()
        active = any(
            v.verdict is not None and v.verdict.state.is_active for v in self.views.values()
        )
        if active:
            from mntui.sessions.watch import start_detached

            start_detached(self.cfg, self.record)

    # -- drawing ---------------------------------------------------------------------
    def draw(self, what: str, update: Callable[[], object]) -> None:
        """Run a view update; a failure is written to the error log and shown once per
        kind, never raised: the poll chain and the watchdog must outlive any drawing bug."""
        try:
            update()
        except Exception as exc:
            if what in self.draw_failed:
                return
            self.draw_failed.add(what)
            log = log_exception(f"app: drawing the {what}", exc)
            try:
                self.notify(
                    f"could not draw the {what}: {type(exc).__name__}: {exc}"
                    + (f" (traceback in {log})" if log else ""),
                    severity="error",
                    timeout=15,
                )
            except Exception:
                pass

    def tick(self) -> None:
        self.draw("header", self.refresh_header)

    def redraw_node(self, view: NodeView, new_lines: bool) -> None:
        if new_lines:
            for screen in self.screen_stack:
                if isinstance(screen, LogScreen) and screen.view is view and screen.is_attached:
                    screen.append_new()
        pane = self.panes[view.node]
        if not self.table_mode and pane.is_attached:
            pane.refresh_view()

    def refresh_views(self) -> None:
        if self.table_mode:
            self.refresh_table()
        else:
            for pane in self.panes.values():
                if pane.is_attached:
                    pane.refresh_view()

    def refresh_table(self) -> None:
        """Rows are added once; later only the cells that changed are touched."""
        table = self.table
        if not table.is_attached:
            return
        for v in self.views.values():
            row = table_row(v.node, v.rank, v.snap, v.verdict)
            if v.node not in table.rows:
                table.add_row(*row, key=v.node)
                continue
            old = self.table_cells.get(v.node)
            for i, (col, value) in enumerate(zip(self.table_columns, row, strict=False)):
                if (
                    old is None
                    or str(old[i]) != str(value)
                    or getattr(old[i], "style", None) != getattr(value, "style", None)
                ):
                    table.update_cell(v.node, col, value)
            self.table_cells[v.node] = row

    def refresh_header(self) -> None:
        rec = self.record
        elapsed = ""
        if rec is not None:
            secs = int(time.time() - rec.created_at)
            elapsed = f"  {secs // 3600}:{secs // 60 % 60:02d}:{secs % 60:02d}"
        who = f"watchdog {self.watcher}"
        w = self.cfg.watch
        text = (
            f"{self.cfg.job}  run {rec.run_id if rec else '-'}{elapsed}  "
            f"{overall_state(list(self.views.values()), self.record is not None)}  "
            f"[{who}: on failure {w.on_failure.value}, on stall {w.on_stall.value}]"
            + (f"  {self.busy}..." if self.busy else "")
        )
        if self.header.is_attached:
            self.header.set_text(text)


def run_app(
    cfg: JobConfig, *, launch_now: bool = False, restart: bool = False, watchdog: bool = True
) -> int:
    app = MntuiApp(cfg, launch_now=launch_now, restart=restart, watchdog=watchdog)
    app.run()
    return app.return_code or ExitCode.OK
