"""The app's drawing: the node panes, the table, the header and the event log.

A base class of the app, kept apart so the app module stays one concept. Drawing is never
allowed to stop the stream or the polls: every view update runs through `draw`, which
logs a failure instead of raising it. Widgets are held by reference, and a widget that
is gone (the app is closing) is skipped, never looked up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from textual.widgets import DataTable, RichLog

from mntui.sessions.errors import log_exception
from mntui.sessions.events import Event
from mntui.sessions.report import load_finding, saved_cause
from mntui.sessions.runs import RunRecord
from mntui.sessions.termsafe import clean
from mntui.sessions.watch.reading import by_cluster

from .messages import EngineEvent
from .ops import Operations
from .render import overall_state, step_cell, table_row
from .widgets import HeaderBar, LogScreen, NodePane, NodeView


class Drawing(Operations):
    """The views of MntuiApp; the app keeps the state named here."""

    header: HeaderBar
    panes: dict[str, NodePane]
    table: DataTable[Any]
    table_mode: bool
    table_columns: list[Any]
    table_cells: dict[str, tuple[object, ...]]
    events: RichLog
    draw_failed: set[str]
    started: float
    progress_line: str
    views: dict[str, NodeView]
    generation: int  # the run shown: moved on when another run (or none) replaces it
    feed_first: str | None  # the coordinator's first failure (streaming.py)

    def post_event(self, event: Event) -> None:
        self.post_message(EngineEvent(event))

    def on_engine_event(self, message: EngineEvent) -> None:
        self.log_event(message.event.format(self.started))

    def log_event(self, text: str) -> None:
        """`text` (node output, error texts) goes in as written: the log has markup off,
        and escape sequences are taken out (termsafe.py), whatever road the text took."""

        def write() -> None:
            if self.events.is_attached:
                self.events.write(clean(text))

        self.draw("event log", write)

    def draw(self, what: str, update: Callable[[], object]) -> None:
        """Run a view update; a failure is written to the error log and shown once per
        kind, never raised: the stream and the poll chain must outlive any drawing bug."""
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

    def feed_stale(self) -> float | None:
        raise NotImplementedError

    def redraw_node(self, view: NodeView, new_lines: bool, restart: bool = False) -> None:
        """`restart`: the view's log was replaced, not appended to (a new source)."""
        if new_lines:
            for screen in self.screen_stack:
                if not (isinstance(screen, LogScreen) and screen.view is view):
                    continue
                if screen.is_attached and restart:
                    screen.reload()
                elif screen.is_attached:
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
        """Rows are added once; later only the cells that changed are touched, and a
        column grows to the widest cell it has held: rows added before the first poll
        (`-` cells) once cut every later cell to its header's width (issue 29)."""
        table = self.table
        if not table.is_attached:
            return
        for v in self.views.values():
            base = table_row(v.node, v.rank, v.snap, v.verdict)
            row = (*base[:3], step_cell(v.progress, v.slow, v.verdict), *base[3:])
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
                    table.update_cell(v.node, col, value, update_width=True)
            self.table_cells[v.node] = row

    def in_attempt(self) -> list[NodeView]:
        """The views of the attempt shown: a node out of it counts in no health."""
        return [v for v in self.views.values() if v.out is None]

    def refresh_header(self) -> None:
        rec = self.record
        elapsed = ""
        if rec is not None:
            secs = int(time.time() - rec.created_at)
            elapsed = f"  {secs // 3600}:{secs // 60 % 60:02d}:{secs % 60:02d}"
        # of the run on screen only: its saved report's, else its coordinator's first failure
        cause = (saved_cause(rec.dir) or self.feed_first) if rec is not None else None
        state = overall_state(self.in_attempt(), rec is not None, cause)
        if self.busy == "launch":  # the run on screen is not the one starting
            state, rec, elapsed = "launching", None, ""
        progress = f"progress: {self.progress_line}  " if self.progress_line else ""
        text = (
            f"{self.cfg.job}  run {rec.run_id if rec else '-'}{elapsed}  {state}  {progress}"
            + self.watch_text(rec)
            + (f"  {self.busy}..." if self.busy else "")
        )
        if rec is not None and (slow := load_finding(rec.dir)) is not None and slow.lines:
            text += "  " + "; ".join(slow.lines)  # the coordinator's straggler
        if (age := self.feed_stale()) is not None:  # a cut: the panes' data is that old
            text = (
                f"OUT OF REACH {age:.0f}s: the cluster's stream is down, its watch goes on  " + text
            )
        if self.header.is_attached:
            self.header.set_text(text)

    def watch_text(self, rec: RunRecord | None) -> str:
        """Who watches the run shown (watch/reading.py), and by which rules."""
        if rec is None:
            return ""
        if not by_cluster(rec):
            return "[unwatched: nothing tears it down]"
        w = self.cfg.watch
        stall = "auto" if w.stall_after == "auto" else f"{w.stall_after:g} s"
        return (
            f"[watched by the cluster: on failure {w.on_failure.value}, "
            f"on stall {w.on_stall.value} after {stall}]"
        )
