"""Issue 30, the app when the main is lost: the stand-by here (started by the app) moves
the chain's next attempt onto the spare, with a coordinator of its own, and the app
follows it within seconds of its record (attemptlook.py), not at the old stream's next
break (up to 30 s later); the spare gets a pane with its log lines from the new main's
stream, and the lost main's pane says it is out of the attempt (panes.py). Real sshd
nodes, a real coordinator, a real stand-by and a real main swap."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import Any

import pytest
from clusterwatch import SPARE_JOB, runs_on, watchers
from fakecluster import FakeCluster, alive, free_port, wait_for
from helpers import Cfg, until
from test_cluster_faults import told_on_failure
from test_cluster_mainswap import REACHED, _lose_main

from mntui.sessions.config import load_config
from mntui.sessions.runs import latest, state_dir
from mntui.tui.app.attemptlook import LOOK
from mntui.tui.app.main import MntuiApp

pytestmark = pytest.mark.integration


def events(app: MntuiApp) -> str:
    return "\n".join(line.text for line in app.events.lines)


def steps_in(app: MntuiApp, node: str) -> int:
    view = app.views.get(node)
    return sum(1 for ln in (view.log if view else None) or [] if ln.startswith("step "))


def test_the_app_follows_the_new_main_within_seconds_and_shows_the_spare(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "cw-appswap"
    path = cfg.write(SPARE_JOB.format(job=job, port=free_port(), wport=free_port()))
    app = MntuiApp(load_config(path), launch_now=True, watchdog=True)
    seen: dict[str, Any] = {}
    held: list[int] = []

    async def go() -> None:
        async with app.run_test(size=(200, 48)) as pilot:
            await until(pilot, lambda: app.record is not None and app.busy is None, 90,
                        "the launch done")  # fmt: skip
            await until(pilot, lambda: app.standby_pid is not None, 30, "the stand-by up")
            await until(pilot, lambda: steps_in(app, "node1") > 5 and app.feed_boards > 2, 30,
                        "the first main's stream")  # fmt: skip
            assert app.record is not None and "node2" not in app.views
            first, old_pid = app.record.run_id, app.feed_pid
            held.extend(_lose_main(fake))

            def followed() -> bool:
                return app.record is not None and app.record.run_id != first

            await until(pilot, followed, 90, "the stand-by's attempt, followed by the app")
            rec = latest(job)
            assert rec is not None  # made the latest when it was recorded: that file's time
            at = (state_dir() / job / "latest").stat().st_mtime
            seen["took"] = took = time.time() - at
            assert app.record is not None and app.record.run_id == rec.run_id
            assert took <= LOOK + 4, f"followed {took:.1f} s after the record"
            assert app.record.main.node == "node2"
            await until(pilot, lambda: "node2" in app.views, 10, "node2's pane")
            await until(pilot, lambda: steps_in(app, "node2") > 5, 60,
                        "node2's log lines from its own stream")  # fmt: skip
            assert app.feed_pid not in (None, old_pid) and app.views["node2"].rank == 0
            v0 = app.views["node0"]
            assert v0.out is not None and v0.verdict is not None, v0
            assert "node0" not in [v.node for v in app.in_attempt()]
            text = events(app)
            assert "the main moved to node2" in text, text
            assert "node0: not in attempt 2" in text, text
            assert app.poller is not None and app.poller.polls == 0, "a poll of the nodes ran"
            seen["events"] = text
            await pilot.press("q")

    try:
        with told_on_failure(fake, job):
            try:
                asyncio.run(go())
            except BaseException:
                print(f"== the app's events:\n{events(app)}")
                raise
        print(f"followed the new main {seen['took']:.1f} s after its record\n{seen['events']}")
        res = cfg.mntui(path, "kill")
        assert res.returncode in (0, 1), res.stdout + res.stderr  # 1: node0 is lost
        wait_for(lambda: not any(runs_on(job, n) for n in REACHED), 20, what="nothing on node1/2")
        wait_for(lambda: not watchers(job, "(sentinel|coord)", "node[12]"), 20, what="watchers")
    finally:
        pid = app.standby_pid
        if pid is not None and alive([pid]):
            os.kill(pid, signal.SIGKILL)
        for p in held:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGCONT)
