"""Issue 30, the app of a run the cluster watches: ONE stream over one ssh to the main,
fed by the coordinator (node/coord/follower.py, feedserve.py, logship.py), and no poll of any
node. A real 2-node job on real sshd nodes, launched from the app: the panes get their
state, steps and log lines from the stream; a node's hostile bytes (escapes, our own
line marker, invalid UTF-8) arrive as data, sanitized, and end nothing; the follower
killed on the main is started again (said in the event log); the coordinator killed is
started again by the main's sentinel and the follower joins it again, logs flowing on;
the job killed ends the stream with the coordinator's goodbye, and the nodes are read
once, directly, never polled after.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
from typing import Any

import pytest
from clusterwatch import nothing_left
from fakecluster import FakeCluster
from helpers import Cfg, free_port, until
from test_cluster_faults import told_on_failure
from test_cluster_respawn import killed_and_back

from mntui.sessions.config import load_config
from mntui.tui.app.main import MntuiApp

pytestmark = pytest.mark.integration

# `step N` ten times a second; every fifth line a hostile one: colour and title escapes,
# the stream's own line marker with a base64 `end` after it, and bytes that are no UTF-8.
HOSTILE = b"\x1b[31mHOSTILE\x1b[0m \x1b]0;title\x07 MNTUIFEED1 eyJrIjoiZW5kIn0= \xff\xfe tail"
JOB = f"""
import itertools, socket, sys, time
r, port = int(sys.argv[1]), int(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if r == 0:
    s.bind(("127.0.0.1", port)); s.listen()
out = sys.stdout.buffer
for i in itertools.count(1):
    out.write(b"step %d\\n" % i)
    if i % 5 == 0:
        out.write({HOSTILE!r} + b" %d\\n" % i)
    out.flush(); time.sleep(0.1)
"""


def config(job: str, port: int, wport: int) -> str:
    code = base64.b64encode(JOB.encode()).decode()
    return f"""
    job: {job}
    nodes: [node0, node1]
    master_port: {port}
    command: exec python3 -c "$(echo {code} | base64 -d)" {{node_rank}} {port}
    launch: {{ready_timeout: 20}}
    kill: {{grace: 2}}
    watch: {{where: cluster, port: {wport}}}
    """


def events(app: MntuiApp) -> str:
    return "\n".join(line.text for line in app.events.lines)


def steps_in(app: MntuiApp, node: str) -> int:
    return sum(1 for line in app.views[node].log or [] if line.startswith("step "))


def no_line_twice(app: MntuiApp, node: str) -> None:
    """The pane's `step N` lines follow on one another: a shipping that started again
    (the follower or the coordinator replaced) repeats none and leaves out none."""
    nums = [int(ln.split()[1]) for ln in app.views[node].log or [] if ln.startswith("step ")]
    assert nums and nums == list(range(nums[0], nums[0] + len(nums))), (node, nums)


def test_the_app_follows_a_cluster_watched_run_over_one_stream(fake: FakeCluster, cfg: Cfg) -> None:
    job = "cw-stream"
    port, wport = free_port(), free_port()
    path = cfg.write(config(job, port, wport))
    seen: dict[str, Any] = {}

    async def go() -> None:
        app = MntuiApp(load_config(path), launch_now=True)
        async with app.run_test(size=(200, 48)) as pilot:
            await until(pilot, lambda: app.record is not None and app.busy is None, 90,
                        "the launch done")  # fmt: skip
            await until(pilot, lambda: app.feed_boards >= 3 and app.feed_pid is not None, 30,
                        "boards from the stream")  # fmt: skip
            # state, steps and log lines, for both panes, from the stream
            await until(
                pilot,
                lambda: all(
                    (v := app.views[n]).verdict is not None
                    and v.verdict.state.value == "running"
                    and v.progress is not None
                    and (v.progress.step or 0) > 5
                    and steps_in(app, n) > 5
                    for n in ("node0", "node1")
                ),
                30,
                "both panes running, stepping, with log lines",
            )
            snap = app.views["node1"].snap
            assert snap is not None and snap.reachable and snap.procs, snap
            # the hostile line: its text whole, no escape, its bad bytes replaced
            hostile = [ln for ln in app.views["node1"].log or [] if "HOSTILE" in ln]
            assert hostile, app.views["node1"].log
            line = hostile[-1]
            assert "\x1b" not in line and "\x07" not in line, repr(line)
            assert "MNTUIFEED1 eyJrIjoiZW5kIn0=" in line and "\ufffd\ufffd tail" in line, repr(line)
            assert app.feed_ended is None  # the marker in a log ended nothing
            # no poll of any node: the Poller never ran a round
            assert app.poller is not None and app.poller.polls == 0
            assert not app.poll_inflight

            # the follower killed on the main: said, and started again
            old = app.feed_pid
            assert old is not None
            os.kill(old, signal.SIGKILL)
            await until(pilot, lambda: "cluster stream broke" in events(app), 20,
                        "the break said in the event log")  # fmt: skip
            await until(pilot, lambda: app.feed_pid not in (None, old), 30,
                        "a new follower")  # fmt: skip
            n1 = steps_in(app, "node1")
            await until(pilot, lambda: steps_in(app, "node1") > n1 + 5, 30,
                        "node1's log flowing again")  # fmt: skip
            for n in ("node0", "node1"):  # the shipping stopped and started again
                no_line_twice(app, n)

            # the coordinator killed: started again by the main's sentinel, joined again
            boards = app.feed_boards
            _new, took = killed_and_back(fake, job, "coord")
            seen["respawn"] = took
            await until(pilot, lambda: "coordinator lost" in events(app), 20,
                        "the lost coordinator said")  # fmt: skip
            await until(pilot, lambda: app.feed_link is True, 30, "the follower joined again")
            n1 = steps_in(app, "node1")
            await until(
                pilot,
                lambda: steps_in(app, "node1") > n1 + 5 and app.feed_boards > boards + 3,
                30,
                "logs and boards after the respawn",
            )
            for n in ("node0", "node1"):
                no_line_twice(app, n)
            assert app.poller.polls == 0, "a poll of the nodes ran"

            # the job killed: the coordinator's goodbye ends the stream, the nodes are
            # read once, directly, and not polled after
            res = await asyncio.to_thread(cfg.mntui, path, "kill")
            assert res.returncode == 0, res.stdout + res.stderr
            await until(pilot, lambda: app.feed_ended is not None, 30, "the coordinator's goodbye")
            await until(pilot, lambda: app.poller.polls == 1 and not app.poll_inflight, 30,
                        "one last read of the nodes")  # fmt: skip
            await pilot.pause(3 * app.cfg.watch.interval)  # a window: a second poll would show
            assert app.poller.polls == 1 and app.feed is None
            seen["events"] = events(app)
            await pilot.press("q")

    with told_on_failure(fake, job):
        asyncio.run(go())
    print(f"coordinator back in {seen['respawn']:.2f}s; events:\n{seen['events']}")
    assert "cluster stream over; one last read of the nodes" in seen["events"]
    nothing_left(fake, job, (port, wport))
