"""The app following a run the cluster watches over one stream, against today's path (the
app polling every node), on N fake sshd nodes, in the same run (issue 30: the app at 64
nodes updating every second).

    .venv/bin/python bench/appstream.py --nodes 64 --window 30 --json appstream64.json
    .venv/bin/python bench/appstream.py --nodes 8 --window 10          # does it work

One cluster-watched launch (`watch.where: cluster`, the stdlib job printing `step N` at
10 Hz on every node), then the headless app (Textual's run_test, 200x60) shown that run
twice, in turn: once following the coordinator's stream (one ssh to the main), once with
the stream turned off, as the app was before it: it polls every node each
`watch.interval`. Each phase waits until every pane has had a snapshot and a log
read (and 2 s more: a pane's first read is its backlog, not the pace), then counts
for `--window` seconds: each pane's snapshot updates and log updates (chunks with bytes)
a second, the log lines it got, the Poller's rounds, and the manager's CPU: this
process's (the app, all its threads) plus every process it started outside the fake
nodes (its ssh clients), from /proc (clustercpu.manager_pids).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from benchlib import isolate  # noqa: E402
from clusterbench import config, mntui, tagged  # noqa: E402
from clustercpu import _stat, manager_pids  # noqa: E402
from fakecluster import FakeCluster, free_port, wait_for  # noqa: E402

from mntui.sessions.config import load_config  # noqa: E402
from mntui.sessions.poll import NodeSnapshot, Verdict  # noqa: E402
from mntui.sessions.runs import RunRecord  # noqa: E402
from mntui.tui.app.main import MntuiApp  # noqa: E402

WARMUP = 120.0  # seconds for every pane's first snapshot (64 polled nodes take a while)


class Counted(MntuiApp):
    """The app, counting what each pane is given; `stream` False: today's path."""

    def __init__(self, *args: Any, stream: bool, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.stream = stream
        self.snaps: Counter[str] = Counter()
        self.logs: Counter[str] = Counter()
        self.lines: Counter[str] = Counter()

    def streams(self, record: RunRecord) -> bool:
        return self.stream and super().streams(record)

    def apply_snapshot(self, snap: NodeSnapshot, verdict: Verdict | None = None) -> None:
        self.snaps[snap.node] += 1
        super().apply_snapshot(snap, verdict)

    def apply_log(self, node: str, data: bytes) -> None:
        self.count(node, data)
        super().apply_log(node, data)

    def restart_log(self, node: str, data: bytes) -> None:
        self.count(node, data)
        super().restart_log(node, data)

    def count(self, node: str, data: bytes) -> None:
        if data:
            self.logs[node] += 1
            self.lines[node] += data.count(b"\n")


class Cpu:
    """This process's CPU (the app, all its threads) and its helpers' across a window:
    each helper from its first reading (all of it when born in the window) to its last."""

    def __init__(self, fc: FakeCluster, job: str) -> None:
        self.fc, self.job, self.state = fc, job, Path(os.environ["XDG_STATE_HOME"])
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        t = os.times()
        self.own0, self.opening = t.user + t.system, True
        self.sample()
        self.opening = False

    def sample(self) -> None:
        for pid in manager_pids(self.fc, self.job, self.state):
            st = _stat(pid)
            if st is not None:
                self.first.setdefault(pid, st[1] if self.opening else 0.0)
                self.last[pid] = st[1]

    def used_ms(self) -> float:
        self.sample()
        t = os.times()
        own = (t.user + t.system - self.own0) * 1000
        return own + sum(self.last[p] - self.first[p] for p in self.last)


async def phase(
    fc: FakeCluster, cfg: Path, job: str, stream: bool, window: float
) -> dict[str, object]:
    app = Counted(load_config(cfg), stream=stream)
    async with app.run_test(size=(200, 60)) as pilot:
        end = time.monotonic() + WARMUP
        while min(len(app.snaps), len(app.logs)) < len(app.views) and time.monotonic() < end:
            await pilot.pause(0.2)
        await pilot.pause(2.0)  # each pane's first read (its backlog) is not the pace
        app.snaps.clear(), app.logs.clear(), app.lines.clear()
        polls0 = app.poller.polls if app.poller is not None else 0
        cpu, t0 = Cpu(fc, job), time.monotonic()
        while time.monotonic() - t0 < window:
            await pilot.pause(1.0)
            cpu.sample()  # a helper that ends in the window still counts
        took = time.monotonic() - t0
        used = cpu.used_ms()
        polls = (app.poller.polls if app.poller is not None else 0) - polls0
        nodes = list(app.views)
        await pilot.press("q")

    def per_s(c: Counter[str]) -> list[float]:
        return [c[n] / took for n in nodes]

    snaps, logs, lines = per_s(app.snaps), per_s(app.logs), per_s(app.lines)
    return {
        "path": "stream (one ssh to the main)" if stream else "today: the app polls every node",
        "seconds": round(took, 1),
        "snap_updates_per_s_per_pane_median": round(statistics.median(snaps), 2),
        "snap_updates_per_s_per_pane_min": round(min(snaps), 2),
        "log_updates_per_s_per_pane_median": round(statistics.median(logs), 2),
        "log_lines_per_s_per_pane_median": round(statistics.median(lines), 1),
        "poller_rounds": polls,
        "manager_cpu_pct": round(used / took / 10, 1),
        "manager_procs": len(cpu.last) + 1,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--window", type=float, default=30.0, help="seconds counted per path")
    ap.add_argument("--json", default="", help="write the results here")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mntui-as-", dir=os.path.expanduser("~")))
    isolate(root)
    n, job = args.nodes, f"as{args.nodes}"
    fc = FakeCluster(root / f"n{n}", n).start()
    cfg = root / f"{job}.yaml"
    cfg.write_text(config(fc, n, job, free_port(), free_port()))
    rows = []
    try:
        mntui(cfg, "launch", "--no-ui")
        for stream in (True, False):  # the same run, each path in turn
            print(f"== N={n}: {'stream' if stream else 'polls'}", file=sys.stderr, flush=True)
            rows.append(asyncio.run(phase(fc, cfg, job, stream, args.window)))
    finally:
        mntui(cfg, "kill", check=False)
        wait_for(lambda: not tagged(job), 60, what="every tagged PID gone")
        fc.stop()
        shutil.rmtree(root, ignore_errors=True)
    out = {"nodes": n, "load_at_end": os.getloadavg(), "rows": rows}
    keys = list(rows[0]) if rows else []
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in keys) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
