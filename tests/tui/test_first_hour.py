"""Issue 23, the first hour with the app: each line once, the training step and rate
where people look, the kill dialog naming the real sessions, and a live report that
says what it did."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable
from typing import Any

from fakecluster import FakeCluster, tagged
from helpers import Cfg, listener_job, showing, until
from recorded import h100_node

from mntui.sessions.config import load_config
from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.launch import session_name
from mntui.sessions.poll import NodeProgress
from mntui.tui.app.main import MntuiApp
from mntui.tui.app.messages import PollDone
from mntui.tui.app.render import kill_preview
from mntui.tui.app.widgets import ConfirmScreen, NodePane, NodeView, ReportScreen


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def _numbers(log: list[str]) -> list[int]:
    return [int(m.group(1)) for line in log if (m := re.match(r"step (\d+) on ", line))]


def test_each_line_once_in_the_apps_own_polls(fake: FakeCluster, cfg: Cfg) -> None:
    """An unwatched run (nothing on the cluster to stream it): the app polls it itself,
    from the start of each log, each line once and none skipped, the step and rate in
    each pane from its own tracker; the kill dialog names the real sessions."""
    path = cfg.write("""
    job: t-once
    nodes: [node0, node1]
    command: 'for i in $(seq 1 3000); do echo "step $i on {node}"; sleep 0.05; done'
    launch: {ready: log, ready_pattern: step}
    watch: {where: here, interval: 0.5}
    """)
    config = load_config(path)

    async def go() -> None:
        app = MntuiApp(config, launch_now=True)
        async with app.run_test(size=(160, 48)) as pilot:
            await until(
                pilot,
                lambda: app.record is not None and app.poller is not None and app.poller.polls >= 4,
                60,
                "the app polling the run",
            )
            assert app.record is not None and not app.subscribed  # unwatched: no stream
            seen = {n: max(_numbers(v.log or []), default=0) for n, v in app.views.items()}
            await until(
                pilot,
                lambda: all(max(_numbers(v.log or []), default=0) > seen[n] + 20
                            for n, v in app.views.items()),
                30,
                "lines polled directly",
            )  # fmt: skip
            for v in app.views.values():
                nums = _numbers(v.log or [])
                assert nums and nums[0] == 1, f"{v.node}: the run's first line is not shown"
                twice = sorted({n for n in nums if nums.count(n) > 1})
                assert not twice, f"{v.node}: steps {twice[:5]} shown twice"
                assert nums == list(range(1, len(nums) + 1)), f"{v.node}: a line skipped"
            # Our own polls' tracker keeps the step and rate in the panes.
            await until(
                pilot,
                lambda: all(
                    (m := re.search(r"step (\d+) @", str(p.render())))
                    and int(m.group(1)) > seen[n] + 20
                    for n, p in app.panes.items()
                ),
                20,
                "each pane's step, from our own polls",
            )
            assert "progress: " in str(app.query_one("#header").render())
            # The kill dialog names the tmux sessions the nodes really have.
            await pilot.press("K")
            await until(
                pilot,
                lambda: showing(app, ConfirmScreen, "#details"),
                10,
                "the dialog",
            )
            details = str(app.screen.query_one("#details").query_one("Static").render())
            named = re.findall(r"tmux session (\S+)", details)
            assert sorted(named) == ["t+once-node0", "t+once-node1"], details
            for node, session in zip(("node0", "node1"), sorted(named), strict=True):
                assert session in fake.node(node).sessions()
            await pilot.press("y")
            await until(pilot, lambda: not tagged("t-once"), 30, "the job killed")
            await until(pilot, lambda: app.busy is None, 10, "the kill done")
            await pilot.press("q")
            # Its last line says what is true: the job was killed, not left running.
            last = str(app._exit_renderables[-1])
            assert last.startswith("mntui: t-once is not running (run "), last
            assert last.endswith(": killed)"), last

    run(go())


def test_kill_preview_names_sessions_as_tmux_has_them() -> None:
    snap, _ = h100_node("g369", 0)
    text = kill_preview([NodeView("g369", 0, snap=snap)], "qwen-sft.v2", 10)
    assert f"tmux session {session_name('qwen-sft.v2', 'g369')}" in text
    assert "qwen+sft" in text and "qwen-sft.v2-g369" not in text


PROGRESS_CFG = """\
job: prog
nodes: [{name: g369, host: localhost}, {name: g375, host: localhost}]
command: x
watch: {slow_after: 1}
"""


def test_panes_table_and_header_show_progress_as_status_does() -> None:
    """Step and rate in each pane's header and the table, SLOW on a straggler, and the
    progress line `mntui status` prints, in the app's header."""
    app = MntuiApp(parse_config(PROGRESS_CFG), poll=False)
    snaps = {n: h100_node(n, r)[0] for r, n in enumerate(("g369", "g375"))}
    progress = {
        "g369": NodeProgress("g369", 34, 2.0, 0.0),
        "g375": NodeProgress("g375", 30, 0.4, 0.0),  # a straggler: 0.4/s against 2/s
    }
    line = "rank 1 stopped at step 30; rank 0 reached 34"

    async def go() -> None:
        async with app.run_test(size=(160, 48)) as pilot:

            def fed() -> Any:
                app.post_message(PollDone(snaps, progress=progress, summary=line))
                return "SLOW" in str(app.query_one("#pane-g375", NodePane).render())

            await until(pilot, fed, 10, "g375 marked slow")
            g369 = str(app.query_one("#pane-g369", NodePane).render()).splitlines()[0]
            g375 = str(app.query_one("#pane-g375", NodePane).render()).splitlines()[0]
            assert "step 34 @2/s" in g369 and "SLOW" not in g369
            assert "step 30 @0.4/s" in g375
            assert f"progress: {line}" in str(app.query_one("#header").render())
            await pilot.press("t")
            await pilot.pause()
            rows = [[str(c) for c in app.table.get_row(n)] for n in ("g369", "g375")]
            assert "34 @2/s" in rows[0] and "30 @0.4/s SLOW" in rows[1]

    run(go())


def test_a_live_report_says_the_stacks_are_taken_now(fake: FakeCluster, cfg: Cfg) -> None:
    """`R` on a live run: its stacks are taken now, and nothing is torn down (it once
    said "before the teardown", of a run no one had torn down)."""
    from fakecluster import free_port

    path = cfg.write(listener_job("t-live", free_port(), extra='env: {RANK: "0"}'))  # a rank
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    config = load_config(path)

    async def go() -> None:
        app = MntuiApp(config, poll=False)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.press("R")
            await until(
                pilot,
                lambda: showing(app, ReportScreen, "#report-text"),
                60,
                "the report",
            )
            # The screen's own text: its widgets are composed a tick after the push (on a
            # loaded machine, `query_one("#report-text")` right after it once found none).
            screen = app.screen
            assert isinstance(screen, ReportScreen)
            text = screen.text
            assert "before the teardown" not in text
            assert "stacks of the ranks now (py-spy; the job runs on, nothing was killed)" in text

    run(go())
    assert tagged("t-live", "node0"), "a live report must not stop the job"
    assert cfg.mntui(path, "kill").returncode == 0
