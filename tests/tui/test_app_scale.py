"""The app at 8, 32 and 64 nodes in a narrow and a wide terminal, fed recorded data.

Issue 29: at 32 nodes in 220 columns every table cell was cut to its header's width
(`runni`, `94 @`, `no G`) while most of the width stayed empty: the rows were added
before the first poll, and later cells never widened their column. These drive the app
through Pilot with recorded 8-GPU (and GPU-less) nodes and read the cells as drawn.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest
from recorded import h100_node
from rich.text import Text

from mntui.sessions.config.jobconfig import parse_config
from mntui.sessions.poll import NodeProgress, NodeSnapshot, describe
from mntui.tui.app.main import MntuiApp
from mntui.tui.app.messages import PollDone


def make(n: int) -> tuple[MntuiApp, list[str]]:
    names = [f"gpu-node-{i:03d}" for i in range(n)]
    body = f"job: big\nnodes: [{', '.join(names)}]\nnproc_per_node: 8\ncommand: x\n"
    return MntuiApp(parse_config(body, "big.yaml"), poll=False), names


def snaps(names: list[str], gpu: bool) -> dict[str, NodeSnapshot]:
    out = {}
    for rank, name in enumerate(names):
        snap = h100_node(name, rank)[0]
        if not gpu:  # a CPU node, as in the issue: `no GPU`, `load 3.1/16`
            snap = replace(snap, gpu=None, load=(3.12, 3.0, 2.9), ncpu=16, rtt=0.116)
        out[name] = snap
    return out


def drawn_rows(app: MntuiApp) -> list[str]:
    """The table's lines as the terminal shows them (header first)."""
    table = app.table
    return [table.render_line(y).text for y in range(min(table.size.height, 1 + table.row_count))]


async def show(app: MntuiApp, pilot: object, names: list[str], gpu: bool) -> None:
    """Two polls' worth of snapshots and a progress reading: one step behind, advancing."""
    now = time.time()
    progress = {
        n: NodeProgress(n, 94 if r % 3 == 0 else 93, 1.9, now - 0.5) for r, n in enumerate(names)
    }
    line = describe(progress, {n: r for r, n in enumerate(names)}, now)
    data = snaps(names, gpu)
    for _ in range(2):
        for snap in data.values():
            app.apply_snapshot(snap)
        app.post_message(PollDone(data, progress=progress, summary=line))
        await pilot.pause(0.05)  # type: ignore[attr-defined]


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_table_at_32_nodes_in_220_columns_shows_whole_cells(gpu: bool) -> None:
    app, names = make(32)

    async def go() -> None:
        async with app.run_test(size=(220, 50)) as pilot:
            assert app.table_mode
            await show(app, pilot, names, gpu)
            await pilot.pause()
            rows = drawn_rows(app)
            assert rows[0].split() == [
                "node", "rank", "state", "step", "GPUs", "memory", "output", "rtt"
            ]  # fmt: skip
            for rank, row in enumerate(rows[1:]):
                cells = row.split()
                assert cells[:3] == [names[rank], str(rank), "running"], row
                assert " ".join(cells[3:5]) == f"{94 if rank % 3 == 0 else 93} @1.9/s", row
                if gpu:
                    assert cells[5:9] == ["8x", "99%", "387/637G", "0s"], row
                    assert cells[9] == "4ms", row
                else:
                    assert cells[5:9] == ["no", "GPU", "load", "3.1/16"], row
                    assert cells[9:] == ["0s", "116ms"], row
            header = str(app.header.render())
            assert "stopped" not in header and "ranks 0-31 at steps 93–94" in header, header

    asyncio.run(go())


@pytest.mark.parametrize("n", [8, 32, 64])
@pytest.mark.parametrize("width", [120, 220])
def test_table_cells_are_whole_at_every_scale(n: int, width: int) -> None:
    """No cell is cut at 8, 32 or 64 nodes in 120 or 220 columns: each row, as drawn,
    holds every cell's whole text."""
    app, names = make(n)

    async def go() -> None:
        async with app.run_test(size=(width, 50)) as pilot:
            if not app.table_mode:
                await pilot.press("t")
            await show(app, pilot, names, gpu=n != 32)
            await pilot.pause()
            drawn = drawn_rows(app)[1:]
            assert drawn, "no rows drawn"
            for y, row in enumerate(drawn):
                key = list(app.table.rows)[y]
                for cell in app.table.get_row(key):
                    text = cell.plain if isinstance(cell, Text) else str(cell)
                    assert text in row, (text, row)
                assert len(row.rstrip()) < width, row

    asyncio.run(go())
