"""The bundled demo in the app (issue 38, item 1): its two nodes are this machine
(`host: localhost`), so neither the launch nor the app's stream of the cluster's watch
may need an sshd; before, the panes stayed empty and the log repeated `cluster stream
broke: ssh: connect to host localhost port 22: Connection refused`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from importlib import resources
from pathlib import Path

import yaml
from fakecluster import free_port
from helpers import until

from mntui.sessions.config import load_config
from mntui.tui.app.main import MntuiApp


def demo_copy(tmp: Path) -> Path:
    """The bundled demo, on ports of this test's own and a job name of its own."""
    text = resources.files("mntui.configs").joinpath("demo.yaml").read_text()
    data = yaml.safe_load(text)
    data.update(job="app-demo", master_port=free_port(), watch={"port": free_port()})
    path = tmp / "demo.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_demo_shows_both_panes_steps_with_no_sshd(tmp_path: Path) -> None:
    path = demo_copy(tmp_path)

    async def go() -> list[str]:
        app = MntuiApp(load_config(path), launch_now=True)
        async with app.run_test(size=(160, 48)) as pilot:
            stepping = lambda: all(  # noqa: E731
                v.progress is not None and v.progress.step is not None for v in app.views.values()
            )
            await until(pilot, stepping, 90, "both panes showing a step")
            logged = [str(line) for line in app.events.lines]
            await pilot.press("q")
        return logged

    try:
        logged = asyncio.run(go())
        assert not [x for x in logged if "stream broke" in x], logged
    finally:
        done = subprocess.run(
            [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "kill"],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
