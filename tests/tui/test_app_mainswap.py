"""Issue 30, in the app: a run the cluster watches, with restarts and a spare, is handed
to a stand-by here as soon as it is shown (recover/standby.py: the one process that can
replace a lost main), which goes on after the app quits and ends with the chain."""

from __future__ import annotations

import asyncio

from clusterwatch import SPARE_JOB
from fakecluster import FakeCluster, alive, wait_for
from helpers import Cfg, free_port, until

from mntui.sessions.config import load_config
from mntui.sessions.launch.chains import chain_of, guarded
from mntui.tui.app.main import MntuiApp


def test_the_app_hands_a_cluster_run_with_restarts_to_a_stand_by_here(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "cw-appstand"
    path = cfg.write(SPARE_JOB.format(job=job, port=free_port(), wport=free_port()))
    config = load_config(path)
    app = MntuiApp(config, launch_now=True, watchdog=True)

    async def go() -> None:
        async with app.run_test(size=(200, 48)) as pilot:
            await until(pilot, lambda: app.record is not None and app.busy is None, 90,
                        "the launch done")  # fmt: skip
            await until(pilot, lambda: app.standby_pid is not None, 30, "the stand-by up")
            assert app.lock is None and app.watcher == "cluster", app.watcher
            await pilot.press("q")

    asyncio.run(go())
    pid = app.standby_pid
    assert pid is not None and alive([pid]), "the stand-by goes on after the app quits"
    view = chain_of(job)
    assert view is not None and guarded(view), "it holds the chain, as a supervisor does"
    again = MntuiApp(config, watchdog=True)  # a second app: it only shows

    async def show() -> None:
        async with again.run_test(size=(200, 48)) as pilot:
            await until(pilot, lambda: again.standby is not None, 60, "the run shown")
            await pilot.press("q")

    asyncio.run(show())
    assert again.standby_pid is None and alive([pid]), "the running stand-by is left alone"
    res = cfg.mntui(path, "kill")
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: not alive([pid]), 30, what="the stand-by's end with the chain")
