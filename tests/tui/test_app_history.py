"""Across runs in the app: `h` shows the focused node's history, `H` the job's ledger, and
the pane of a node that caused a failure lately is marked; node text is never markup."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus
from mntui.tui.app.main import MntuiApp
from mntui.tui.app.widgets import ReportScreen

CAUSE = "CUDA out of memory [/] [@click=app.kill_all]x[/]"


def _failed_run() -> RunRecord:
    rec = RunRecord(
        "hscreen", "20261122-031200-abcd", "cfg.yaml", "127.0.0.1", 29500,
        [NodeRecord("a", "localhost", 0, "s", "t", "d"), NodeRecord("b", "localhost", 1, "s", "t", "d")],
        status=RunStatus.TORN_DOWN,
    )  # fmt: skip
    rec.note("steps", first_step_at=time.time() - 60, last_step_at=time.time() - 10, first_step=1,
             last_step=50, checkpoints=False)  # fmt: skip
    rec.note("watchdog-teardown", node="b", state="failed", why="exit code 1")
    rec.create()
    report = {"cause_node": "b", "cause": CAUSE, "first_at": time.time() - 9, "ended_at": time.time() - 8,
              "nodes": [{"node": "b", "finding": {"summary": CAUSE}}], "consequences": []}  # fmt: skip
    (rec.dir / "report.json").write_text(json.dumps(report))
    return rec


async def _screen_text(app: MntuiApp, pilot: Any, key: str) -> str:
    await pilot.press(key)
    deadline = time.monotonic() + 20
    while not isinstance(app.screen, ReportScreen):
        assert time.monotonic() < deadline, f"no screen after {key}"
        await pilot.pause(0.05)
    screen: Any = app.screen
    text = str(screen.text)
    await pilot.press("escape")
    return text


def test_h_shows_a_nodes_history_and_H_the_ledger_and_the_culprit_is_marked() -> None:
    cfg = parse_config("job: hscreen\nnodes: [{name: a, host: localhost}, {name: b, host: localhost}]\n"
                       "command: x\n")  # fmt: skip
    rec = _failed_run()

    async def run() -> tuple[str, str, str]:
        app = MntuiApp(cfg, record=rec, poll=False)
        async with app.run_test() as pilot:
            deadline = time.monotonic() + 20
            while app.panes["b"].border_subtitle is None:
                assert time.monotonic() < deadline, "no mark on b's pane"
                await pilot.pause(0.05)
            mark = str(app.panes["b"].border_subtitle)
            assert app.panes["a"].border_subtitle is None
            app.panes["b"].focus()
            node = await _screen_text(app, pilot, "h")
            ledger = await _screen_text(app, pilot, "H")
            return mark, node, ledger

    mark, node, ledger = asyncio.run(run())
    assert "caused 1 failure" in mark
    assert "failed×1" in node and CAUSE in node
    assert "hscreen chain 20261122-031200-abcd" in ledger and "1 failure(s)" in ledger
