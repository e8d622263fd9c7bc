"""The failure report in the app: `R` opens the run's saved report as plain text."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus
from mntui.tui.app.main import MntuiApp
from mntui.tui.app.widgets import ReportScreen

HEADLINE = "g375 rank 1 failed first at 03:12:07: CUDA out of memory [/] (train.py:88)"


def test_r_shows_the_saved_report_literally() -> None:
    cfg = parse_config("job: rscreen\nnodes: [{name: a, host: localhost}]\ncommand: x\n")
    rec = RunRecord(
        "rscreen", "20261122-031200-abcd", "cfg.yaml", "127.0.0.1", 29500,
        [NodeRecord("a", "localhost", 0, "s", "t", "d")], status=RunStatus.TORN_DOWN,
    )  # fmt: skip
    rec.create()
    (rec.dir / "report.txt").write_text(f"{HEADLINE}\n\ntimeline:\n")
    (rec.dir / "report.json").write_text(json.dumps({"headline": HEADLINE}))

    async def run() -> str:
        app = MntuiApp(cfg, record=rec, poll=False, watchdog=False)
        async with app.run_test() as pilot:
            await pilot.press("R")
            deadline = time.monotonic() + 20
            while not isinstance(app.screen, ReportScreen):
                assert time.monotonic() < deadline, "no report screen"
                await pilot.pause(0.05)
            screen: Any = app.screen
            return str(screen.text)

    assert asyncio.run(run()).splitlines()[0] == HEADLINE
