"""One rule for a cluster-watched node's snapshot (sessions/watch/nodeseen.py): `status`
(tui/cli/clusternodes.py) and the app's stream (sessions/watch/feedparse.py) make the
same NodeSnapshot from the same board, a finished node's processes included."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from test_feedparse import entry, row

from mntui.sessions.launch.board import BoardView
from mntui.sessions.node.wire import feedwire
from mntui.sessions.poll.snapshot import NodeSnapshot
from mntui.sessions.watch.feedparse import BoardNews, FeedParser
from mntui.tui.cli.clusternodes import node_seen

NOW = 1_800_000_000.0


def both(ent: dict[str, Any] | None, r: dict[str, Any]) -> tuple[NodeSnapshot, NodeSnapshot]:
    """node0's snapshot as `status` makes it and as the app's stream does."""
    nodes = {} if ent is None else {"node0": ent}
    view = BoardView(status={"nodes": {"node0": r}}, decision=None, alive=True, now=NOW,
                     nodes=nodes, rtt=None)  # fmt: skip
    status, _bad = node_seen("node0", 0, r, view, None)
    p = FeedParser({"node0": 0})
    line = {"k": "board", "now": NOW, "status": {"run": "r", "attempt": 0, "nodes": {"node0": r}},
            "nodes": nodes, "gpus": {}}  # fmt: skip
    news = p.feed(feedwire.line(line))
    assert isinstance(news, BoardNews), p.malformed
    return replace(status.snap, at=0.0), replace(news.snaps["node0"], at=0.0)


@pytest.mark.parametrize(
    ("ent", "r"),
    [
        (entry(NOW - 1), row()),
        (entry(NOW - 1), row(state="finished", procs=0, exit_code=0, output_age=3.0)),
        (entry(NOW - 60), row()),  # stale: no snapshot
        (None, row(connected=False)),  # no entry, its sentinel gone
    ],
)
def test_status_and_the_stream_show_the_same_snapshot(ent: Any, r: dict[str, Any]) -> None:
    status, stream = both(ent, r)
    assert status == stream
    if r["procs"] == 0:  # the coordinator's latest sample has none: `0 procs`, both
        assert status.procs == () and status.ports == () and status.exit_code == 0
