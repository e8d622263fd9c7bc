"""Widgets and screens of the app. They render what they are given; they never do IO.

Every text that can come from a node or a config (names, log lines, error texts,
holders, doctor rows) is shown as plain text: a Text object or markup=False, never
parsed as Textual markup, where `[/]` raises and `[@click=...]` is a button. Textual
writes a cell's text to the terminal as it is, so the free texts a screen is given
(titles, details, reports) are made terminal-safe here too (termsafe.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widget import Widget
from textual.widgets import Button, Footer, Input, Label, RichLog, Static

from mntui.sessions.poll import NodeProgress, NodeSnapshot, NodeState, Verdict
from mntui.sessions.termsafe import clean, one_line

from .render import pane_text


@dataclass
class NodeView:
    """What the app knows of one node; the widgets read it, the workers' messages fill it."""

    node: str
    rank: int
    snap: NodeSnapshot | None = None
    verdict: Verdict | None = None
    log: list[str] | None = None
    progress: NodeProgress | None = None  # its training step and rate
    slow: bool = False  # a straggler: below the median rate for a while (pace.py)
    straggler: str | None = None  # the straggler's line, on the node it names
    out: str | None = None  # why the node is in no pane of the attempt shown (panes.py)
    stale: float | None = None  # seconds since the cluster's stream last spoke (it is down)


class NodePane(Widget, can_focus=True):
    """One node: state, GPUs (or CPU and memory), the tail of its log.

    A plain widget whose size the grid fixes: a new snapshot repaints it without a
    layout pass (Static.update lays out the whole screen, 64 times a second at scale).
    """

    DEFAULT_CSS = """
    NodePane { border: round $primary-darken-2; padding: 0 1; height: 100%; overflow: hidden; }
    NodePane:focus { border: round $accent; }
    NodePane.unreachable { opacity: 60%; border: round grey; }
    NodePane.problem { border: heavy $error; }
    NodePane.out { opacity: 50%; border: dashed grey; }
    """

    def __init__(self, view: NodeView) -> None:
        super().__init__(id=f"pane-{view.node}")
        self.view = view
        self.border_title = Text(view.node)
        self._text: Text | None = None

    def render(self) -> Text:
        # Built here, not on update: Textual renders only what is on screen, so the 46 of
        # 64 panes scrolled out of view cost nothing.
        if self._text is None:
            v = self.view
            self._text = pane_text(
                v.node,
                v.rank,
                v.snap,
                v.verdict,
                v.log or [],
                self.size.height or 12,
                v.progress,
                v.slow,
                self.size.width or None,
                v.straggler,
                v.stale,
            )
        return self._text

    def on_resize(self) -> None:
        self.refresh_view()  # how many log lines fit depends on the pane's height

    def refresh_view(self) -> None:
        v = self.view
        self._text = None
        self.refresh()
        state = v.verdict.state if v.verdict else None
        classes = (
            state is NodeState.UNREACHABLE,
            state is not None and state.is_problem and state is not NodeState.UNREACHABLE,
            v.out is not None,
        )
        if classes != (
            self.has_class("unreachable"),
            self.has_class("problem"),
            self.has_class("out"),
        ):  # CSS re-applies are dear
            self.set_class(classes[0], "unreachable")
            self.set_class(classes[1], "problem")
            self.set_class(classes[2], "out")


class HeaderBar(Widget):
    """One line of text, repainted without a layout pass (it changes every second); two
    lines when one does not hold it (issue 38: at 80 columns the progress and the watch
    were cut off), the layout pass paid only when that changes."""

    LINES = 2  # at most: what does not fit in two is cut, as in one before

    DEFAULT_CSS = (
        "HeaderBar { dock: top; height: 1; background: $primary-darken-3; color: $text;"
        " padding: 0 1; }"
    )

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self.text = ""

    def set_text(self, text: str) -> None:
        text = one_line(text)
        if text != self.text:
            self.text = text
            self.fit()
            self.refresh()

    def fit(self) -> None:
        room = max(1, self.size.width - 2)  # the padding
        lines = 1 if not self.size.width or len(self.text) <= room else self.LINES
        if self.styles.height is None or self.styles.height.value != lines:
            self.styles.height = lines

    def on_resize(self) -> None:
        self.fit()

    def render(self) -> Text:
        return Text(self.text)


