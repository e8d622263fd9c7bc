"""Issue 28, finding 7, the app's side: a node's log line carrying an OSC 52 (clipboard
write), a screen clear or an 8-bit CSI reached the node's pane and its log screen as
written, and Textual writes a cell's text to the terminal as it is. The log's lines are
made safe where they are cut from the node's bytes (LineSplitter, termsafe.py), so every
view of them, the app's and the CLI's, shows them without.

A failure's cause took other roads: the log line classify names (it stripped only 7-bit
CSI, so an OSC's body and an 8-bit CSI got through), the report's last lines and kernel
lines, and from there the teardown's toast, the event log and the report screen. The
report is made safe where it is built from the node's evidence, and the app's sinks (its
notifications, its event log, its dialogs and reports) apply the same rule to whatever
else reaches them, with markup off.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from typing import Any

from helpers import showing, until
from recorded import h100_node
from textual.widgets import RichLog
from textual.widgets._toast import Toast

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.events import Event, Phase
from mntui.sessions.poll import NodeState
from mntui.sessions.procs import PortHolder
from mntui.sessions.report import render
from mntui.sessions.report.evidence import NodeEvidence
from mntui.sessions.report.failure import Change, Ending, FailureReport, build, summarize_node
from mntui.tui.app.main import MntuiApp
from mntui.tui.app.messages import (
    EngineEvent,
    HoldersFound,
    KillDone,
    NodeSnap,
    Notice,
    PollDone,
    ReportReady,
)
from mntui.tui.app.widgets import ConfirmScreen, LogScreen, NodePane, ReportScreen

EVIL = "step 5 /w/\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x9b2J\x1b]0;t\x1b\\train.py"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")


def test_a_log_line_reaches_the_pane_and_the_log_screen_without_escapes() -> None:
    app = MntuiApp(
        parse_config("job: esc\nnodes: [node0, node1]\ncommand: x\n", "esc.yaml"),
        poll=False,
    )

    async def go() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            snap, _ = h100_node("node1", 1)
            snap = replace(snap, new_output=f"{EVIL}\n".encode())
            app.post_message(NodeSnap(snap))
            app.post_message(PollDone({"node1": snap}))
            pane = app.query_one("#pane-node1", NodePane)
            await until(pilot, lambda: "step 5" in str(pane.render()), 10, "the pane's log")
            shown: Any = str(pane.render())
            assert "step 5 /w/train.py" in shown and not CONTROL.search(shown), repr(shown)
            pane.focus()
            await pilot.press("v")

            def log_lines() -> list[str]:
                if not showing(app, LogScreen, "RichLog"):
                    return []
                return [line.text for line in app.screen.query_one(RichLog).lines]

            await until(pilot, log_lines, 10, "the log screen's lines")
            lines = log_lines()
            assert lines[-1].rstrip() == "step 5 /w/train.py", lines[-1:]

    asyncio.run(go())
    assert app._exception is None, app._exception


# OSC 52 (a clipboard write), a screen clear, an 8-bit CSI and an 8-bit OSC, then markup
# that Textual would parse (`[/]` raises, `[red]` colours): only the markup is text.
HOSTILE = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x9b2J\x9d0;t\x9c[/][red]"
FAILURE = f"/usr/bin/python3: can't open file '/w/{HOSTILE}train.py': [Errno 2] No such file"
SHOWN = "/w/[/][red]train.py"


def failure_report() -> FailureReport:
    """A teardown's report of node1, built from evidence as the watchdog builds it."""
    log = f"step 5\n{FAILURE}\nexiting {HOSTILE}now\n".encode()
    kernel = (f"Out of memory: Killed process 4242 (python3 {HOSTILE})",)
    changes = [Change("node1", NodeState.FAILED, f"exit code 137 {HOSTILE}", 1000.0)]
    ev = NodeEvidence("node1", log, 137, 1000.0, kernel, {})
    nodes = [
        summarize_node("node0", 0, NodeState.RUNNING, changes, None, None, None),
        summarize_node("node1", 1, NodeState.FAILED, changes, ev, None, None),
    ]
    trigger = ("node1", NodeState.FAILED, "exit code 137")
    return build("esc", "r1", nodes, changes, trigger=trigger, ended_at=1002.0,
                 ending=Ending.TORN_DOWN)  # fmt: skip


def test_a_failures_cause_reaches_the_events_a_toast_and_the_report_without_escapes() -> None:
    app = MntuiApp(
        parse_config("job: esc\nnodes: [node0, node1]\ncommand: x\n", "esc.yaml"),
        poll=False,
    )
    built = failure_report()
    holder = PortHolder(29500, 4242, "bob", f"python3 {HOSTILE}x.py")

    async def go() -> None:
        async with app.run_test(size=(160, 48), notifications=True) as pilot:
            app.post_message(KillDone(False, f"watchdog tore the job down: {built.headline}"))
            app.post_message(EngineEvent(Event("node1", 1, Phase.FAILED, FAILURE)))
            app.post_message(Notice(f"poll failed: {FAILURE}", "error"))

            def shown_now() -> tuple[list[str], list[str]]:
                events = [line.text for line in app.query_one("#events", RichLog).lines]
                return events, [str(t.render()) for t in app.screen.query(Toast)]

            await until(
                pilot,
                lambda: all(sum(SHOWN in x for x in xs) >= 2 for xs in shown_now()),
                10,
                "the events and toasts",
            )
            events, toasts = shown_now()
            for shown in (*events, *toasts):
                assert not CONTROL.search(shown) and "52;c;" not in shown, repr(shown)
            assert sum(SHOWN in line for line in events) == 2, events
            assert sum(SHOWN in toast for toast in toasts) == 2, toasts
            app.busy = "cleanup"
            app.post_message(HoldersFound({"node0": (holder,)}, {}))
            await until(
                pilot,
                lambda: showing(app, ConfirmScreen, "#details"),
                10,
                "ConfirmScreen",
            )
            details = str(app.screen.query_one("#details").query_one("Static").render())
            assert "python3 [/][red]x.py" in details and not CONTROL.search(details)
            await pilot.press("n")
            await pilot.pause(0.2)
            app.post_message(ReportReady(f"report: esc {HOSTILE}", render(built)))
            await until(
                pilot,
                lambda: showing(app, ReportScreen, "#report-text"),
                10,
                "ReportScreen",
            )
            report = str(app.screen.query_one("#report-text").render())
            title = str(app.screen.query_one("Label").render())
            assert title == "report: esc [/][red]", repr(title)
            assert not CONTROL.search(report) and "52;c;" not in report, repr(report)
            assert report.startswith("node1 (node rank 1) failed first at"), report
            assert SHOWN in report and "| exiting [/][red]now" in report, report
            assert "(python3 [/][red])" in report, report

    asyncio.run(go())
    assert app._exception is None, app._exception
