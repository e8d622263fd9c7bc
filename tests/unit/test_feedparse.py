"""The manager's parser of the cluster's stream (sessions/watch/feedparse.py): the
follower's lines become the app's typed news, strictly; noise and malformed lines are
counted and change nothing."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from mntui.sessions.node.wire import feedwire
from mntui.sessions.poll import NodeState
from mntui.sessions.watch.feedparse import (
    BoardNews,
    EndNews,
    FeedParser,
    HelloNews,
    LinkNews,
    LogsNews,
)

RANKS = {"node0": 0, "node1": 1}


def entry(at: float, **over: Any) -> dict[str, Any]:
    """A node's snapshot as coord/nodes.json has it (nodewire.check's keys)."""
    proc = {"pid": 10, "ppid": 1, "state": "S", "cpu_percent": 1.0, "rss_mib": 5.0,
            "cmdline": "python3 train.py"}  # fmt: skip
    e = {
        "procs": [proc], "ports": [29500], "load": [0.5, 0.4, 0.3], "ncpu": 8,
        "mem_total_mib": 1000.0, "mem_available_mib": 500.0, "node_time": at,
        "session": True, "pane_dead": False, "pane_pid": 9, "exit_code": None,
        "log_size": 100, "output_age": 0.5, "malformed": 0, "at": at,
    }  # fmt: skip
    return {**e, **over}


def row(**over: Any) -> dict[str, Any]:
    r = {"state": "running", "why": "steps advancing", "connected": True, "step": 40,
         "rate": 9.5, "output_age": 0.2, "exit_code": None, "procs": 1}  # fmt: skip
    return {**r, **over}


def board(now: float, nodes: dict[str, Any], rows: dict[str, Any]) -> bytes:
    status = {"run": "20261126-100001-abcd", "attempt": 0, "nodes": rows}
    return feedwire.line({"k": "board", "now": now, "status": status, "nodes": nodes, "gpus": {}})


def test_a_board_gives_every_node_its_snapshot_verdict_and_steps() -> None:
    p = FeedParser(RANKS)
    now = time.time()
    news = p.feed(board(now, {"node0": entry(now - 1)}, {"node0": row(), "node1": row(step=38)}))
    assert isinstance(news, BoardNews) and news.run == "20261126-100001-abcd" and news.attempt == 0
    s0, s1 = news.snaps["node0"], news.snaps["node1"]
    assert s0.reachable and s0.procs[0].cmdline == "python3 train.py" and s0.ports == (29500,)
    assert s1.reachable and s1.error == "no fresh snapshot from its sentinel"  # no entry yet
    assert news.verdicts["node0"].state is NodeState.RUNNING
    assert news.progress["node1"].step == 38 and news.progress["node0"].rate == 9.5
    assert "at steps 38–40" in news.summary
    # the entry is kept: the next board that carries none still shows it
    news = p.feed(board(now + 1, {}, {"node0": row()}))
    assert isinstance(news, BoardNews) and news.snaps["node0"].procs
    assert p.malformed == 0
    # the job ended: the latest sample has no process, the snapshot before it had one
    news = p.feed(board(now + 2, {}, {"node0": row(state="finished", procs=0, exit_code=0)}))
    assert isinstance(news, BoardNews)
    s0 = news.snaps["node0"]
    assert s0.procs == () and s0.ports == () and s0.exit_code == 0 and s0.ncpu == 8


def test_a_stale_entry_is_no_snapshot_and_a_gone_sentinel_is_unreachable() -> None:
    p = FeedParser(RANKS)
    now = time.time()
    news = p.feed(board(now, {"node0": entry(now - 60)}, {"node0": row(connected=False)}))
    assert isinstance(news, BoardNews)
    assert not news.snaps["node0"].reachable and not news.snaps["node0"].procs
    assert news.snaps["node0"].error == "its sentinel is gone"


def test_malformed_rows_and_lines_are_counted_never_shown() -> None:
    p = FeedParser(RANKS)
    now = time.time()
    rows = {"node0": row(state="exploded"), "node1": row(step=-3)}
    news = p.feed(board(now, {}, rows))
    assert isinstance(news, BoardNews) and not news.verdicts and p.malformed == 2
    bad_entry = entry(now, procs=[{"pid": 1}])
    news = p.feed(board(now, {"node0": bad_entry, "node1": entry(now)}, {}))
    assert isinstance(news, BoardNews) and news.snaps["node1"].procs and p.malformed == 3
    for raw in (
        feedwire.PREFIX + b"%%%\n",
        feedwire.line({"k": "logs", "nodes": {"node0": {"data": "!", "skip": 0, "first": True}}}),
        feedwire.line({"k": "board", "now": "soon", "status": {}, "nodes": {}, "gpus": {}}),
        feedwire.line({"k": "link", "up": "yes", "why": "x"}),
        feedwire.line({"k": "whatever"}),
    ):
        assert p.feed(raw) is None
    assert p.malformed == 8
    assert p.feed(b"Welcome, conda: base environment activated\n") is None and p.noise == 1


def test_logs_are_bytes_whatever_they_hold() -> None:
    p = FeedParser(RANKS)
    raw = b"\x1b[2J MNTUIFEED1 " + base64.b64encode(b'{"k":"end","why":"x"}') + b"\n\xff"
    chunks = {"node1": (raw, 12, False), "node0": (b"step 1\n", 0, True)}
    news = p.feed(feedwire.line({"k": "logs", **feedwire.logs_fields(chunks, 0)}))
    assert isinstance(news, LogsNews)
    got = {c.node: (c.data, c.skipped, c.first) for c in news.chunks}
    assert got == chunks
    spare = {"node9": (b"x", 0, True), "node0": (b"y", 0, False)}  # no pane: left out
    news = p.feed(feedwire.line({"k": "logs", **feedwire.logs_fields(spare, 0)}))
    assert isinstance(news, LogsNews) and [c.node for c in news.chunks] == ["node0"]
    assert p.malformed == 0


def test_hello_link_and_end() -> None:
    p = FeedParser(RANKS)
    assert p.feed(feedwire.line({"k": "hello", "run": "r", "nodes": [], "pid": 42})) == HelloNews(
        42
    )
    news = p.feed(feedwire.line({"k": "link", "up": False, "why": "gone\x1b[2J\nnow"}))
    assert news == LinkNews(False, "gone now")  # one line, no escape
    assert p.feed(feedwire.line({"k": "end", "why": "the chain ended"})) == EndNews(
        "the chain ended"
    )
    assert json.loads(base64.b64decode(feedwire.line({"k": "x"})[len(feedwire.PREFIX) : -1]))


def test_the_attempts_nodes_are_the_boards_a_spare_swapped_in_included() -> None:
    """The coordinator restarted the job with spare node2 in node0's rank: the board's
    status names the attempt's nodes in rank order, and the panes follow them, not the
    record the stream started from; node2's log, which may come before that board, is
    passed on. A name the app was not told of is counted once, never shown."""
    p = FeedParser(RANKS, frozenset({"node2"}))
    now = time.time()
    spare = {"node2": (b"step 1\n", 0, True), "node7": (b"x", 0, True)}
    news = p.feed(feedwire.line({"k": "logs", **feedwire.logs_fields(spare, 0)}))
    assert isinstance(news, LogsNews) and [c.node for c in news.chunks] == ["node2"]
    rows = {"node2": row(step=3), "node1": row(step=4)}
    news = p.feed(board(now, {"node2": entry(now), "node0": entry(now)}, rows))
    assert isinstance(news, BoardNews) and news.ranks == {"node2": 0, "node1": 1}
    assert set(news.snaps) == {"node2", "node1"} and news.snaps["node2"].rank == 0
    assert news.snaps["node2"].procs and news.progress["node2"].step == 3
    assert p.malformed == 0
    for _ in range(2):
        news = p.feed(board(now, {}, {"node2": row(), "evil": row(), "node1": row()}))
        assert isinstance(news, BoardNews) and news.ranks == {"node2": 0, "node1": 1}
    assert p.malformed == 1 and "evil" not in news.snaps
    news = p.feed(board(now, {}, {}))  # no status yet: the last layout stands
    assert isinstance(news, BoardNews) and set(news.ranks) == {"node2", "node1"}
    # a coordinator put in from here lists the nodes as planned: the record's ranks win
    p = FeedParser({"node2": 0, "node1": 1})
    news = p.feed(board(now, {}, {"node1": row(), "node2": row()}))
    assert isinstance(news, BoardNews) and news.ranks == {"node1": 1, "node2": 0}


def test_the_boards_run_is_a_run_id_or_nothing() -> None:
    """The board's run names the attempt in the app's event log and panes: node data,
    taken only as a run id (an escape sequence there reached a pane)."""
    p = FeedParser(RANKS)
    now = time.time()
    status = {
        "run": "\x1b[2J\x1b]0;pwned\x07" + "x" * 1000,
        "attempt": 0,
        "nodes": {"node0": row()},
    }
    raw = feedwire.line({"k": "board", "now": now, "status": status, "nodes": {}, "gpus": {}})
    news = p.feed(raw)
    assert isinstance(news, BoardNews) and news.run is None and p.malformed == 1


def test_each_rows_rank_is_the_coordinators_not_its_place_in_the_file() -> None:
    """status.json's keys are sorted (node10 before node2): a row's place said nothing,
    and a spare took a rank another node had. Each row says its rank; ranks that are
    not one each of 0..n-1 are not believed (the record's, else the place, stand in)."""
    now = time.time()
    p = FeedParser({"node2": 0, "node1": 1}, frozenset({"node3"}))
    rows = {"node1": row(rank=1), "node3": row(rank=0)}  # node3 swapped in for node2
    news = p.feed(board(now, {}, rows))
    assert isinstance(news, BoardNews) and news.ranks == {"node3": 0, "node1": 1}
    bad = {"node1": row(rank=0), "node3": row(rank=0)}  # two rank 0: not believed
    news = p.feed(board(now, {}, bad))
    assert isinstance(news, BoardNews) and news.ranks == {"node1": 1, "node3": 0}
