"""The app names the node the cluster's coordinator named first (issue 37, item 1): a
rank on the worker raises, the main's rank then fails on its closed socket, and the
header leads with the worker once both show failed, as `status` and `report` do."""

from __future__ import annotations

import asyncio
import shutil

from fakecluster import FakeCluster, tagged, wait_for
from helpers import FAULTY, Cfg, faulty_job, free_port, until

from mntui.sessions.config import load_config
from mntui.sessions.runs import latest
from mntui.tui.app.main import MntuiApp

SAMPLES = 30


def test_the_header_leads_with_the_first_failure_not_the_main(fake: FakeCluster, cfg: Cfg) -> None:
    job = "app-first"
    work = cfg.tmp / "work"
    work.mkdir(exist_ok=True)
    shutil.copy(FAULTY, work / "faulty_train.py")
    # notify: nothing kills the main before its own rank fails on the closed socket, so
    # both nodes end failed (the main listed first), as a main slower to be torn down does
    watch = f"watch: {{where: cluster, port: {free_port()}, on_failure: notify}}"
    path = cfg.write(
        faulty_job(job, work, free_port(), "--fail-rank 1 --fail-step 3 --how oom", watch)
    )

    async def go() -> list[str]:
        app = MntuiApp(load_config(path), launch_now=True)

        def header() -> str:
            return str(app.query_one("#header").render())

        async with app.run_test(size=(200, 48)) as pilot:
            await until(pilot, lambda: "(+1)" in header(), 120, "both nodes failed on screen")
            seen = []
            for _ in range(SAMPLES):  # every look from the decision on, ~0.1 s apart
                seen.append(header())
                await pilot.pause(0.1)
            await pilot.press("q")
        return seen

    seen = asyncio.run(go())
    wrong = [h for h in seen if "FAILED on node1" not in h]
    assert not wrong, f"{len(wrong)} of {len(seen)} looks named another node: {wrong[:3]}"
    assert cfg.mntui(path, "kill").returncode == 0


def test_a_launch_over_a_failed_run_never_shows_its_failure(fake: FakeCluster, cfg: Cfg) -> None:
    """The first run (watched by the cluster) failed on both nodes; `l` launches the next
    over it. From the key on, through the launch, no header names the old failure: the
    header said the previous run's `FAILED on ...` for its first ~4 s."""
    flag = cfg.tmp / "second"
    path = cfg.write(f"""
    job: relaunch-app
    nodes: [node0, node1]
    master_port: {free_port()}
    command: 'echo "up {{node}}"; test -e {flag} && exec sleep 300; sleep 1; exit 3'
    launch: {{ready: log, ready_pattern: up, ready_timeout: 20}}
    kill: {{grace: 2}}
    watch: {{where: cluster, port: {free_port()}}}
    """)
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    old = latest("relaunch-app")
    assert old is not None
    wait_for(lambda: not tagged("relaunch-app"), 30, what="the first run failed")
    flag.touch()

    async def go() -> list[str]:
        app = MntuiApp(load_config(path))
        header = lambda: str(app.header.render())  # noqa: E731
        async with app.run_test(size=(200, 48)) as pilot:
            await until(pilot, lambda: "FAILED on" in header(), 30, "the first run's failure")
            await pilot.press("l")
            seen = []
            while app.record is None or app.record.run_id == old.run_id or app.busy:
                seen.append(header())
                await pilot.pause(0.1)
                assert len(seen) < 600, "the launch did not attach its run within 60 s"
            await until(pilot, lambda: "running 2/2" in header(), 30, "the new run running")
            seen.append(header())
        return seen

    seen = asyncio.run(go())
    stale = [h for h in seen if "FAILED" in h]
    assert not stale, f"{len(stale)} of {len(seen)} looks showed the old failure: {stale[:2]}"
    assert cfg.mntui(path, "kill").returncode == 0
