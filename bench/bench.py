"""mntui against its baselines, on N fake sshd nodes, as ratios measured in the same run.

    .venv/bin/python bench/bench.py                 # N = 1, 8, 32, 64; 5 repetitions
    .venv/bin/python bench/bench.py --nodes 8 --reps 3
    .venv/bin/python bench/bench.py --transports    # openssh vs paramiko, N = 8, 32
    .venv/bin/python bench/bench.py --nodes 0 --app-ticks 0 --sync-nodes 8 --reps 3

Every repetition runs each contender once, in turn (interleaved), so a noisy
neighbour slows all of them alike; the table gives median and min-max, and the ratio
of medians against the floor: a raw paramiko fan-out of `true` over connections that
are already open. Writes bench/results/<stamp>.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from benchlib import job_config, make_tree, pdsh  # noqa: E402
from fakecluster import FakeCluster  # noqa: E402

from mntui.sessions.config.jobconfig import parse_config  # noqa: E402
from mntui.sessions.launch import kill_job, launch  # noqa: E402
from mntui.sessions.poll import Poller  # noqa: E402
from mntui.sessions.ssh import Cluster  # noqa: E402
from mntui.sessions.ssh.paramikonode import RemoteNode  # noqa: E402

STATUS_CMD = "tmux ls 2>/dev/null; cat /proc/loadavg; ss -Hltn | wc -l"


def raw_true(cluster: Cluster) -> None:
    """The floor: `true` on every node at once, one exec channel each, on open connections."""

    def one(node: RemoteNode) -> None:
        chan = node._transport().open_session()
        chan.exec_command("true")
        chan.recv_exit_status()
        chan.close()

    threads = [
        threading.Thread(target=one, args=(n,))
        for n in cluster.nodes.values()
        if isinstance(n, RemoteNode)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def ssh_loop(fc: FakeCluster, n: int, command: str) -> None:
    for i in range(n):
        subprocess.run(
            ["ssh", "-F", str(fc.ssh_config), f"node{i}", command],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            check=True,
        )


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def cold_start(reps: int) -> dict[str, list[float]]:
    """Import cost of the headless CLI vs a bare interpreter, and Textual must stay out."""
    out: dict[str, list[float]] = {"python -c pass": [], "import mntui CLI (headless)": []}
    check = (
        "import sys, mntui.tui.cli.entry, mntui.tui.cli.views, mntui.sessions.poll.poller, "
        "mntui.sessions.watch.mirror; "
        "assert 'textual' not in sys.modules, 'textual imported on a headless path'"
    )
    for _ in range(reps):
        out["python -c pass"].append(
            timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True))
        )
        out["import mntui CLI (headless)"].append(
            timed(lambda: subprocess.run([sys.executable, "-c", check], check=True))
        )
    return out


def bench_n(root: Path, n: int, reps: int, slow_baselines: bool) -> dict[str, object]:
    fc = FakeCluster(root / f"n{n}", n).start()
    results: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)

    try:
        cfg = parse_config(job_config(fc, n, f"bench{n}"), str(root / f"bench{n}.yaml"))
        with Cluster(cfg.nodes, cfg.ssh) as cluster:
            cluster.connect()
            gaps: list[float] = []
            for _ in range(reps):
                # launch: from the call to every node started; and the main-ready -> first worker gap
                t0 = time.perf_counter()
                res = launch(cfg, cluster=cluster)
                add("launch: until all nodes started", time.perf_counter() - t0)
                if n > 1:
                    gaps.append(
                        min(v for k, v in res.started_at.items() if k != cfg.main) - res.ready_at
                    )
                poller = Poller(res.record, cluster, gpus=False)
                poller.poll()  # first poll learns command lines and sysconf; steady state after
                for _ in range(3):
                    add(
                        "floor: raw paramiko `true`, open connections",
                        timed(lambda: raw_true(cluster)),
                    )
                    add(
                        "mntui: `true` on its persistent shells",
                        timed(lambda: cluster.run(dict.fromkeys(cluster.nodes, "true"))),
                    )
                    add("mntui: full status poll", timed(poller.poll))
                add("pdsh -R ssh: status command", timed(lambda: pdsh(fc, n, STATUS_CMD)))
                if slow_baselines:
                    add(
                        "sequential ssh loop: status command",
                        timed(lambda: ssh_loop(fc, n, STATUS_CMD)),
                    )
                t0 = time.perf_counter()
                out = kill_job(cfg, cluster)
                add("kill-all until verified clean", time.perf_counter() - t0)
                assert all(o.ok and o.value and o.value.clean for o in out.values()), out
            if gaps:
                results["worker start after main ready"] = gaps
    finally:
        fc.stop()
    return {"n": n, "results": results}


TRANSPORTS = ("paramiko", "openssh")


def bench_transports(root: Path, n: int, reps: int) -> dict[str, object]:
    """`ssh.transport: openssh` against paramiko on the same nodes and the same job: each
    repetition runs every contender once, the transports' order alternating."""
    fc = FakeCluster(root / f"t{n}", n).start()
    results: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)

    text = job_config(fc, n, f"tbench{n}")
    cfgs = {
        t: parse_config(
            text.replace("connect_timeout: 10}", f"connect_timeout: 10, transport: {t}}}"),
            str(root / f"tbench{n}-{t}.yaml"),
        )
        for t in TRANSPORTS
    }
    clusters = {t: Cluster(cfgs[t].nodes, cfgs[t].ssh) for t in TRANSPORTS}
    try:
        for cluster in clusters.values():
            assert cluster.connect().all_ok
        res = launch(cfgs["paramiko"], cluster=clusters["paramiko"])
        pollers = {t: Poller(res.record, clusters[t], gpus=False) for t in TRANSPORTS}
        for poller in pollers.values():
            poller.poll()  # learns command lines and sysconf: steady state after
        for rep in range(reps):
            order = TRANSPORTS if rep % 2 == 0 else TRANSPORTS[::-1]
            for _ in range(3):
                add(
                    "floor: raw paramiko `true`, open connections",
                    timed(lambda: raw_true(clusters["paramiko"])),
                )
                for t in order:
                    c = clusters[t]
                    add(
                        f"{t}: `true` on its persistent shells",
                        timed(lambda c=c: c.run(dict.fromkeys(c.nodes, "true"))),
                    )
                    add(f"{t}: full status poll", timed(pollers[t].poll))
            for t in order:
                with Cluster(cfgs[t].nodes, cfgs[t].ssh) as fresh:
                    add(f"{t}: connect all nodes (cold)", timed(fresh.connect))
        out = kill_job(cfgs["paramiko"], clusters["paramiko"])
        assert all(o.ok and o.value and o.value.clean for o in out.values()), out
    finally:
        for cluster in clusters.values():
            cluster.close()
        fc.stop()
    return {"n": n, "results": results}


