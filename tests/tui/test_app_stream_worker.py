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

from mntui.sessions.node import feedwire
from mntui.sessions.watch import clusterfeed
from mntui.tui.app import streaming
from mntui.tui.app.attemptlook import LOOK
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


def test_the_chains_next_attempt_recorded_here_is_seen_within_seconds() -> None:
    """The stand-by here records attempt 1 on a new main while the old stream neither
    speaks nor breaks (a lost main's ssh hangs): the look sees it within LOOK seconds
    and says so; the old code waited for the stream's next break (up to 30 s). Real
    record files in this test's state dir; another chain's run is no move."""
    import threading
    import time

    from mntui.tui.app.messages import AttemptMoved

    job, first = "lk", "20261126-090000-aaaa"
    rec = _record(job, first, ("node0", "node1"), chain=first, watch_port=1)
    app = Worker()
    app.generation = 3
    stop = threading.Event()
    look = threading.Thread(target=app.look, args=(rec, 3, stop), daemon=True)
    look.start()
    try:
        _record(job, "20261126-090001-bbbb", ("node0",))  # another chain: no move
        t0 = time.monotonic()
        _record(job, "20261126-090002-cccc", ("node2", "node1"), chain=first, attempt=1)
        deadline = t0 + 3 * LOOK + 5
        while not app.posted and time.monotonic() < deadline:
            time.sleep(0.05)
        took = time.monotonic() - t0
        moved = [m for m in app.posted if isinstance(m, AttemptMoved)]
        assert moved and moved[0].record.run_id == "20261126-090002-cccc", app.posted
        assert moved[0].generation == 3 and took <= LOOK + 1.5, took
        assert moved[0].record.main.node == "node2"
        look.join(5)
        assert not look.is_alive()  # one move said, the look ends
    finally:
        stop.set()


def test_the_look_ends_when_the_stream_stops() -> None:
    import threading

    rec = _record("lk2", "20261126-090000-dddd", ("node0",), chain="20261126-090000-dddd")
    app = Worker()
    stop = threading.Event()
    look = threading.Thread(target=app.look, args=(rec, 0, stop), daemon=True)
    look.start()
    look.join(LOOK * 1.5)  # it looked at least once, and goes on
    assert look.is_alive() and not app.posted
    stop.set()
    look.join(5)
    assert not look.is_alive() and not app.posted


def test_the_app_moves_to_the_new_main_while_the_old_stream_is_silent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The app itself: the old main's stream neither speaks nor breaks (a lost host's ssh
    hangs; its guard waits 10 s, its tries again up to 30 s more), and the stand-by here
    records attempt 1 on node2: the app follows it within seconds, says the main moved,
    and gives node2 a pane. The old app moved only at the stream's break (10 s here).
    A local `sh` that stays silent stands in for `ssh main`, as above."""
    import asyncio
    import time

    from helpers import until

    from mntui.sessions.config.jobconfig import parse_config
    from mntui.sessions.runs import RunStatus
    from mntui.tui.app.main import MntuiApp

    monkeypatch.setattr(clusterfeed, "argv", lambda cfg, host: LOCAL)
    monkeypatch.setattr(clusterfeed, "script", lambda record, sha: "exec sleep 60\n")
    monkeypatch.setattr(streaming, "_sha", lambda: "sha")
    job, first = "mv", "20261126-090000-eeee"
    cfg = parse_config(f"job: {job}\nnodes: [node0, node1]\nspares: [node2]\ncommand: x\n", "m.y")
    rec = _record(job, first, ("node0", "node1"), chain=first, watch_port=1,
                  status=RunStatus.RUNNING)  # fmt: skip
    app = MntuiApp(cfg, record=rec, watchdog=False)
    seen: dict[str, float] = {}

    async def go() -> None:
        async with app.run_test(size=(200, 48)) as pilot:
            await until(pilot, lambda: app.feed is not None, 10, "the first main's stream")
            new = _record(job, "20261126-090010-ffff", ("node2", "node1"), chain=first,
                          attempt=1, watch_port=1, status=RunStatus.RUNNING)  # fmt: skip
            t0 = time.monotonic()
            await until(pilot, lambda: app.record is not None and app.record.run_id == new.run_id,
                        20, "the new attempt followed")  # fmt: skip
            seen["took"] = took = time.monotonic() - t0
            assert took <= 4.5, f"followed {took:.1f} s after the record"
            await until(pilot, lambda: "node2" in app.views, 5, "node2's pane")
            text = "\n".join(line.text for line in app.events.lines)
            assert "the main moved to node2" in text, text
            await pilot.press("q")

    asyncio.run(go())
    print(f"followed {seen['took']:.1f} s after the record")


def test_an_attempt_on_the_same_coordinator_keeps_the_stream() -> None:
    """A restart the coordinator made on the same main, recorded here by a `status`, is
    on the very stream the app follows: no move (it tore a healthy stream down and
    cleared every pane); a later move to another main is still seen."""
    import threading
    import time

    from mntui.tui.app.messages import AttemptMoved

    job, first = "lk3", "20261126-090000-eeee"
    rec = _record(job, first, ("node0", "node1"), chain=first, watch_port=1)
    app = Worker()
    stop = threading.Event()
    look = threading.Thread(target=app.look, args=(rec, 0, stop), daemon=True)
    look.start()
    try:
        _record(job, "20261126-090001-ffff", ("node0", "node1"), chain=first, attempt=1)
        time.sleep(2 * LOOK)  # what must not come: two of the look's rounds, nothing
        assert not app.posted
        _record(job, "20261126-090002-aaaa", ("node2", "node1"), chain=first, attempt=2)
        look.join(3 * LOOK)
        moved = [m for m in app.posted if isinstance(m, AttemptMoved)]
        assert [m.record.run_id for m in moved] == ["20261126-090002-aaaa"]
    finally:
        stop.set()
