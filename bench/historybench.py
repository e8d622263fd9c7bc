"""`mntui history` and `mntui nodes --history` over many synthetic run records.

    .venv/bin/python bench/historybench.py --runs 1000 --reps 5

Writes `runs` records (chains of 1-4 attempts over 8 jobs and 16 nodes; a third of the
attempts torn down with a failure report, each with a `steps` note) into a fresh state
dir, then times the real CLI verbs in a subprocess each (what a user waits for: the
interpreter, imports and the scan) and the scan + fold + ledger in-process. The target
of issue 22: `history` over 1,000 records in < 300 ms. Prints a markdown table;
medians and min-max; the interpreter's bare start (`python -c pass`) is the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

T0 = 1_790_000_000.0


def _run(job: str, rid: str, chain: str, attempt: int, at: float, nodes: list[str],
         failed: str | None) -> dict[str, Any]:  # fmt: skip
    notes: list[dict[str, Any]] = [
        {"at": at + 40, "what": "steps", "first_step_at": at + 10, "last_step_at": at + 40,
         "first_step": 1, "last_step": 30, "checkpoints": True, "checkpoint_at": at + 30,
         "checkpoint_step": 20},
    ]  # fmt: skip
    if failed:
        notes.append({"at": at + 43, "what": "watchdog-teardown", "node": failed, "state": "failed",
                      "why": "exit code 3", "last_lines": ["x"] * 20, "kill_seconds": 1.2})  # fmt: skip
    return {
        "job": job, "run_id": rid, "config": "/j.yaml", "master_addr": "10.0.0.1",
        "master_port": 29500, "created_at": at, "status": "restarting" if failed else "finished",
        "nodes": [{"node": n, "host": n, "rank": i, "session": f"mntui-{job}-{i}", "tag": "t",
                   "run_dir": "/r", "started_at": at, "nproc": 8} for i, n in enumerate(nodes)],
        "chain": chain, "attempt": attempt, "attempts": [], "history": notes,
    }  # fmt: skip


def populate(base: Path, runs: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    names = [f"g{300 + i}" for i in range(16)]
    written, at = 0, T0
    while written < runs:
        job = f"job{rng.randrange(8)}"
        nodes = rng.sample(names, 4)
        attempts = min(rng.randint(1, 4), runs - written)
        chain = ""
        for a in range(attempts):
            stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(at))
            rid = f"{stamp}-{written % 65536:04x}"
            chain = chain or rid
            failed = rng.choice(nodes) if a < attempts - 1 else None
            d = base / "mntui" / job / rid
            d.mkdir(parents=True)
            (d / "run.json").write_text(
                json.dumps(_run(job, rid, chain, a, at, nodes, failed), indent=2)
            )
            if failed:
                report = {"cause_node": failed, "cause": "exit code 3", "first_at": at + 41,
                          "ended_at": at + 42.5, "ending": "torn-down",
                          "nodes": [{"node": n, "first_problem_at": at + 41} for n in nodes],
                          "consequences": []}  # fmt: skip
                (d / "report.json").write_text(json.dumps(report, indent=2))
            written += 1
            at += 60


def timed(argv: list[str], env: dict[str, str], reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        res = subprocess.run(argv, env=env, capture_output=True, text=True)
        out.append((time.perf_counter() - t) * 1000)
        if res.returncode != 0:
            raise SystemExit(f"{argv}: exit {res.returncode}: {res.stderr[-500:]}")
    return out


def in_process(reps: int) -> list[float]:
    from mntui.sessions.history import fold, ledgers, scan

    out = []
    for _ in range(reps):
        t = time.perf_counter()
        found = scan()
        ledgers(found, time.time())
        fold(found)
        out.append((time.perf_counter() - t) * 1000)
    return out


def row(what: str, ms: list[float]) -> str:
    return f"| {what} | {statistics.median(ms):.0f} | {min(ms):.0f}-{max(ms):.0f} |"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mntui-historybench-") as tmp:
        populate(Path(tmp), args.runs)
        env = {**os.environ, "XDG_STATE_HOME": tmp}
        os.environ["XDG_STATE_HOME"] = tmp
        cli = [sys.executable, "-m", "mntui.tui.cli"]
        rows = [
            row("python -c pass (baseline)", timed([sys.executable, "-c", "pass"], env, args.reps)),
            row("mntui history", timed([*cli, "history"], env, args.reps)),
            row("mntui history --json", timed([*cli, "history", "--json"], env, args.reps)),
            row("scan + ledgers + fold, in-process", in_process(args.reps)),
        ]
        hist = subprocess.run([*cli, "history"], env=env, capture_output=True, text=True)
    print(f"{args.runs} run records, {args.reps} repetitions; target: `mntui history` < 300 ms\n")
    print("| what | median ms | min-max ms |\n|---|---|---|")
    print("\n".join(rows))
    print(f"\n{len(hist.stdout.splitlines())} lines of `mntui history`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
