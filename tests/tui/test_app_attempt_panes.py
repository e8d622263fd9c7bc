"""The app's panes follow the attempt's nodes (tui/app/panes.py), from the cluster's
stream as recorded frames: the coordinator restarted the job with spare node2 in
node0's rank. node2 gets a pane, with the log lines its sentinel shipped before the
board that named it (held, not dropped); node0 is shown out of the attempt, and counts
in no health. The old app had one pane per configured node, fixed: node2's work was
shown nowhere and node0 kept its last state."""

from __future__ import annotations

import asyncio
import time

import pytest
from helpers import until

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.node.wire import feedwire
from mntui.sessions.poll import NodeState
from mntui.sessions.watch.feedparse import FeedParser, LogNews
from mntui.tui.app.main import MntuiApp
from mntui.tui.app.messages import FeedNews
from mntui.tui.app.panes import HOLD
from mntui.tui.app.widgets import NodePane

CONFIG = "job: sw\nnodes: [node0, node1]\nspares: [node2]\ncommand: x\n"


def row(step: int) -> dict[str, object]:
    return {"state": "running", "why": "steps advancing", "connected": True, "step": step,
            "rate": 9.5, "output_age": 0.2, "exit_code": None, "procs": 1}  # fmt: skip


def run_of(attempt: int) -> str:
    return f"20261126-1000{attempt:02d}-abcd"


def board(rows: dict[str, object], attempt: int) -> bytes:
    status = {"run": run_of(attempt), "attempt": attempt, "nodes": rows}
    obj = {"k": "board", "now": time.time(), "status": status, "nodes": {}, "gpus": {}}
    return feedwire.line(obj)


def logs(chunks: dict[str, tuple[bytes, int, bool]]) -> bytes:
    return feedwire.line({"k": "logs", **feedwire.logs_fields(chunks, 1)})


def test_a_spare_swapped_in_gets_a_pane_and_the_node_it_replaced_is_shown_out() -> None:
    cfg = parse_config(CONFIG, "sw.yaml")
    app = MntuiApp(cfg, poll=False)
    parser = FeedParser({"node0": 0, "node1": 1}, frozenset({"node2"}))

    async def go() -> None:
        async with app.run_test(size=(200, 48)) as pilot:

            def post(raw: bytes) -> None:
                news = parser.feed(raw)
                assert news is not None, raw
                app.post_message(FeedNews(app.generation, news))

            post(board({"node0": row(5), "node1": row(5)}, 0))
            await until(pilot, lambda: app.views["node0"].progress is not None, 10, "board 0")
            # attempt 2: node2's first lines come before the board that names it
            post(logs({"node2": (b"node2 step 1\nnode2 step 2\n", 0, True)}))
            post(logs({"node2": (b"node2 step 3\n", 0, False)}))
            await pilot.pause()
            post(board({"node2": row(3), "node1": row(3)}, 1))
            await until(pilot, lambda: "node2" in app.views, 10, "node2's pane")
            await until(pilot, lambda: bool(app.query("#pane-node2")), 10, "mounted")
            v2 = app.views["node2"]
            assert v2.rank == 0 and v2.log == ["node2 step 1", "node2 step 2", "node2 step 3"]
            assert isinstance(app.panes["node2"], NodePane)
            await until(pilot, lambda: v2.progress is not None, 10, "node2's step")
            v0 = app.views["node0"]
            assert v0.out is not None and v0.verdict is not None
            assert v0.verdict.state is NodeState.NOT_RUNNING and v0.snap is None
            assert [v.node for v in app.in_attempt()] == ["node1", "node2"]
            assert app.panes["node0"].has_class("out")
            text = "\n".join(line.text for line in app.events.lines)
            assert f"node2: in the attempt of run {run_of(1)}, a pane of its own" in text, text
            assert f"node0: not in the attempt of run {run_of(1)}" in text, text
            # node0 back in a later attempt: out no more
            post(board({"node0": row(1), "node1": row(1)}, 2))
            await until(pilot, lambda: v0.out is None, 10, "node0 back")
            assert app.views["node2"].out is not None and v0.rank == 0

    asyncio.run(go())
    assert app._exception is None, app._exception


def test_held_log_is_bounded_and_a_cut_is_said_as_skipped() -> None:
    """A node's chunks held past HOLD: the oldest bytes go, counted as skipped (said when
    the pane shows them), the start stays a start; however many chunks come, empty ones
    included, one chunk of at most HOLD bytes is kept."""
    app = MntuiApp(parse_config(CONFIG, "sw.yaml"), poll=False)
    big = b"x" * (HOLD // 2)
    app.hold(LogNews("node2", big, 0, True))
    app.hold(LogNews("node2", big, 0, False))
    app.hold(LogNews("node2", b"y" * 10, 5, False))  # 10 bytes over HOLD, 5 skipped before
    kept = app.held["node2"]
    assert kept.first and len(kept.data) == HOLD and kept.skipped == 5 + 10
    assert kept.data.endswith(b"y" * 10)
    for _ in range(20_000):  # empty chunks that only count: nothing grows but the count
        app.hold(LogNews("node2", b"", 1, False))
    kept = app.held["node2"]
    assert len(kept.data) == HOLD and kept.skipped == 15 + 20_000
    app.hold(LogNews("node2", b"z" * (4 * HOLD), 0, False))  # one chunk past the bound
    assert len(app.held["node2"].data) == HOLD
    app.hold(LogNews("node2", b"new\n", 0, True))  # a new backlog: the pane starts over
    assert app.held["node2"] == LogNews("node2", b"new\n", 0, True)


def test_a_spares_pane_attaches_where_the_record_says_it_runs() -> None:
    """A swapped-in spare has a pane; attaching to it raised KeyError (the config's nodes
    only), which ends a Textual app with a traceback."""
    from mntui.sessions.launch import attach_argv

    cfg = parse_config(CONFIG, "sw.yaml")
    argv = attach_argv(cfg, "node2", inside_tmux=False, host="10.0.0.9")
    assert "10.0.0.9" in argv and argv[-1].endswith("=sw-node2"), argv
    with pytest.raises(KeyError):
        attach_argv(cfg, "node9", inside_tmux=False)
