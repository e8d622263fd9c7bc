"""`mntui kill` of a 2-node job, this tree against another (`--baseline REV`), ABAB on one
fake cluster: a cluster-watched run and a `--no-watch` one, each launched and killed by
its own tree (the baseline's `git archive`, imported ahead of this one: clusterbench's
baseline_env), so a pair is measured at nearly one moment of a shared machine's load.

    .venv/bin/python bench/killbench.py --baseline de4298b --reps 10
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from benchlib import isolate  # noqa: E402
from clusterbench import baseline_env, config, mntui, tagged  # noqa: E402
from fakecluster import FakeCluster, free_port, wait_for  # noqa: E402

WAYS = ("cluster", "direct")


def one(fc: FakeCluster, root: Path, tree: str, way: str, env: dict[str, str] | None) -> float:
    """Milliseconds of one `mntui kill` (launched by the same tree), everything gone after."""
    job = f"kb{tree}{way[0]}"
    cfg = root / f"{job}.yaml"
    cfg.write_text(config(fc, 2, job, free_port(), free_port() if way == "cluster" else None))
    mntui(cfg, "launch", "--no-ui", *(() if way == "cluster" else ("--no-watch",)), env=env)
    t0 = time.perf_counter()
    res = mntui(cfg, "kill", env=env, check=False)
    took = (time.perf_counter() - t0) * 1000
    wait_for(lambda: not tagged(job), 60, interval=0.02, what=f"{job} gone")
    said = (res.stdout + res.stderr).strip().splitlines()[-1:]
    print(f"{tree} {way} {took:.0f} ms, exit {res.returncode}: {said}", file=sys.stderr)
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", required=True, help="a git rev: the A of the pairs")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--json", default="", help="write every time here")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mntui-kb-", dir=os.path.expanduser("~")))
    isolate(root)
    envs = {"A": baseline_env(root, args.baseline), "B": None}
    ms: dict[str, list[float]] = {f"{t}-{w}": [] for t in "AB" for w in WAYS}
    load0 = os.getloadavg()[0]
    fc = FakeCluster(root / "fc", 2).start()
    try:
        for i in range(args.reps):
            for tree in "AB" if i % 2 == 0 else "BA":
                for way in WAYS:
                    ms[f"{tree}-{way}"].append(one(fc, root, tree, way, envs[tree]))
    finally:
        fc.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"killbench: A = {args.baseline}, B = this tree; {args.reps} pairs; "
          f"load {load0:.1f} -> {os.getloadavg()[0]:.1f}")  # fmt: skip
    for way in WAYS:
        a, b = ms[f"A-{way}"], ms[f"B-{way}"]
        diff = statistics.median(y - x for x, y in zip(a, b, strict=True))
        print(f"{way}: A {statistics.median(a):.0f} ms, B {statistics.median(b):.0f} ms "
              f"(median; paired B-A {diff:+.0f} ms)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(ms, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
