"""The app's screenshots for the docs, made by the app itself: `python bench/screenshots.py`.

Textual exports what it draws as SVG; this feeds the app recorded 8-GPU data (the
snapshot tests' tests/recorded.py) and a progress reading like the cluster's stream sends,
then saves docs/img/app.svg (the grid) and docs/img/table.svg. Run it after a change to
what the app shows; tests/tui/test_screenshots.py runs it into a temporary directory.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from recorded import h100_node  # noqa: E402

from mntui.sessions.config.jobconfig import parse_config  # noqa: E402
from mntui.sessions.poll import NodeProgress, describe  # noqa: E402
from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus  # noqa: E402
from mntui.tui.app.main import MntuiApp  # noqa: E402
from mntui.tui.app.messages import PollDone  # noqa: E402

CONFIG = """\
job: qwen-sft
nodes: [g369, g375, g380, g381]
nproc_per_node: 8
command: torchrun train.py
watch: {slow_after: 0.001}
"""
NODES = ("g369", "g375", "g380", "g381")
# (step, steps/s): g380 is a straggler; g381 does not answer.
PROGRESS = {"g369": (1211, 1.9), "g375": (1211, 1.9), "g380": (1187, 0.6)}
SHOTS = {"app.svg": ((150, 46), ()), "table.svg": ((120, 16), ("t",))}


def record() -> RunRecord:
    nodes = [NodeRecord(n, n, r, f"qwen+sft-{n}", "t", "d") for r, n in enumerate(NODES)]
    rec = RunRecord("qwen-sft", "20261124-081500-3fa9", "mntui.yaml", "g369", 29500, nodes)
    rec.status = RunStatus.RUNNING
    rec.watch_port = 29501  # the cluster watches it: the header says so (no stream: poll=False)
    rec.created_at = time.time() - 3723
    return rec


async def shoot(name: str, size: tuple[int, int], keys: tuple[str, ...], out: Path) -> None:
    cfg = parse_config(CONFIG, "mntui.yaml")
    app = MntuiApp(cfg, record=record(), poll=False)
    async with app.run_test(size=size) as pilot:
        snaps = {
            n: h100_node(n, r, step=PROGRESS.get(n, (0, 0))[0] - 11, reachable=n != "g381")[0]
            for r, n in enumerate(NODES)
        }
        progress = {n: NodeProgress(n, s, rate, None) for n, (s, rate) in PROGRESS.items()}
        line = describe(progress, {n: r for r, n in enumerate(NODES)})
        for _ in range(2):  # the second reading marks the straggler (watch.slow_after)
            for snap in snaps.values():
                app.apply_snapshot(snap)
            app.post_message(PollDone(snaps, progress=progress, summary=line))
            await pilot.pause(0.05)
        for key in keys:
            await pilot.press(key)
        await pilot.pause()
        app.save_screenshot(filename=name, path=str(out))


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else REPO / "docs" / "img"
    out.mkdir(parents=True, exist_ok=True)
    for name, (size, keys) in SHOTS.items():
        asyncio.run(shoot(name, size, keys, out))
        print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
