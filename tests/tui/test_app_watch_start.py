"""Issue 29 (3), in the app: its header's `watchdog headless` is said only of a
watchdog that came up; when the headless one dies at start, the app says so and
watches the job itself while it is open (it once said `watchdog headless: on failure
kill_all` of a watcher that had exited at once)."""

from __future__ import annotations

import asyncio
import subprocess

from fakecluster import FakeCluster, tagged
from helpers import HERE_WATCH, Cfg, free_port, listener_job, until

from mntui.sessions.config import load_config
from mntui.tui.app.main import MntuiApp


def test_a_headless_watchdog_that_dies_at_start_leaves_the_app_watching(
    fake: FakeCluster, cfg: Cfg
) -> None:
    # The user's tmux server (the test's own), whose panes die at once: a nologin shell.
    res = subprocess.run(
        ["tmux", "-f", "/dev/null", "new-session", "-d", "-s", "keep", "sleep 600", ";",
         "set", "-g", "default-shell", "/usr/sbin/nologin"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    job = "wsapp"
    path = cfg.write(listener_job(job, free_port(), extra=HERE_WATCH))
    config = load_config(path)

    async def go() -> None:
        app = MntuiApp(config, launch_now=True, watchdog=True)

        def header() -> str:
            return str(app.query_one("#header").render())

        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: app.record is not None and app.busy is None, 90,
                        "the launch done")  # fmt: skip
            assert app.watcher == "here" and app.lock is not None, app.watcher
            await until(pilot, lambda: "watchdog here: on failure kill_all" in header(), 10,
                        "the header saying who watches")  # fmt: skip
            assert "headless" not in header(), header()
            assert app.record is not None
            log = (app.record.dir / "watch.log").exists()
            assert not log or "watching" not in (app.record.dir / "watch.log").read_text()

    asyncio.run(go())
    assert tagged(job, "node0") and tagged(job, "node1")
    assert cfg.mntui(path, "kill").returncode == 0


def test_quitting_the_watching_app_hands_the_job_to_a_watchdog_confirmed_after_it(
    fake: FakeCluster, cfg: Cfg
) -> None:
    """The app that watches a run hands it over when it quits: the watchdog is started on
    the way out and confirmed after the app is gone (its first poll can take seconds,
    which once froze the quitting app on its own loop)."""
    from mntui.sessions.runs import latest, lock_held
    from mntui.sessions.watch import CONFIRM, confirm

    job = "wsquit"
    path = cfg.write(listener_job(job, free_port(), extra=HERE_WATCH))
    assert cfg.mntui(path, "launch", "--no-ui", "--no-watch").returncode == 0
    config = load_config(path)
    app = MntuiApp(config, watchdog=True)

    async def go() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: app.watcher == "here", 30, "the app watching")
            await pilot.press("q")

    asyncio.run(go())
    assert app.handed is not None and app.left_unwatched is None
    assert (record := latest(job)) is not None and record.run_id == app.handed[0].run_id
    up = confirm(*app.handed, CONFIRM)
    assert up.pid > 0 and lock_held(app.handed[0].dir / "watch.lock")
    assert tagged(job, "node0") and tagged(job, "node1")
    assert cfg.mntui(path, "kill").returncode == 0
