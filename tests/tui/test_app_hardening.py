"""The app following a run the cluster watches, against real fake-sshd nodes, with views
that fail to draw: a bug in drawing must never stop the stream, and the coordinator's
teardown reaches the app's panes all the same."""

from __future__ import annotations

import asyncio

from fakecluster import FakeCluster, tagged
from helpers import Cfg, free_port, until

from mntui.sessions.config import load_config
from mntui.sessions.poll import NodeState
from mntui.sessions.runs import RunStatus, latest
from mntui.tui.app.main import MntuiApp
from mntui.tui.app.widgets import NodeView

HOSTILE = [
    "[rank1]:[E1122 10:53:13.042 ProcessGroupNCCL.cpp:616] Watchdog caught collective",
    "unbalanced [/] tag [/b]",
    "[@click=app.kill_all]press[/]",
]


class BrokenViews(MntuiApp):
    """Once the app follows the run's stream, every way it draws a board raises."""

    draws = 0

    def broke(self, what: str) -> None:
        if self.subscribed and self.feed_boards > 0:
            self.draws += 1
            raise RuntimeError(f"{what} broke")

    def refresh_header(self) -> None:
        self.broke("header")
        super().refresh_header()

    def refresh_table(self) -> None:
        self.broke("table")
        super().refresh_table()

    def redraw_node(self, view: NodeView, new_lines: bool) -> None:
        self.broke("pane")
        super().redraw_node(view, new_lines)


def test_failing_views_do_not_stop_the_apps_stream(fake: FakeCluster, cfg: Cfg) -> None:
    port, wport = free_port(), free_port()
    lines = ", ".join(f"print({line!r})" for line in HOSTILE)
    go_file = cfg.tmp / "fail-now"  # rank 1 fails once the app's drawing has failed a few
    # times (a fixed 6 s sleep once stood for that): at most 60 s, polled every 50 ms
    path = cfg.write(f"""
    job: tbroken
    nodes: [node0, node1]
    master_port: {port}
    command: >-
      exec python3 -c "import os, socket, sys, time; r = int(sys.argv[1]);
      s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);
      r == 0 and (s.bind(('127.0.0.1', {port})), s.listen());
      print('serving', flush=True);
      r == 1 and [time.sleep(0.05) for _ in range(1200) if not os.path.exists('{go_file}')];
      r == 1 and ({lines}, sys.stdout.flush(), sys.exit(3)); time.sleep(600)" {{node_rank}}
    launch: {{ready_timeout: 20}}
    kill: {{grace: 2}}
    watch: {{port: {wport}}}
    """)
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    config = load_config(path)
    assert tagged("tbroken", "node0") and tagged("tbroken", "node1")

    async def go() -> None:
        app = BrokenViews(config)  # opens on the run, and follows its coordinator
        async with app.run_test(size=(160, 48), notifications=True) as pilot:
            await until(pilot, lambda: app.feed_boards > 0, 30, "the coordinator's stream")
            await until(pilot, lambda: app.draws > 3, 20, "the views failing to draw")
            go_file.touch()
            before = app.draws
            await until(
                pilot,
                lambda: (
                    app.views["node1"].verdict is not None
                    and app.views["node1"].verdict.state is NodeState.FAILED
                ),
                30,
                "node1 failed",
            )
            await until(pilot, lambda: not tagged("tbroken", "node0"), 30, "node0 torn down")
            assert app.draws > before > 3  # drawing kept failing the whole time

            def shown() -> bool:
                return all(line in (app.views["node1"].log or []) for line in HOSTILE)

            await until(pilot, shown, 30, "node1's last lines in its pane")
        assert app._exception is None, app._exception

    asyncio.run(go())
    cfg.mntui(path, "status")  # the records' sync (watch/mirror.py)
    record = latest("tbroken")
    assert record is not None and record.status is RunStatus.TORN_DOWN, record.status
    assert record.cause is not None and record.cause.startswith("node1"), record.cause