class ConfirmScreen(ModalScreen[bool]):
    """Yes/no, with the details of what will happen: a kill lists what it will kill."""

    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    #dialog { width: 90; max-width: 95%; height: auto; max-height: 80%;
              border: thick $error; background: $surface; padding: 1 2; }
    #details { height: auto; max-height: 20; margin: 1 0; }
    #buttons { height: 3; align: center middle; }
    """
    BINDINGS = [Binding("y", "answer(True)", "yes"), Binding("n,escape", "answer(False)", "no")]

    def __init__(self, title: str, details: str, yes: str = "Yes") -> None:
        super().__init__()
        self.title_text, self.details, self.yes = one_line(title), clean(details), yes

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.title_text, id="question", markup=False)
            with VerticalScroll(id="details"):
                yield Static(self.details, markup=False)
            with Horizontal(id="buttons"):
                yield Button(f"{self.yes} (y)", variant="error", id="yes")
                yield Button("Cancel (n)", variant="primary", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)


HELP = """\
mntui: one pane per node; the job keeps running when you quit.

  l        launch the job (main first, workers once it is ready)
  K        kill every process of the job on every node (asks first)
  c        cleanup: name what holds the job's ports, free them (asks first)
  r        restart: kill, then launch
  a, Enter attach to the focused node's tmux session (detach: Ctrl-b d)
  v        the focused node's log, large
  d        doctor: preflight checks on every node
  R        report: which rank broke first and why (live run: every rank's stack now)
  h        the focused node's failures across every recorded run
  H        the job's goodput ledger: time trained and lost, per restart chain
  t        grid / table view
  f        follow the log on/off (log view)
  /        filter the log (log view)
  Ctrl+P   command palette
  ?        this help
  q        quit (the job keeps running, and so does its watch on the cluster)

States: starting, running, finished, failed, orphaned (launcher gone, workers alive),
stalled (no output), frozen (processes stopped), unreachable, not-running.
"""


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    #help { width: 92; height: auto; border: thick $primary; background: $surface; padding: 1 2; }
    """
    BINDINGS = [Binding("escape,q,question_mark", "app.pop_screen", "close")]

    def compose(self) -> ComposeResult:
        yield Static(HELP, id="help", markup=False)


class ReportScreen(ModalScreen[None]):
    """A read-only report (the doctor's table, a failure report)."""

    DEFAULT_CSS = """
    ReportScreen { align: center middle; }
    #report { width: 95%; height: 85%; border: thick $primary; background: $surface; padding: 0 1; }
    """
    BINDINGS = [Binding("escape,q,d", "app.pop_screen", "close")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text, self.text = one_line(title), clean(text)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="report"):
            yield Label(self.title_text, markup=False)
            yield Static(self.text, markup=False, id="report-text")


class LogScreen(Screen[None]):
    """One node's log, large: follow on/off and a filter. Lines come from the app's view."""

    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "back"),
        Binding("f", "follow", "follow on/off"),
        Binding("slash", "filter", "filter"),
    ]
    DEFAULT_CSS = """
    #filter { dock: top; display: none; }
    #filter.shown { display: block; }
    """

    def __init__(self, view: NodeView) -> None:
        super().__init__()
        self.view, self.follow, self.pattern = view, True, ""
        self.shown = 0
        # Log lines are shown as written (torch prints `[rank1]:[E1122 ...]`): markup off.
        self.lines = RichLog(id="log", wrap=False, highlight=False, markup=False, max_lines=20000)

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter (substring); Enter to apply, empty to clear", id="filter")
        yield self.lines
        yield Footer()

    def on_mount(self) -> None:
        self.title = f"{self.view.node} [{self.view.rank}] log"
        self.reload()

    def reload(self) -> None:
        self.lines.clear()
        self.shown = 0
        self.append_new()

    def append_new(self) -> None:
        lines = self.view.log or []
        for line in lines[self.shown :]:
            if not self.pattern or self.pattern in line:
                self.lines.write(line, scroll_end=self.follow)
        self.shown = len(lines)

    def action_follow(self) -> None:
        self.follow = not self.follow
        self.lines.auto_scroll = self.follow
        self.notify(f"follow {'on' if self.follow else 'off'}", markup=False)

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.pattern = event.value
        event.input.remove_class("shown")
        self.lines.focus()
        self.reload()
