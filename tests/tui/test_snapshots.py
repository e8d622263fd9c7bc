"""Screenshots of the app with recorded 8-GPU data (pytest-textual-snapshot)."""

from __future__ import annotations

from typing import Any

from recorded import h100_node

from mntui.sessions.config.jobconfig import parse_config
from mntui.tui.app.main import MntuiApp
from mntui.tui.app.messages import PollDone

CONFIG = """\
job: qwen-sft
nodes: [g369, g375, g380, g381]
nproc_per_node: 8
command: torchrun train.py
"""


def make_app() -> MntuiApp:
    return MntuiApp(parse_config(CONFIG, "configs/qwen.yaml"), poll=False)


async def feed(pilot: Any) -> None:
    app: MntuiApp = pilot.app
    snaps = {}
    for name, rank, kw in (
        ("g369", 0, {}),
        ("g375", 1, {"foreign": True}),
        ("g380", 2, {"frozen": True}),
        ("g381", 3, {"reachable": False}),
    ):
        snap, _ = h100_node(name, rank, **kw)
        snaps[name] = snap
        app.apply_snapshot(snap)
    app.post_message(PollDone(snaps))
    await pilot.pause()


def test_main_screen_with_8_gpus_per_node(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=(150, 48), run_before=feed)


def test_table_view(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=(110, 20), press=["t"], run_before=feed)


def test_help_screen(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=(110, 34), press=["question_mark"])
