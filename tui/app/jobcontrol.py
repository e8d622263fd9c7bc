"""The app's launch, kill all and restart.

A base class of the app, kept apart so the app module stays one concept. Each runs its
IO in a thread worker and reports through a typed message; a kill is the one `mntui
kill` makes (launch/userkill.py: a request to the coordinator of a run the cluster
watches, by tag directly on the nodes it does not answer for).
"""

from __future__ import annotations

from textual import work

from mntui.sessions.errors import LaunchError
from mntui.sessions.launch import LineSplitter
from mntui.sessions.watch.reading import UNWATCHED_LINE, by_cluster

from .messages import KillDone, LaunchDone
from .polling import Polling
from .render import kill_preview
from .widgets import ConfirmScreen


class JobControl(Polling):
    """The job's operations of MntuiApp; the app keeps the state named here."""

    quit_after_launch = False  # `q` came during a launch (nodekeys.py)

    def action_quit_app(self) -> None:
        raise NotImplementedError

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

        assert self.cluster is not None
        try:
            result = launch.launch(
                self.cfg, on_event=self.post_event, restart=restart, cluster=self.cluster
            )
        except (LaunchError, NodeError) as exc:
            self.post_message(LaunchDone(None, str(exc)))
            return
        self.post_message(LaunchDone(result.record, None))

    def on_launch_done(self, message: LaunchDone) -> None:
        self.busy = None
        if self.quit_after_launch:  # `q` during the launch: it is done, whole or not at all
            self.call_after_refresh(self.action_quit_app)
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
        if not by_cluster(message.record):  # --no-watch, or `watch.where: here`
            self.log_event(f"run {message.record.run_id} is {UNWATCHED_LINE}")
        self.attach_run(message.record)

    def action_kill_all(self, then_launch: bool = False) -> None:
        if not self.claim(None):  # `busy` only once the user says yes
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.busy = "kill"
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
        """`mntui kill`'s own: what the coordinator answered is synced into the records
        first (watch/mirror.py), so the kill names the attempt it stopped."""
        from mntui.sessions.launch import stop_job, summarize
        from mntui.sessions.watch import sync

        assert self.cluster is not None
        done = stop_job(self.cfg, self.cluster, on_event=self.post_event, mirror=sync)
        clean, summary = summarize(self.cfg.job, done)
        self.post_message(KillDone(clean, summary, then_launch))

    def on_kill_done(self, message: KillDone) -> None:
        self.busy = None
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
