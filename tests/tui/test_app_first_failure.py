"""The app names the node the cluster's coordinator named first (issue 37, item 1): a
rank on the worker raises, the main's rank then fails on its closed socket, and the
header leads with the worker once both show failed, as `status` and `report` do."""

from __future__ import annotations

import asyncio
import shutil

from fakecluster import FakeCluster
from helpers import FAULTY, Cfg, faulty_job, free_port, until

from mntui.sessions.config import load_config
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
        app = MntuiApp(load_config(path), launch_now=True, watchdog=True)

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
