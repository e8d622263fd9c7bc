"""The stream's process from here (sessions/watch/clusterfeed.py), with a local `sh`
standing in for `ssh main` (the same argv shape: `... -- host "sh -s"`, the script on
stdin): a silent stream is ended by its guard and says why; a closed one ends its
reader; lines come bounded and whole."""

from __future__ import annotations

import threading
import time

from mntui.sessions.node.wire import feedwire
from mntui.sessions.watch.clusterfeed import FeedStream

LOCAL = ["sh", "-c", "exec sh -s", "sh"]  # `... -- host "sh -s"` lands as ignored words


def test_a_silent_stream_is_ended_and_says_why() -> None:
    line = feedwire.line({"k": "hello", "run": "r", "nodes": [], "pid": 1}).decode()
    s = FeedStream(LOCAL, "main", f"printf '%s' '{line}'\nexec sleep 30\n", silence=1.0)
    t0 = time.monotonic()
    got = list(s.lines())
    assert got == [line.encode()] and time.monotonic() - t0 < 10
    assert s.silent is not None and s.silent.startswith("no word from the main")
    assert s.close() is not None and s.proc.poll() is not None


def test_close_from_another_thread_ends_the_reader() -> None:
    s = FeedStream(LOCAL, "main", "echo greeting\nexec sleep 30\n", silence=60.0)
    got: list[bytes] = []
    heard = s.heard
    reader = threading.Thread(target=lambda: got.extend(s.lines()))
    reader.start()
    deadline = time.monotonic() + 10
    while s.heard == heard and time.monotonic() < deadline:  # it read the greeting,
        time.sleep(0.01)  # and waits in readline for the next line
    s.close()
    reader.join(10)
    assert not reader.is_alive() and got == [b"greeting\n"] and s.silent is None


def test_newer_attempt_is_the_chains_next_recorded_here_and_nothing_else() -> None:
    """The app's look (tui/app/attemptlook.py): the job's latest record, when it is a later
    attempt of the shown run's chain; another chain's run, an earlier attempt, no record
    or a garbled pointer is none. Real record files in this test's state dir."""
    from mntui.sessions.runs import NodeRecord, RunRecord, state_dir
    from mntui.sessions.watch.clusterfeed import newer_attempt

    def rec(run_id: str, attempt: int = 0, chain: str | None = None) -> RunRecord:
        nodes = [NodeRecord("node0", "localhost", 0, "s", "t", "/d")]
        r = RunRecord("nf", run_id, "c.yaml", "127.0.0.1", 1, nodes, chain=chain, attempt=attempt)
        r.create()
        return r

    first = rec("20261126-090000-aaaa", chain="20261126-090000-aaaa")
    assert newer_attempt(first) is None  # it is the latest itself
    rec("20261126-090001-bbbb")  # another chain's
    assert newer_attempt(first) is None
    (state_dir() / "nf" / "latest").write_text("../../etc\n")
    assert newer_attempt(first) is None
    nxt = rec("20261126-090002-cccc", attempt=1, chain=first.run_id)
    got = newer_attempt(first)
    assert got is not None and got.run_id == nxt.run_id
    assert newer_attempt(nxt) is None and newer_attempt(got) is None
