"""The app's launch, kill all and restart.

A base class of the app, kept apart so the app module stays one concept. Each runs its
IO in a thread worker and reports through a typed message; a kill goes through the run's
agent while the app follows it (a kill is safe to repeat, so our own connections take
over if the agent goes away midway).
"""

from __future__ import annotations

from textual import work

from mntui.sessions.agent import AgentUnavailable, try_connect
from mntui.sessions.errors import LaunchError
from mntui.sessions.events import Event, Phase
from mntui.sessions.launch import LineSplitter

from .messages import KillDone, LaunchDone
from .polling import Polling
from .render import kill_preview
from .widgets import ConfirmScreen


class JobControl(Polling):
    """The job's operations of MntuiApp; the app keeps the state named here."""

    watchdog_enabled: bool
    unwatched: str | None = None  # why the launch's headless watchdog did not start

    def action_launch(self, restart: bool = False) -> None:
        if not self.claim("launch"):
            return
        self.log_event(f"launching {self.cfg.job} on {len(self.cfg.nodes)} node(s)...")
        self.forget_shown()
        self.do_launch(restart)

    def forget_shown(self) -> None:
        """The run on screen is not the one starting: its verdicts leave the panes and the
        header at once (the new run's come when it is attached), and nothing of it is
        followed meanwhile (a late board of it would paint them back)."""
        self.generation += 1
        self.stop_following()
        for view in self.views.values():
            view.progress, view.slow, view.snap, view.verdict = None, False, None, None
        self.draw("views", self.refresh_views)
        self.draw("header", self.refresh_header)

    @work(thread=True, exclusive=True, group="ops", exit_on_error=False)
    def do_launch(self, restart: bool) -> None:
        from mntui.sessions import launch
        from mntui.sessions.results import NodeError
        from mntui.sessions.watch import WatcherFailed, start_detached

        assert self.cluster is not None
        try:
            result = launch.launch(
                self.cfg, on_event=self.post_event, restart=restart, cluster=self.cluster
            )
        except (LaunchError, NodeError) as exc:
            self.post_message(LaunchDone(None, str(exc)))
            return
        self.unwatched = None
        if result.record.watch_port is not None:
            self.watcher = "cluster"  # the coordinator decides; nothing to start here
        elif self.watchdog_enabled:
            try:  # keeps watching after the app quits; "headless" once it has polled
                start_detached(self.cfg, result.record)
                self.watcher = "headless"
            except WatcherFailed as exc:
                self.unwatched = str(exc)
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
        failed, self.unwatched = self.unwatched, None
        if failed is not None:  # then this app guards the job while it is open
            text = f"the headless watchdog did not start: {failed}"
            self.notify(
                text + "; watching from this app", title="watchdog", severity="error", timeout=30
            )
            self.log_event(text)
        self.attach_run(message.record, watch_here=failed is not None)

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
        from mntui.sessions.agent import kill as kill_via_agent
        from mntui.sessions.launch import stop_job, summarize

        assert self.cluster is not None
        if self.subscribed and self.record is not None:
            client, _ = try_connect(self.record.dir)
            if client is not None:
                with client:
                    try:
                        done = kill_via_agent(client, None, self.cfg.grace, self.post_event)
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
