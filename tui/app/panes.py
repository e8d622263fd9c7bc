"""The app's panes follow the attempt's nodes, and the stream's log chunks reach them.

Why: a chain's attempt may run on other nodes than the config's (a spare the coordinator
swapped in for a culprit, a spare this machine made the main), and the app was built
with one pane per configured node: the spare's work was shown nowhere, and the node it
replaced kept its last state as if it still ran. Now each attempt's nodes (the record's,
then each board's: the coordinator's layout) make the panes: a node new to the app gets
one, a node out of the attempt says so and is no part of the header's count. A log
chunk of a node that has no pane yet (its log may come before the board that names it)
is held, bounded, until its pane comes: its first lines are not lost, and what the
bound cut is said as skipped, never silently.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from functools import partial

from textual.containers import Grid

from mntui.sessions.launch import LineSplitter
from mntui.sessions.poll import NodeState, Verdict
from mntui.sessions.watch.feedparse import LogNews

from .drawing import Drawing
from .widgets import NodePane, NodeView

HOLD = 64 * 1024  # bytes of a node's log held until its pane exists
SKIP_SAID = 10.0  # seconds between two event lines about skipped output


class Panes(Drawing):
    """The pane set of MntuiApp; the app keeps the state named here."""

    grid: Grid
    splitters: dict[str, LineSplitter]
    fitted: dict[str, int] | None = None  # the nodes by rank the panes were last fitted to
    held: dict[str, LogNews]  # the log of each node without a pane yet, as one chunk
    skip_said = 0.0

    def fit_panes(self, ranks: Mapping[str, int], attempt: str) -> None:
        """The panes of `ranks` (an attempt's nodes by rank): a new node gets one, each
        its rank, a node out of the attempt shown as such (its last state is no more)."""
        if not ranks or dict(ranks) == self.fitted:
            return
        self.fitted = dict(ranks)
        added = [n for n in ranks if n not in self.views]
        for node in added:
            view = self.views[node] = NodeView(node, ranks[node], log=[])
            self.splitters[node] = LineSplitter()
            self.panes[node] = NodePane(view)
            self.draw("views", partial(self.grid.mount, self.panes[node]))
        left = []
        for node, view in self.views.items():
            if node in ranks:
                if view.out is not None:
                    view.out, view.verdict = None, None
                view.rank = ranks[node]
            elif view.out is None:
                view.out = f"not in {attempt}"
                view.snap, view.progress, view.slow = None, None, False
                view.verdict = Verdict(NodeState.NOT_RUNNING, view.out)
                left.append(node)
        if added:
            self.log_event(f"{', '.join(added)}: in {attempt}, a pane of its own")
        if left:
            self.log_event(f"{', '.join(left)}: not in {attempt}, shown as such")
        self.draw("views", self.reflow_grid)
        self.draw("views", self.refresh_views)
        self.show_logs(held for node in added if (held := self.held.pop(node, None)) is not None)

    def apply_log(self, node: str, data: bytes) -> None:
        raise NotImplementedError

    def restart_log(self, node: str, data: bytes) -> None:
        raise NotImplementedError

    def reflow_grid(self) -> None:
        """As many 64-column panes per row as fit, rows sharing the height."""
        cols = min(max(1, self.size.width // 64), max(1, len(self.views)))
        rows = -(-len(self.views) // cols)
        self.grid.styles.grid_size_columns = cols
        self.grid.styles.grid_rows = str(max(10, (self.size.height - 9) // rows))

    def show_logs(self, chunks: Iterable[LogNews]) -> None:
        """The stream's chunks on their panes: a `first` one starts its pane over."""
        for c in chunks:
            if c.node not in self.views:
                self.hold(c)
                continue
            if c.first:
                self.restart_log(c.node, c.data)
            else:
                self.apply_log(c.node, c.data)
            if c.skipped:
                self.said_skipped(c.node, c.skipped)

    def hold(self, c: LogNews) -> None:
        """Kept until the node's pane exists, as one chunk of HOLD bytes at most, however
        many come (an empty one only adds its count): past the bound the oldest bytes go
        and are counted as skipped, said when the pane shows them (a start stays a start:
        a pane starts anywhere in a log, and says what it did not get)."""
        kept = self.held.get(c.node)
        if kept is None or c.first:
            kept = c
        else:
            kept = replace(kept, data=kept.data + c.data, skipped=kept.skipped + c.skipped)
        if len(kept.data) > HOLD:
            cut = len(kept.data) - HOLD
            kept = replace(kept, data=kept.data[cut:], skipped=kept.skipped + cut)
        self.held[c.node] = kept

    def said_skipped(self, node: str, n: int) -> None:
        now = time.monotonic()
        if now - self.skip_said >= SKIP_SAID:
            self.skip_said = now
            self.log_event(f"{node}: {n} bytes of output skipped (it prints faster than shown)")
