"""Issue 39, finding 4: a main woken from a freeze restarted the job on itself, its worker
gone: attempt 1's rank 0 started on the main, then the coordinator found no sentinel on
the worker and stopped it. No rank of a relaunch starts now before every node's
sentinel is connected (node/chain/relaunch.py). A real board, real channels."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from test_node_chain_review import Successor, _sentinel, config

from mntui.sessions.node.chain.chainlog import ChainLog
from mntui.sessions.node.chain.relaunch import relaunch
from mntui.sessions.node.wire import frames


def _answering(ch: frames.Channel) -> list[str]:
    """What the sentinel was told, each kill answered as a sentinel answers it."""
    told: list[str] = []

    def serve() -> None:
        try:
            while True:
                msg: dict[str, Any] = ch.recv(timeout=None)
                told.append(msg["k"])
                if msg["k"] == "kill":
                    ch.send("done", re=msg.get("id"), ok=True, result={"found": []})
        except (OSError, frames.Refused):
            pass

    threading.Thread(target=serve, daemon=True).start()
    return told


def test_no_rank_starts_while_a_nodes_sentinel_is_away(tmp_path: Path) -> None:
    out = tmp_path / "coord"
    out.mkdir()
    cfg = config(spares=())
    c = Successor(out, cfg)
    told = _answering(_sentinel(c.board, "g0"))  # g1's sentinel never connects
    why = relaunch(c, 1, ChainLog(c.board, cfg))
    assert why is not None and why.startswith("attempt ")
    assert why.endswith(" did not start: no sentinel connected on g1: nothing started"), why
    assert "start" not in told, told
