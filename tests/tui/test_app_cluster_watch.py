"""Issues 30 and 37, in the app: a run the cluster watches is shown, never judged here.
The header says who watches (`watched by the cluster`), the app follows the
coordinator's stream (no poll of its own), and quitting starts nothing here: the job
trains on, guarded by its coordinator. An unwatched run (`--no-watch`) says so."""

from __future__ import annotations

import asyncio
import re

from fakecluster import FakeCluster, alive, pids_with_env, tagged
from helpers import Cfg, free_port, listener_job, until

from mntui.sessions.config import load_config
from mntui.sessions.launch.clusterwatch import watched_here
from mntui.tui.app.main import MntuiApp


def test_the_app_shows_a_cluster_watched_run_and_quits_without_a_local_watchdog(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "cwapp"
    extra = f"watch: {{where: cluster, port: {free_port()}}}"
    path = cfg.write(listener_job(job, free_port(), extra=extra))
    config = load_config(path)

    async def go() -> None:
        app = MntuiApp(config, launch_now=True)

        def header() -> str:
            return str(app.query_one("#header").render())

        async with app.run_test(size=(200, 48)) as pilot:
            await until(pilot, lambda: app.record is not None and app.busy is None, 90,
                        "the launch done")  # fmt: skip
            await until(pilot, lambda: "[watched by the cluster: on failure kill_all" in header(),
                        10, "the header saying the cluster watches")  # fmt: skip
            assert app.record is not None and app.record.watch_port is not None
            assert app.subscribed and app.poll_inflight is False  # the stream, no poll
            await pilot.press("q")

    asyncio.run(go())
    sentinels = alive(pids_with_env(f"MNTUI_RUN={re.escape(job)}/[^/]+/[^/]+/sentinel"))
    assert len(sentinels) == 2 and tagged(job, "node0") and tagged(job, "node1")
    res = cfg.mntui(path, "kill")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not alive(pids_with_env(f"MNTUI_RUN={re.escape(job)}/.*"))


def test_the_app_says_an_unwatched_run_is_unwatched(fake: FakeCluster, cfg: Cfg) -> None:
    """Launched with no watch: no sentinel starts, the app polls the nodes itself, and
    the header and the event log say the run is unwatched."""
    job = "cwnone"
    path = cfg.write(listener_job(job, free_port()))
    config = watched_here(load_config(path))  # as `launch --no-watch` makes it

    async def go() -> None:
        app = MntuiApp(config, launch_now=True)

        def header() -> str:
            return str(app.query_one("#header").render())

        async with app.run_test(size=(200, 48)) as pilot:
            await until(pilot, lambda: app.record is not None and app.busy is None, 90,
                        "the launch done")  # fmt: skip
            await until(pilot, lambda: "[unwatched" in header(), 10, "the header")
            assert app.record is not None and app.record.watch_port is None
            assert not app.subscribed
            await pilot.press("q")

    asyncio.run(go())
    assert not alive(pids_with_env(f"MNTUI_RUN={re.escape(job)}/[^/]+/[^/]+/sentinel"))
    assert tagged(job, "node0") and tagged(job, "node1")
    res = cfg.mntui(path, "kill")
    assert res.returncode == 0, res.stdout + res.stderr


def test_q_during_a_launch_leaves_the_whole_job_running(fake: FakeCluster, cfg: Cfg) -> None:
    """Issue 38, item 2: `q` once the main started and before the workers did left the
    main running and its workers never started. Now the app says it quits once the launch
    is done, and does: every node runs the job, watched by the cluster."""
    job = "cwquit"
    extra = f"watch: {{where: cluster, port: {free_port()}}}"
    body = listener_job(job, free_port(), extra=extra)
    path = cfg.write(
        body.replace("launch: {ready_timeout: 20}", "launch: {ready: delay, ready_delay: 3}")
    )
    config = load_config(path)
    said: list[str] = []

    async def go() -> None:
        app = MntuiApp(config, launch_now=True)
        async with app.run_test(size=(200, 48)) as pilot:
            await until(pilot, lambda: tagged(job, "node0"), 60, "the main started")
            assert not tagged(job, "node1")  # the workers wait out ready_delay
            await pilot.press("q")
            await pilot.pause(0.3)
            assert app.is_running and app.busy == "launch"  # it stays for the launch
            said.extend(line.text for line in app.events.lines)
            await until(pilot, lambda: not app.is_running, 90, "the app quit after the launch")

    asyncio.run(go())
    assert any("quits once it is done" in line for line in said), said
    assert tagged(job, "node0") and tagged(job, "node1")  # the whole job, not half of it
    res = cfg.mntui(path, "kill")
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_cut_is_said_in_the_header_and_on_every_pane(fake: FakeCluster, cfg: Cfg) -> None:
    """Issue 38, item 4: cut off from the nodes, the panes kept `running step 61 @3.2/s`
    and only the event log said the stream broke. Now the header says the cluster is
    out of reach and each pane how old what it shows is; back, both go."""
    from clusterwatch import cut_off

    job = "cwcut"
    extra = f"watch: {{where: cluster, port: {free_port()}}}"
    path = cfg.write(listener_job(job, free_port(), extra=extra))
    config = load_config(path)

    async def go() -> None:
        app = MntuiApp(config, launch_now=True)

        def header() -> str:
            return str(app.query_one("#header").render())

        def pane(n: str) -> str:
            return str(app.query_one(f"#pane-{n}").render())

        async with app.run_test(size=(200, 48)) as pilot:
            await until(pilot, lambda: app.record is not None and app.busy is None, 90,
                        "the launch done")  # fmt: skip
            await until(pilot, lambda: app.feed_boards >= 2, 30, "boards from the stream")
            assert "OUT OF REACH" not in header() and "STALE" not in pane("node0")
            with cut_off(fake):
                await until(pilot, lambda: "OUT OF REACH" in header(), 20, "the header's cut")
                await until(pilot, lambda: all(" STALE " in pane(n) for n in ("node0", "node1")),
                            5, "every pane stale")  # fmt: skip
            await until(pilot, lambda: "OUT OF REACH" not in header(), 60, "back in reach")
            await until(pilot, lambda: "STALE" not in pane("node0"), 10, "the panes fresh")
            await pilot.press("q")

    asyncio.run(go())
    res = cfg.mntui(path, "kill")
    assert res.returncode == 0, res.stdout + res.stderr
