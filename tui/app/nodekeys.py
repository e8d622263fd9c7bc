"""The app's keys on the focused node and its view: attach to its tmux session, its
full log, grid or table, help, and quit.

A base class of the app, like ops.py and jobcontrol.py, kept apart so the app module
stays its state, layout and the order of each poll's work. Attaching suspends the app
and runs the node's own `tmux attach` over SSH in this terminal: the one place the app
hands the terminal over, so it names where the run is (a swapped-in spare is at the
host its record names, not the config's).
"""

from __future__ import annotations

import subprocess

from rich.text import Text
from textual.containers import Grid

from mntui.sessions.config import JobConfig
from mntui.sessions.runs import RunRecord, read_status

from .drawing import Drawing
from .widgets import HelpScreen, LogScreen, NodePane, NodeView


class NodeKeys(Drawing):
    """The keys of MntuiApp on the focused node; the app keeps the state named here."""

    cfg: JobConfig
    record: RunRecord | None
    busy: str | None
    quit_after_launch = False  # `q` came during a launch: quit once it is done
    views: dict[str, NodeView]
    grid: Grid

    def focused_node(self) -> str:
        if self.table_mode:
            return list(self.views)[min(self.table.cursor_row, len(self.views) - 1)]
        focused = self.focused
        if isinstance(focused, NodePane):
            return focused.view.node
        return self.cfg.main

    def attach_command(self, node: str) -> list[str]:
        """KeyError for a node neither of the config nor of its spares."""
        from mntui.sessions.launch import attach_argv

        rec = self.record  # where the run is: a spare put in is at the host it names
        host = next((n.host for n in rec.nodes if n.node == node), None) if rec else None
        argv = attach_argv(self.cfg, node, inside_tmux=False, host=host)
        return ["env", "-u", "TMUX", *argv]  # nest inside this terminal; detach returns here

    def action_attach(self) -> None:
        node = self.focused_node()
        try:
            argv = self.attach_command(node)
        except KeyError:
            self.log_event(f"{node}: not a node of this config: `mntui attach {node}`")
            return
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
        """Quitting never stops the job; the last line says where it stands (it once said
        "left running" of a job killed a moment before). During a launch the app stays
        until the launch is done, started whole or stopped whole (issue 38: `q` 2.5 s
        into one left the main running, its workers never started)."""
        if self.busy == "launch":
            self.quit_after_launch = True
            said = "a launch is under way: the app quits once it is done (all started or none)"
            self.notify(said, timeout=5)
            self.log_event(said)
            return
        rec = self.record
        status = read_status(rec.job, rec.run_id) or rec.status if rec is not None else None
        if status is not None and status.is_live:
            self.notify("the job keeps running; `mntui kill` stops it", timeout=3)
            text = f"mntui: left {self.cfg.job} running (mntui status / mntui kill)"
        elif rec is not None:
            text = f"mntui: {self.cfg.job} is not running (run {rec.run_id}: {status})"
        else:
            text = f"mntui: {self.cfg.job} has no run here yet (mntui launch)"
        self.exit(message=Text(text))
