"""The app, driven by Pilot, against real fake-sshd nodes and real jobs."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from collections.abc import Awaitable

from fakecluster import FakeCluster, port_listening, tagged
from helpers import Cfg, listener_job, showing, until

from mntui.sessions.config import load_config
from mntui.sessions.poll import NodeState
from mntui.tui.app.main import MntuiApp
from mntui.tui.app.widgets import ConfirmScreen, NodePane


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_app_launches_shows_nodes_and_kills_all(fake: FakeCluster, cfg: Cfg) -> None:
    from fakecluster import free_port

    port = free_port()
    path = cfg.write(
        listener_job("tapp", port).replace(
            "print('serving', flush=True)", "print('serving on', r, flush=True)"
        )
    )
    config = load_config(path)

    async def go() -> None:
        app = MntuiApp(config, launch_now=True)
        async with app.run_test(size=(160, 48)) as pilot:
            await until(
                pilot,
                lambda: all(
                    v.verdict is not None and v.verdict.state is NodeState.RUNNING
                    for v in app.views.values()
                ),
                30,
                "both nodes running",
            )
            await until(
                pilot,
                lambda: all(
                    any("serving on" in ln for ln in (v.log or [])) for v in app.views.values()
                ),
                15,
                "log lines in both panes",
            )
            pane = app.query_one("#pane-node1", NodePane)
            text = str(pane.render())
            assert "node1" in text and "running" in text and "serving on 1" in text
            assert "running 2/2" in str(app.query_one("#header").render())
            assert tagged("tapp", "node0") and tagged("tapp", "node1")

            await pilot.press("K")
            await until(
                pilot,
                lambda: showing(app, ConfirmScreen, "#details"),
                5,
                "confirm dialog",
            )
            details = str(app.screen.query_one("#details").query_one("Static").render())
            assert re.search(r"node0: \d+ process\(es\)", details) and "node1" in details
            await pilot.press("y")
            await until(
                pilot,
                lambda: not tagged("tapp", "node0") and not tagged("tapp", "node1"),
                20,
                "job killed on the nodes",
            )
            await until(pilot, lambda: app.busy is None, 10, "kill finished")
            assert not port_listening(port)
            assert not [s for n in fake.nodes for s in n.sessions() if s.startswith("tapp")]

    run(go())


def test_cleanup_names_holder_and_quit_leaves_job_running(fake: FakeCluster, cfg: Cfg) -> None:
    from fakecluster import free_port

    port = free_port()
    path = cfg.write(listener_job("tquit", port))
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    config = load_config(path)

    async def go() -> None:
        app = MntuiApp(config)
        async with app.run_test(size=(160, 48)) as pilot:
            await until(
                pilot,
                lambda: all(v.verdict is not None for v in app.views.values()),
                20,
                "first poll",
            )
            await pilot.press("c")
            await until(
                pilot,
                lambda: showing(app, ConfirmScreen, "#details"),
                10,
                "cleanup dialog",
            )
            details = str(app.screen.query_one("#details").query_one("Static").render())
            assert f"port {port} held by pid" in details and "python3" in details
            await pilot.press("n")
            await until(pilot, lambda: app.busy is None, 5, "cleanup cancelled")
            await pilot.press("d")
            from mntui.tui.app.widgets import ReportScreen

            await until(
                pilot,
                lambda: showing(app, ReportScreen, "#report-text"),
                60,
                "doctor report",
            )
            report = str(app.screen.query_one("#report-text").render())
            assert re.search(
                r"node0\s+leftovers\s+FAIL", report
            )  # the job is running: doctor says so
            # and the nodes' history keeps it, as it does the CLI's doctor
            from mntui.sessions.errors import state_dir
            from mntui.sessions.history.records import read_doctor

            kept = [r for r in read_doctor(state_dir(), "tquit") if r["check"] == "leftovers"]
            assert {(r["node"], r["status"]) for r in kept} >= {("node0", "FAIL")}, kept
            await pilot.press("escape")
            await pilot.press("q")
        assert app.return_value is None

    run(go())
    assert tagged("tquit", "node0") and tagged("tquit", "node1"), (
        "quitting the app must not stop the job"
    )
    assert port_listening(port)
    assert cfg.mntui(path, "kill").returncode == 0


def test_help_screen_and_table_toggle(fake: FakeCluster, cfg: Cfg) -> None:
    path = cfg.write(listener_job("thelp", 1))
    config = load_config(path)

    async def go() -> None:
        app = MntuiApp(config, poll=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("question_mark")
            assert "kill every process of the job" in str(app.screen.query_one("#help").render())
            await pilot.press("escape")
            await pilot.press("t")
            assert app.table_mode and app.query_one("#table").display
            assert app.attach_command("node1")[-1] == "exec tmux attach-session -t =thelp-node1"

    run(go())


def test_engine_never_imports_textual() -> None:
    code = (
        "import sys, pkgutil, importlib, mntui.sessions as s\n"
        "for m in pkgutil.walk_packages(s.__path__, 'mntui.sessions.'):\n"
        "    importlib.import_module(m.name)\n"
        "import mntui.tui.cli.entry, mntui.tui.cli.views\n"
        "assert 'textual' not in sys.modules, [k for k in sys.modules if k.startswith('textual')][:3]\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_relaunch_over_a_recorded_run_shows_each_line_once(fake: FakeCluster, cfg: Cfg) -> None:
    """The app opens on the previous run, then launches anew: one poll chain, no line twice."""
    path = cfg.write("""
    job: tonce
    nodes: [node0, node1]
    command: 'for i in $(seq 1 500); do echo "tick $i on {node}"; sleep 0.1; done'
    launch: {ready: log, ready_pattern: tick}
    """)
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    config = load_config(path)

    async def go() -> None:
        app = MntuiApp(config, launch_now=True, restart=True)
        async with app.run_test(size=(160, 48)) as pilot:
            await until(
                pilot,
                lambda: (
                    app.record is not None
                    and app.busy is None
                    and all(len(v.log or []) > 30 for v in app.views.values())
                ),
                40,
                "ticks of the new run",
            )
            # One poll chain: at a 1 s interval, about 3 polls in 3 s (two chains would make ~6).
            assert app.poller is not None
            before = app.poller._state["node0"].polls
            t0 = time.monotonic()
            await until(pilot, lambda: time.monotonic() - t0 >= 3.0, 5, "3 s of polling")
            assert app.poller._state["node0"].polls - before <= 4
            for v in app.views.values():
                ticks = [line for line in v.log or [] if line.startswith("tick ")]
                assert len(ticks) == len(set(ticks)), f"{v.node}: a line shown twice"
                numbers = [int(line.split()[1]) for line in ticks]
                assert numbers == sorted(numbers)

    run(go())
    assert cfg.mntui(path, "kill").returncode == 0
