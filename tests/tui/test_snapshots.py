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


def test_80x24_keeps_the_header_whole_and_help_and_quit_in_the_footer() -> None:
    """Issue 38, item 5: at 80x24 the header was cut before the progress and the watch,
    and the key bar lost `? help` and `q quit`."""
    import asyncio

    from textual.widgets import Footer
    from textual.widgets._footer import FooterKey

    async def go() -> None:
        app = make_app()
        async with app.run_test(size=(80, 24)) as pilot:
            await feed(pilot)
            app.progress_line = "ranks 0-3 at step 1200 @3.1/s"
            app.refresh_header()
            await pilot.pause()
            header = app.query_one("#header")
            assert header.size.height == 2, header.size
            shown = "".join(str(header.render_line(y).text) for y in range(2))
            assert "progress: ranks 0-3 at step 1200" in shown, shown
            shown_keys = [
                k.description
                for k in app.query_one(Footer).query(FooterKey)
                if k.region.width and k.region.right <= 80
            ]
            assert {"help", "quit"} <= set(shown_keys), shown_keys

    asyncio.run(go())