def bench_sync(root: Path, n: int, mb: int, reps: int) -> dict[str, list[float]]:
    """`sync:` to N nodes (all at once, through the noise relay, by content) against a
    sequential `rsync -a` loop over the same ssh_config: a first sync, then one file changed."""
    from mntui.sessions.sync import sync_nodes

    fc = FakeCluster(root / "sync", n).start()
    for node in fc.nodes:  # the plain loop needs a login shell that is quiet on stdout
        (node.home / ".bashrc").write_text('echo "conda: base environment activated" >&2\n')
    src = root / "sync-src"
    files = make_tree(src, mb)
    results: dict[str, list[float]] = {}
    try:
        for rep in range(reps):
            nodes = ", ".join(f"node{i}" for i in range(n))
            cfg = parse_config(
                f"job: bsync\nnodes: [{nodes}]\nworkdir: ~/mntui-{rep}\ncommand: x\n"
                f"sync: {{source: {src}, gitignore: false}}\nssh: {{config: {fc.ssh_config}}}\n",
                str(root / "bsync.yaml"),
            )

            def loop(rep: int = rep) -> None:
                for i in range(n):
                    subprocess.run(
                        ["rsync", "-a", "-e", f"ssh -F {fc.ssh_config}", f"{src}/",
                         f"node{i}:{fc.nodes[i].home}/loop-{rep}/"],
                        check=True,
                        stdin=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )  # fmt: skip

            for phase in ("first sync", "one file changed"):
                if phase != "first sync":
                    files[rep % len(files)].write_bytes(os.urandom(50_000))
                mntui = timed(lambda cfg=cfg: sync_nodes(cfg))
                results.setdefault(f"sync {mb} MB, {phase}: mntui, all nodes at once", []).append(
                    mntui
                )
                results.setdefault(f"sync {mb} MB, {phase}: sequential rsync loop", []).append(
                    timed(loop)
                )
    finally:
        fc.stop()
        shutil.rmtree(root / "sync", ignore_errors=True)  # N x reps copies of the tree
        shutil.rmtree(src, ignore_errors=True)
    return results


