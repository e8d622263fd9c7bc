"""The app's cluster stream worker (tui/app/streaming.py) against a newer one: a worker
of an older generation (another run shown meanwhile, a retry) must never take the
app's stream handle, or `stop_stream` closes the wrong stream and leaves the new one
running. Real processes: a local `sh` stands in for `ssh main` (as in
tests/unit/test_clusterfeed.py); the app object is never run, only its worker's body."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from textual.message import Message

from mntui.sessions.node.wire import feedwire
from mntui.sessions.watch import clusterfeed
from mntui.tui.app import streaming
from mntui.tui.app.streaming import Streaming

LOCAL = ["sh", "-c", "exec sh -s", "sh"]
HELLO = feedwire.line({"k": "hello", "run": "r", "nodes": [], "pid": 1}).decode()


class Worker(Streaming):
    """Streaming's worker body on its own: messages kept, not posted."""

    def __init__(self) -> None:
        super().__init__()
        self.posted: list[Message] = []
        self.generation = 0

    def post_message(self, message: Message) -> bool:
        self.posted.append(message)
        return True


def test_a_stale_worker_never_takes_the_new_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clusterfeed, "argv", lambda cfg, host: LOCAL)
    monkeypatch.setattr(clusterfeed, "script", lambda record, sha: f"printf '%s' '{HELLO}'\n")
    monkeypatch.setattr(streaming, "_sha", lambda: "sha")
    app = Worker()
    app.cfg = SimpleNamespace(nodes=(), spares=())  # type: ignore[assignment]
    main = SimpleNamespace(node="node0", rank=0, host="main")
    record: Any = SimpleNamespace(nodes=[main], main=main)
    current = clusterfeed.FeedStream(LOCAL, "main", "exec sleep 30\n", silence=60.0)
    try:
        app.generation, app.feed = 2, current  # the new run's stream is on
        parser = app.feed_parser
        app._follow_main(record, 1)  # an old worker's ssh came up only now
        assert app.feed is current and app.feed_parser is parser
        app.stop_stream()
        assert current.proc.poll() is not None  # the new stream's ssh: closed, reaped
    finally:
        current.close()


def _record(job: str, run_id: str, nodes: tuple[str, ...], **kw: Any) -> Any:
    from mntui.sessions.runs import NodeRecord, RunRecord

    recs = [NodeRecord(n, "localhost", i, "s", "t", f"/d/{n}") for i, n in enumerate(nodes)]
    rec = RunRecord(job, run_id, "c.yaml", "127.0.0.1", 29500, recs, **kw)
    rec.create()
    return rec
