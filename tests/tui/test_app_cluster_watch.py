"""Issue 30, in the app: a run the cluster watches is shown, never judged here. The
header says who watches (`watchdog cluster`), the app holds no watch lock (nothing here
decides a teardown), and quitting hands nothing over: no local watchdog is started, the
job trains on guarded by its coordinator."""

from __future__ import annotations

import asyncio
import re

from fakecluster import FakeCluster, alive, pids_with_env, tagged
from helpers import Cfg, free_port, listener_job, until

from mntui.sessions.config import load_config
from mntui.sessions.runs import lock_held
from mntui.tui.app.main import MntuiApp


def test_the_app_shows_a_cluster_watched_run_and_quits_without_a_local_watchdog(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "cwapp"
    extra = f"watch: {{where: cluster, port: {free_port()}}}"
    path = cfg.write(listener_job(job, free_port(), extra=extra))
    config = load_config(path)

    async def go() -> None:
        app = MntuiApp(config, launch_now=True, watchdog=True)

        def header() -> str:
            return str(app.query_one("#header").render())

        async with app.run_test(size=(200, 48)) as pilot:
            await until(pilot, lambda: app.record is not None and app.busy is None, 90,
                        "the launch done")  # fmt: skip
            await until(pilot, lambda: "[watchdog cluster: on failure kill_all" in header(),
                        10, "the header saying the cluster watches")  # fmt: skip
            assert app.lock is None and app.watcher == "cluster"
            assert app.record is not None and app.record.watch_port is not None
            assert not lock_held(app.record.dir / "watch.lock")
            await pilot.press("q")
        assert app.handed is None and app.left_unwatched is None

    asyncio.run(go())
    sentinels = alive(pids_with_env(f"MNTUI_RUN={re.escape(job)}/[^/]+/[^/]+/sentinel"))
    assert len(sentinels) == 2 and tagged(job, "node0") and tagged(job, "node1")
    res = cfg.mntui(path, "kill")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not alive(pids_with_env(f"MNTUI_RUN={re.escape(job)}/.*"))