def app_scale(ticks: int, nodes: int = 64, table: bool = False) -> dict[str, float]:
    """The app fed 64 nodes x 8 GPUs of recorded data at 1 Hz: per-tick work and CPU share."""
    import asyncio
    import resource

    from recorded import h100_node

    from mntui.tui.app.main import MntuiApp
    from mntui.tui.app.messages import PollDone

    names = ", ".join(f"g{i}" for i in range(nodes))
    cfg = parse_config(
        f"job: scale\nnodes: [{names}]\nnproc_per_node: 8\ncommand: x\n", "scale.yaml"
    )
    frames: list[float] = []
    cpu = 0.0
    # Snapshots are parsed in the poll worker in the real app, not on the UI thread: build them first.
    feeds = [
        {
            f"g{i}": h100_node(f"g{i}", i, step=1000 + tick * 12, frozen=(i == 7 and tick > 2))[0]
            for i in range(nodes)
        }
        for tick in range(ticks)
    ]

    async def go() -> None:
        nonlocal cpu
        app = MntuiApp(cfg, poll=False)
        async with app.run_test(size=(200, 60)) as pilot:
            if app.table_mode != table:
                await pilot.press("t")
            await pilot.pause()

            def used() -> float:
                r = resource.getrusage(resource.RUSAGE_SELF)
                return r.ru_utime + r.ru_stime

            c0, t0 = used(), time.perf_counter()
            for tick in range(ticks):
                start, c_start = time.perf_counter(), used()
                snaps = feeds[tick]
                for snap in snaps.values():
                    app.apply_snapshot(snap)
                app.post_message(PollDone(snaps))
                await pilot.pause()  # until the app has handled everything
                await asyncio.sleep(0.1)  # and its refresh timer has drawn the frame
                frames.append(used() - c_start)  # the CPU this tick's update and draw cost
                await asyncio.sleep(max(0.0, 1.0 - (time.perf_counter() - start)))
            cpu = (used() - c0) / (time.perf_counter() - t0)

    asyncio.run(go())
    steady = frames[1:] or frames  # the first tick also draws every widget for the first time
    return {
        "first_tick_ms": frames[0] * 1000,
        "tick_median_ms": statistics.median(steady) * 1000,
        "tick_max_ms": max(steady) * 1000,
        "cpu_percent_of_one_core": cpu * 100,
    }  # tick_*: CPU seconds spent per 1 Hz tick


