"""The app shows the straggler its run's coordinator named (node/coord/slowness.py), in its
header and the named node's pane, once this machine's records have it (watch/mirror.py:
a `status`, a `report`, a kill or the app's `R` syncs it)."""

from __future__ import annotations

import asyncio
import json
import textwrap

import straggle
from clusterwatch import run_dir
from fakecluster import FakeCluster, free_port, tagged, wait_for
from helpers import Cfg, until

from mntui.sessions.config import load_config
from mntui.tui.app.main import MntuiApp


def test_the_app_names_the_coordinators_straggler_in_its_header(
    fake: FakeCluster, cfg: Cfg
) -> None:
    job = "tappslow"
    work = cfg.tmp / "work"
    work.mkdir()
    (work / "straggler_train.py").write_bytes(straggle.JOB_SCRIPT.read_bytes())
    args = "--work 0.1 --kind sleep --slow-rank 0 --slow-factor 3"
    watch = f"port: {free_port()}, sample_every: 0.5"
    body = straggle.job_yaml(job, ["node0", "node1"], free_port(), work, args, watch)
    path = cfg.tmp / "job.yaml"
    path.write_text(
        textwrap.dedent(body).strip()
        + f"\nssh: {{config: {fake.ssh_config}, connect_timeout: 5}}\n"
    )
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    found = run_dir(fake, job, "node0") / "coord" / "straggler.json"

    def named() -> bool:
        try:
            return json.loads(found.read_text())["finding"]["suspect"]["rank"] == 0
        except (OSError, ValueError, KeyError, TypeError):
            return False

    wait_for(named, 60, what="the coordinator naming rank 0")
    assert cfg.mntui(path, "status").returncode in (0, 1)  # the records' sync
    config = load_config(path)

    async def go() -> None:
        app = MntuiApp(config)
        async with app.run_test(size=(200, 48)) as pilot:
            header = lambda: str(app.query_one("#header").render())  # noqa: E731
            await until(pilot, lambda: "straggler: rank 0 (node0)" in header(), 20, "the suspect")
            assert "it holds the job" in header()
            # the named node's pane says it in the same words (and marks it SLOW)
            pane = lambda n: str(app.query_one(f"#pane-{n}").render())  # noqa: E731
            await until(pilot, lambda: "straggler: rank 0 (node0)" in pane("node0"), 10, "pane")
            line = next(x for x in pane("node0").splitlines() if x.startswith("straggler: "))
            assert line in header() and " SLOW " in pane("node0")
            assert "straggler: " not in pane("node1")
            await pilot.press("K")
            await pilot.pause(0.5)
            await pilot.press("y")
            await until(pilot, lambda: not tagged(job), 30, "job killed on the nodes")

    asyncio.run(go())
