"""The app, without nodes, fed what nodes and configs can say through its own messages:
markup-like text is shown as written, never parsed; drawing never crashes the app, nor
runs while its widgets are gone.

Node text reaches the app only as messages from workers (NodeSnap, PollDone, Notice,
EngineEvent, LaunchDone, KillDone, HoldersFound, DoctorDone), so posting them is the
same path the poll and the engine take.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest
from helpers import showing, until
from recorded import h100_node
from textual.widgets import RichLog
from textual.widgets._toast import Toast

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.errors import ExitCode
from mntui.sessions.events import Event, Phase
from mntui.sessions.procs import PortHolder
from mntui.tui.app.main import MntuiApp
from mntui.tui.app.messages import (
    DoctorDone,
    EngineEvent,
    HoldersFound,
    KillDone,
    LaunchDone,
    NodeSnap,
    Notice,
    PollDone,
)
from mntui.tui.app.widgets import ConfirmScreen, LogScreen, NodePane, ReportScreen

CONFIG = "job: hostile\nnodes: [node0, node1]\ncommand: x\n"
TORCH = "[rank1]:[E1122 10:53:13.042 ProcessGroupNCCL.cpp:616] Watchdog caught collective"
CLOSE = "exit code 1: unbalanced [/] tag [/b] here"
CLICK = "[@click=app.kill_all]" + "press here " * 30 + "[/]"


class Recording(MntuiApp):
    """The app, counting kill-all requests instead of opening the dialog."""

    kill_asked = 0

    def action_kill_all(self, then_launch: bool = False) -> None:
        self.kill_asked += 1


def make(cls: type[MntuiApp] = MntuiApp) -> MntuiApp:
    return cls(parse_config(CONFIG, "hostile.yaml"), poll=False)


def run(app: MntuiApp, body: Callable[[Any], Awaitable[None]], **kw: Any) -> None:
    """Drive `app`; an exception inside it (a MarkupError, a NoMatches) fails the test."""

    async def go() -> None:
        async with app.run_test(size=(160, 48), notifications=True, **kw) as pilot:
            await body(pilot)
            await pilot.pause()

    asyncio.run(go())
    assert app._exception is None, app._exception
    assert app.return_code in (None, 0)


def toasts(app: MntuiApp) -> list[str]:
    return [str(t.render()) for t in app.screen.query(Toast)]


async def settle(pilot: Any) -> None:
    await pilot.pause()
    await pilot.pause(0.2)


def test_notifications_show_node_text_as_written() -> None:
    app = make()

    async def body(pilot: Any) -> None:
        app.post_message(Notice(f"poll failed: {CLOSE}", "error"))
        app.post_message(Notice(TORCH, "warning"))
        app.post_message(LaunchDone(None, f"node1: {CLOSE}\ndetails {TORCH}"))
        app.post_message(KillDone(False, f"NOT CLEAN on node1: {CLOSE}"))
        app.post_message(HoldersFound({}, {"node0": f"cannot connect: {CLOSE}"}))
        await settle(pilot)
        shown = "\n".join(toasts(app))
        for text in (f"poll failed: {CLOSE}", TORCH, f"node1: {CLOSE}", "NOT CLEAN on node1"):
            assert text in shown, (text, shown)
        assert f"cannot connect: {CLOSE}" in shown
        events = "\n".join(line.text for line in app.query_one("#events", RichLog).lines)
        assert f"details {TORCH}" in events and f"NOT CLEAN on node1: {CLOSE}" in events

    run(app, body)


def test_a_click_markup_in_node_text_is_not_a_button() -> None:
    app = make(Recording)
    assert isinstance(app, Recording)

    async def body(pilot: Any) -> None:
        app.post_message(Notice(f"node1: {CLICK}", "error"))
        await settle(pilot)
        (toast,) = app.screen.query(Toast)
        assert "[@click=app.kill_all]" in str(toast.render())
        await pilot.click(Toast)
        await settle(pilot)
        assert app.kill_asked == 0, "a node's text ran an action of the app"

    run(app, body)


def test_node_log_lines_and_events_keep_their_brackets() -> None:
    app = make()
    lines = [TORCH, CLOSE, CLICK, "[bold]not bold[/bold] [red]"]

    async def body(pilot: Any) -> None:
        snap, _ = h100_node("node1", 1)
        snap = replace(snap, new_output="".join(f"{ln}\n" for ln in lines).encode())
        app.post_message(NodeSnap(snap))
        app.post_message(PollDone({"node1": snap}))
        app.post_message(EngineEvent(Event("node1", 1, Phase.FAILED, CLOSE)))
        await settle(pilot)
        pane = str(app.query_one("#pane-node1", NodePane).render())
        assert TORCH[:40] in pane
        events = "\n".join(line.text for line in app.query_one("#events", RichLog).lines)
        assert CLOSE in events
        app.query_one("#pane-node1", NodePane).focus()
        await pilot.press("v")
        await settle(pilot)
        assert isinstance(app.screen, LogScreen)
        shown = [line.text.rstrip() for line in app.screen.query_one(RichLog).lines]
        assert shown[-len(lines) :] == lines

    run(app, body)


def test_dialogs_and_reports_show_node_text_as_written() -> None:
    app = make()
    holder = PortHolder(29500, 4242, "bob", f"python3 -c 'print(\"{CLOSE}\")' {CLICK}")

    async def body(pilot: Any) -> None:
        app.busy = "cleanup"
        app.post_message(HoldersFound({"node0": (holder,)}, {}))
        await until(
            pilot,
            lambda: showing(app, ConfirmScreen, "#details"),
            10,
            "ConfirmScreen",
        )
        details = str(app.screen.query_one("#details").query_one("Static").render())
        assert CLOSE in details and "[@click=app.kill_all]" in details
        await pilot.press("n")
        await settle(pilot)
        app.post_message(DoctorDone(f"node0  ssh  FAIL  {CLOSE} {TORCH}", ExitCode.DOCTOR_FAIL))
        await until(
            pilot,
            lambda: showing(app, ReportScreen, "#report-text"),
            10,
            "ReportScreen",
        )
        report = str(app.screen.query_one("#report-text").render())
        assert CLOSE in report and TORCH in report

    run(app, body)


def test_one_operation_at_a_time_through_one_guard() -> None:
    app = make()

    async def body(pilot: Any) -> None:
        assert app.claim("launch") and app.busy == "launch"
        for key in ("l", "K", "c", "d", "r"):
            await pilot.press(key)
        await settle(pilot)
        assert app.busy == "launch" and not isinstance(app.screen, ConfirmScreen)
        assert toasts(app).count("launch in progress") == 5
        assert not app.claim(None)
        app.busy = None
        assert app.claim(None) and app.busy is None

    run(app, body)


def test_timers_and_messages_skip_widgets_that_are_gone() -> None:
    """The 1 s header refresh and late poll results must not look up removed widgets
    (`NoMatches: No nodes match '#header'` crashed a 32-node run)."""
    app = make()

    async def body(pilot: Any) -> None:
        for selector in ("#header", "#events", "#table", "#grid"):
            await app.query_one(selector).remove()
        snap, _ = h100_node("node0", 0)
        app.post_message(NodeSnap(snap))
        app.post_message(PollDone({"node0": snap}))
        app.post_message(EngineEvent(Event("node0", 0, Phase.RUNNING, "late")))
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.5:  # the header timer fires at least once
            await pilot.pause(0.1)
        app.action_toggle_view()

    run(app, body)


@pytest.mark.parametrize("table", [False, True], ids=["grid", "table"])
def test_exit_while_a_poll_and_a_header_refresh_are_pending(table: bool) -> None:
    app = make()

    async def body(pilot: Any) -> None:
        if table:
            await pilot.press("t")
        snaps = {n: h100_node(n, r)[0] for r, n in enumerate(("node0", "node1"))}
        await pilot.pause(0.9)  # the next header tick is near: quit with results in flight
        for snap in snaps.values():
            app.post_message(NodeSnap(snap, app.generation))
        app.post_message(PollDone(snaps, app.generation))
        app.post_message(EngineEvent(Event(None, None, Phase.NOTICE, "late")))
        await pilot.press("q")

    run(app, body)