def summarize(
    runs: list[dict[str, object]],
    cold: dict[str, list[float]],
    app: dict[str, dict[str, float]] | None = None,
    sync: dict[str, list[float]] | None = None,
    sync_nodes: int = 0,
) -> str:
    lines = [
        "| N | measurement | median ms | min-max ms | ratio to floor |",
        "|---|---|---:|---:|---:|",
    ]
    for run in runs:
        res: dict[str, list[float]] = run["results"]  # type: ignore[assignment]
        floor = statistics.median(res["floor: raw paramiko `true`, open connections"])
        for name, vals in res.items():
            med = statistics.median(vals)
            skip = name.startswith(("worker", "launch")) or "(cold)" in name
            ratio = "" if skip else f"{med / floor:.2f}x"
            lines.append(
                f"| {run['n']} | {name} | {med * 1000:.1f} | {min(vals) * 1000:.1f}-{max(vals) * 1000:.1f} "
                f"| {ratio} |"
            )
    base = statistics.median(cold["python -c pass"]) if cold else 1.0
    for name, vals in cold.items():
        med = statistics.median(vals)
        lines.append(
            f"| - | cold start: {name} | {med * 1000:.1f} | {min(vals) * 1000:.1f}-{max(vals) * 1000:.1f} "
            f"| {med / base:.2f}x of `python -c pass` |"
        )
    for name, vals in (sync or {}).items():
        med = statistics.median(vals)
        base = statistics.median((sync or {})[name.split(":")[0] + ": sequential rsync loop"])
        lines.append(
            f"| {sync_nodes} | {name} | {med * 1000:.0f} | {min(vals) * 1000:.0f}-{max(vals) * 1000:.0f} "
            f"| {med / base:.2f}x of the loop |"
        )
    for view, m in (app or {}).items():
        lines.append(
            f"| 64x8 GPUs | app at 1 Hz, {view}: CPU per tick (update+draw) | {m['tick_median_ms']:.1f} | "
            f"max {m['tick_max_ms']:.1f} (first {m['first_tick_ms']:.0f}) | {m['cpu_percent_of_one_core']:.1f}% of one core |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--nodes", default=None, help="comma-separated node counts (1,8,32,64; 0: none)"
    )
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-slow", action="store_true", help="skip the sequential ssh loop")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    ap.add_argument(
        "--transports",
        action="store_true",
        help="only openssh vs paramiko (default --nodes 8,32): `true` fan-out, poll, connect",
    )
    ap.add_argument(
        "--app-ticks", type=int, default=20, help="1 Hz ticks of the 64x8 app run (0: skip)"
    )
    ap.add_argument("--sync-nodes", type=int, default=0, help="nodes of the sync run (0: skip)")
    ap.add_argument("--sync-mb", type=int, default=50, help="MB of random files the sync copies")
    args = ap.parse_args()
    nodes = args.nodes or ("8,32" if args.transports else "1,8,32,64")
    counts = [int(x) for x in nodes.split(",") if x.strip() and int(x) > 0]
    root = Path(tempfile.mkdtemp(prefix="mntui-bench-", dir=os.path.expanduser("~")))
    os.environ.setdefault("XDG_STATE_HOME", str(root / "state"))
    runs = []
    for n in counts:
        print(f"== N={n}", file=sys.stderr, flush=True)
        if args.transports:
            runs.append(bench_transports(root, n, args.reps))
        else:
            runs.append(bench_n(root, n, args.reps, not args.no_slow))
    cold = cold_start(args.reps) if not args.transports else {}
    app = {}
    if args.app_ticks and not args.transports:
        print("== app, 64 nodes x 8 GPUs", file=sys.stderr, flush=True)
        app = {
            "grid": app_scale(args.app_ticks, table=False),
            "table": app_scale(args.app_ticks, table=True),
        }
    sync = {}
    if args.sync_nodes:
        print(f"== sync, {args.sync_nodes} nodes x {args.sync_mb} MB", file=sys.stderr, flush=True)
        sync = bench_sync(root, args.sync_nodes, args.sync_mb, args.reps)
    table = summarize(runs, cold, app, sync, args.sync_nodes)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "python": platform.python_version(),
        "reps": args.reps,
    }
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"{stamp}.json").write_text(
        json.dumps({**meta, "runs": runs, "cold_start": cold, "app": app, "sync": sync}, indent=2)
    )
    print(f"mntui benchmark, {meta['date']}, {meta['machine']}, {args.reps} repetitions\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
