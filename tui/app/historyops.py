"""The app's view across runs: a node's failure history (`h` on its pane), the job's goodput
ledger (`H`), and a mark on the pane of each node that caused a failure lately.

A base class of the app, like ops.py. The records are read in a thread worker that
posts one typed message; what it shows holds node names and log text, so it is shown as
plain text (ReportScreen, a Text subtitle), never parsed as markup. A record that cannot
be read is a line in the text, never a crashed worker.
"""

from __future__ import annotations

import time

from rich.text import Text
from textual import work
from textual.app import App
from textual.message import Message

from mntui.sessions.config import JobConfig

from .widgets import NodePane, ReportScreen

RECENT = 7 * 86400.0  # a node that caused a failure this recently is marked
MARKS_EVERY = 30.0  # seconds between two readings of the records for the marks


class HistoryReady(Message):
    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title, self.text = title, text


class NodeMarks(Message):
    def __init__(self, marks: dict[str, str]) -> None:
        super().__init__()
        self.marks = marks


class HistoryOps(App[None]):
    cfg: JobConfig
    panes: dict[str, NodePane]

    def focused_node(self) -> str:
        raise NotImplementedError

    def on_mount(self) -> None:
        self.load_marks()
        self.set_interval(MARKS_EVERY, self.load_marks)  # a new failure gets its mark

    def action_node_history(self) -> None:
        self.load_node_history(self.focused_node())

    def action_history(self) -> None:
        self.load_ledger(self.cfg.job)

    @work(thread=True, group="history", exit_on_error=False)
    def load_node_history(self, node: str) -> None:
        from mntui.sessions import history

        try:
            found = history.scan()
            mine = [h for h in history.fold(found) if h.node == node]
            held = history.active_quarantines()
            marks = dict.fromkeys(held, "quarantined")
            text = history.format_histories(mine, marks) if mine else f"no recorded run used {node}"
            if node in held:
                text += f"\n\n{node} is quarantined {held[node].describe()}"
        except Exception as exc:  # an unreadable state dir is a line, not a crash
            text = f"could not read the records: {type(exc).__name__}: {exc}"
        self.post_message(HistoryReady(f"history of {node} (every recorded run)", text))

    @work(thread=True, group="history", exit_on_error=False)
    def load_ledger(self, job: str) -> None:
        from mntui.sessions import history

        try:
            items = history.ledgers(history.scan(job), time.time())
            text = history.format_ledgers(items) or f"no run of {job} recorded here"
        except Exception as exc:
            text = f"could not read the records: {type(exc).__name__}: {exc}"
        self.post_message(HistoryReady(f"{job}: goodput ledger (`mntui history`)", text))

    @work(thread=True, group="marks", exclusive=True, exit_on_error=False)
    def load_marks(self) -> None:
        from mntui.sessions import history

        now = time.time()
        try:
            recent = history.fold(history.scan(since=RECENT, now=now))
            held = history.active_quarantines(now)
        except Exception:
            return  # no mark is better than a wrong one; `h` says why
        marks = {}
        for h in recent:
            count = h.caused_within(RECENT, now)
            if count:
                marks[h.node] = f"caused {count} failure(s) in 7d · h"
        for node in held:
            marks[node] = "quarantined" + (f" · {marks[node]}" if node in marks else "")
        self.post_message(NodeMarks(marks))

    def on_history_ready(self, message: HistoryReady) -> None:
        self.push_screen(ReportScreen(message.title, message.text))

    def on_node_marks(self, message: NodeMarks) -> None:
        for node, pane in self.panes.items():
            mark = message.marks.get(node)
            pane.border_subtitle = Text(mark) if mark else None
