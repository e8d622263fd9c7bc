"""The app shows the straggler its run's watchdog named, in its header and the named
node's pane, and as the run's watchdog samples the ranks itself."""

from __future__ import annotations

import asyncio
import textwrap

import straggle
from fakecluster import FakeCluster, free_port, tagged
from helpers import Cfg, until

from mntui.sessions.config import load_config
from mntui.sessions.runs import latest
from mntui.tui.app.main import MntuiApp


def test_the_app_names_the_straggler_in_its_header(fake: FakeCluster, cfg: Cfg) -> None:
    work = cfg.tmp / "work"
    work.mkdir()
    (work / "straggler_train.py").write_bytes(straggle.JOB_SCRIPT.read_bytes())
    args = "--work 0.1 --kind sleep --slow-rank 0 --slow-factor 3"
    body = straggle.job_yaml(
        "tappslow", ["node0", "node1"], free_port(), work, args, "sample_every: 0.5"
    )
    path = cfg.tmp / "job.yaml"
    path.write_text(
        textwrap.dedent(body).strip()
        + f"\nssh: {{config: {fake.ssh_config}, connect_timeout: 5}}\n"
    )
    config = load_config(path)

    async def go() -> None:
        app = MntuiApp(config, launch_now=True, watchdog=True)
        async with app.run_test(size=(200, 48)) as pilot:
            header = lambda: str(app.query_one("#header").render())  # noqa: E731
            await until(pilot, lambda: "straggler: rank 0 (node0)" in header(), 60, "the suspect")
            assert "it holds the job" in header()
            # the named node's pane says it in the same words (and marks it SLOW)
            pane = lambda n: str(app.query_one(f"#pane-{n}").render())  # noqa: E731
            await until(pilot, lambda: "straggler: rank 0 (node0)" in pane("node0"), 10, "pane")
            line = next(x for x in pane("node0").splitlines() if x.startswith("straggler: "))
            assert line in header() and " SLOW " in pane("node0")
            assert "straggler: " not in pane("node1")
            # whoever watches the run (the app, or the headless watchdog its launch
            # started) samples it; the header reads the finding from the run's directory
            await pilot.press("K")
            await pilot.pause(0.5)
            await pilot.press("y")
            await until(pilot, lambda: not tagged("tappslow"), 30, "job killed on the nodes")

    asyncio.run(go())


def test_the_app_as_the_watchdog_samples_and_kills_on_slow(fake: FakeCluster, cfg: Cfg) -> None:
    """Opened on a run nobody watches, the app takes the watchdog's lock and samples the
    ranks itself; with `on_slow: kill_all` the straggler takes the job down."""
    work = cfg.tmp / "work"
    work.mkdir()
    (work / "straggler_train.py").write_bytes(straggle.JOB_SCRIPT.read_bytes())
    args = "--work 0.1 --kind sleep --slow-rank 1 --slow-factor 3"
    watch = "sample_every: 0.5, on_slow: kill_all, capture_budget: 0"
    body = straggle.job_yaml("tappkill", ["node0", "node1"], free_port(), work, args, watch)
    path = cfg.tmp / "job.yaml"
    path.write_text(
        textwrap.dedent(body).strip()
        + f"\nssh: {{config: {fake.ssh_config}, connect_timeout: 5}}\n"
    )
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0  # no watchdog of its own
    config = load_config(path)

    async def go() -> None:
        app = MntuiApp(config, record=latest("tappkill"), watchdog=True)
        async with app.run_test(size=(200, 48)) as pilot:
            await until(pilot, lambda: app.sampler is not None, 20, "the app's sampler")
            await until(pilot, lambda: not tagged("tappkill"), 60, "the job torn down")
            assert "straggler: rank 1 (node1)" in str(app.query_one("#header").render())

    asyncio.run(go())
