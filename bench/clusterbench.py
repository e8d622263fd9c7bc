"""The watch on the cluster (issue 30) against today's path, on N fake sshd nodes.

    .venv/bin/python bench/clusterbench.py                  # N = 64 (5 reps), 128 (3 reps)
    .venv/bin/python bench/clusterbench.py --quick          # N = 8, 1 rep, a 5 s window
    .venv/bin/python bench/clusterbench.py --nodes 64 --reps 5 --json out.json
    .venv/bin/python bench/clusterbench.py --status-only --nodes 8 --reps 15 --baseline HEAD

The job is stdlib (one python3 a node printing `step N` at 10 Hz; torch x 128 would
measure the 2 cores). Each repetition runs every contender once, in turn: a cluster-
watched run (`watch.where: cluster`) and the same job unwatched (`--no-watch`: the
direct path), against the floor, a fresh `ssh` to the
main node. After the first cluster launch of each N, a window (20 s) measures what the
manager still spends (every process that inherited this bench's state dir, outside the
fake nodes) and the sentinels' and the coordinator's CPU, from /proc.

`--status-only`: one cluster launch per N, then only the cold `status` rows, each
repetition in turn (the floor, `status --json` of this tree, of `--baseline REV`'s tree
if given: `git archive` of REV, imported instead of this one through PYTHONPATH, and the
bare interpreter), then one kill. The cluster path reads one board from the main
whatever N is, so a small N measures it. `--pyc`: the CLI's processes keep bytecode (in
the bench's own cache dir), as an installed mntui does; without it they run as this
tree's tests do (PYTHONDONTWRITEBYTECODE where it is set: every module compiled).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from benchlib import isolate  # noqa: E402
from clustercpu import Window, cpu_window  # noqa: E402
from fakecluster import FakeCluster, alive, free_port, pids_with_env, wait_for  # noqa: E402

CLI = [sys.executable, "-m", "mntui.tui.cli"]
STEPS = (
    'exec python3 -u -c "import itertools, time; '
    "[(print('step', i, flush=True), time.sleep(0.1)) for i in itertools.count()]\""
)
FLOOR = "floor: fresh `ssh -F ssh_config node0 true`"
ST_C = "`mntui status --json`, cluster (coordinator)"
ST_H = "`mntui status --json`, here, `--no-watch` (direct)"
ST_B = "`mntui status --json`, cluster, the baseline tree (--baseline)"
IMP = "python: import what cluster `status` imports, fresh process"
PY = "python: `-c pass`, fresh process"
KILL_C = "`mntui kill`, cluster: returns"
KILL_C_CLEAN = "`mntui kill`, cluster: no tagged PID left"
KILL_H = "`mntui kill`, here (direct): returns"
KILL_H_CLEAN = "`mntui kill`, here (direct): no tagged PID left"
LAUNCH_C = "`launch --no-ui`, cluster (sentinels confirmed)"
LAUNCH_H = "`launch --no-ui --no-watch`, here"
ROWS = [
    FLOOR, ST_C, ST_B, ST_H, PY, IMP, KILL_C, KILL_C_CLEAN, KILL_H, KILL_H_CLEAN, LAUNCH_C, LAUNCH_H
]  # fmt: skip
# The CLI with its modules written out at exit: -X importtime misses what
# importlib.import_module loads (a wing's lazy exports, sessions/exports.py).
MODULES_AT_EXIT = """import atexit, json, os, runpy, sys
atexit.register(lambda: open(os.environ["CB_MODULES"], "w").write(json.dumps(sorted(sys.modules))))
runpy.run_module("mntui.tui.cli", run_name="__main__", alter_sys=True)
"""
TARGET = {ST_C: "≤ 1.5× floor", KILL_C_CLEAN: "≤ 1.5 s at 64"}


def config(fc: FakeCluster, n: int, job: str, port: int, wport: int | None) -> str:
    nodes = ", ".join(f"node{i}" for i in range(n))
    # the direct path: no watch (`auto`, the default, would be the cluster's)
    watch = f"watch: {{where: cluster, port: {wport}}}\n" if wport else "watch: {where: here}\n"
    return f"""job: {job}
nodes: [{nodes}]
master_port: {port}
command: >-
  {STEPS}
launch: {{ready: log, ready_pattern: "step 2", ready_timeout: 180}}
kill: {{grace: 2}}
ssh: {{config: {fc.ssh_config}, connect_timeout: 30}}
{watch}"""


def mntui(
    cfg: Path, *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`env`: the baseline tree's (PYTHONPATH), else this one's."""
    res = subprocess.run(
        [*CLI, "-c", str(cfg), *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    if check and res.returncode != 0:
        raise RuntimeError(f"mntui {' '.join(args)} ({res.returncode}): {res.stderr[-1500:]}")
    return res


def tagged(job: str) -> list[int]:
    """Every process of the job on any node: ranks, shells, sentinels, coordinator."""
    return alive(pids_with_env(f"MNTUI_RUN={re.escape(job)}/[^/]+/[^/]+(/[a-z]+)?"))


def imports_of(cfg: Path, scratch: Path) -> tuple[float, list[str]]:
    """Milliseconds of imports inside one cold cluster `status --json` (`-X importtime`:
    the top-level lines), and every module it had loaded at its end (sys.modules)."""
    res = subprocess.run(
        [sys.executable, "-X", "importtime", *CLI[1:], "-c", str(cfg), "status", "--json"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    us = 0
    for line in res.stderr.splitlines():
        parts = line.split("|")
        if line.startswith("import time:") and len(parts) == 3 and parts[2][1:2] != " ":
            cum = parts[1].strip()
            if cum.isdigit():  # not the header line
                us += int(cum)
    out = scratch / "modules.json"
    subprocess.run(
        [sys.executable, "-c", MODULES_AT_EXIT, "-c", str(cfg), "status", "--json"],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "CB_MODULES": str(out)},
    )
    names = json.loads(out.read_text())
    return us / 1000, [m for m in names if not m.startswith("_") and m not in ("runpy", "atexit")]


def import_all(names: list[str]) -> list[str]:
    """A fresh interpreter importing `names`, as the status process did."""
    return [
        sys.executable,
        "-c",
        f"import importlib\nfor m in {names!r}: importlib.import_module(m)",
    ]


class Rep:
    """One N's contenders and their timings, each list in repetition order."""

    def __init__(
        self, fc: FakeCluster, root: Path, n: int, baseline: dict[str, str] | None = None
    ) -> None:
        self.fc, self.n, self.job, self.root = fc, n, f"cb{n}", root
        self.baseline = baseline  # the baseline tree's environment, if one is timed
        self.cfg_c, self.cfg_h = root / f"{self.job}-cluster.yaml", root / f"{self.job}-here.yaml"
        self.ports()
        self.floor = ["ssh", "-F", str(fc.ssh_config), "node0", "true"]
        self.ms: dict[str, list[float]] = {r: [] for r in ROWS}
        self.imports: list[float] = []
        self.notes: list[str] = []
        self.board: list[dict[str, int | None]] = []  # what a status reads, bytes

    def ports(self) -> None:
        """Fresh ports for each launch, below the ephemeral range: thousands of SSH
        connections a repetition once took the coordinator's port as a client port."""
        port, wport = free_port(), free_port()
        self.cfg_c.write_text(config(self.fc, self.n, self.job, port, wport))
        self.cfg_h.write_text(config(self.fc, self.n, self.job, port, None))

    def time(self, row: str, fn: Callable[[], object]) -> object:
        t0 = time.perf_counter()
        out = fn()
        self.ms[row].append((time.perf_counter() - t0) * 1000)
        return out

    def kill(self, cfg: Path, row: str, clean_row: str, via: str) -> None:
        t0 = time.perf_counter()
        res = mntui(cfg, "kill")
        self.ms[row].append((time.perf_counter() - t0) * 1000)
        wait_for(lambda: not tagged(self.job), 60, interval=0.02, what="every tagged PID gone")
        self.ms[clean_row].append((time.perf_counter() - t0) * 1000)
        said = res.stdout + res.stderr
        if via and via not in said:
            self.notes.append(f"{row}: did not say {via!r}: {said[-300:]}")

    def cluster(self, i: int, window: Callable[[], None]) -> None:
        self.ports()
        res = self.time(LAUNCH_C, lambda: mntui(self.cfg_c, "launch", "--no-ui"))
        if "watched by the cluster" not in getattr(res, "stdout", ""):
            self.notes.append(f"cluster launch {i}: not watched by the cluster")
        window()
        self.time(FLOOR, partial(subprocess.run, self.floor, check=True, capture_output=True))
        res = self.time(ST_C, lambda: mntui(self.cfg_c, "status", "--json", check=False))
        if status_via(res) != "coordinator" or getattr(res, "returncode", 0) != 0:
            self.notes.append(f"cluster status {i}: via {status_via(res)}: {states(res)}")
        coord = self.fc.node("node0").run_dirs(self.job)[-1] / "coord"
        self.board.append({f: size(coord / f) for f in ("status.json", "journal.jsonl")})
        self.time(PY, partial(subprocess.run, [sys.executable, "-c", "pass"], check=True))
        took, names = imports_of(self.cfg_c, self.root)
        self.imports.append(took)
        self.time(IMP, partial(subprocess.run, import_all(names), check=True))
        self.kill(self.cfg_c, KILL_C, KILL_C_CLEAN, "asked the coordinator")

    def statuses(self, i: int) -> None:
        """The cold status rows alone, each in turn, on the run launched once."""
        self.time(FLOOR, partial(subprocess.run, self.floor, check=True, capture_output=True))
        res = self.time(ST_C, lambda: mntui(self.cfg_c, "status", "--json", check=False))
        if status_via(res) != "coordinator" or getattr(res, "returncode", 0) != 0:
            self.notes.append(f"cluster status {i}: via {status_via(res)}: {states(res)}")
        if self.baseline is not None:
            env = self.baseline
            res = self.time(
                ST_B, lambda: mntui(self.cfg_c, "status", "--json", check=False, env=env)
            )
            if status_via(res) != "coordinator" or getattr(res, "returncode", 0) != 0:
                self.notes.append(f"baseline status {i}: via {status_via(res)}: {states(res)}")
        self.time(PY, partial(subprocess.run, [sys.executable, "-c", "pass"], check=True))
        if i == 0:
            took, names = imports_of(self.cfg_c, self.root)
            self.imports.append(took)
            self.time(IMP, partial(subprocess.run, import_all(names), check=True))

    def here(self, i: int) -> None:
        self.time(LAUNCH_H, lambda: mntui(self.cfg_h, "launch", "--no-ui", "--no-watch"))
        res = self.time(ST_H, lambda: mntui(self.cfg_h, "status", "--json", check=False))
        if status_via(res) != "direct":
            self.notes.append(f"here status {i}: via {status_via(res)}: {said(res)}")
        elif getattr(res, "returncode", 0) != 0:  # the job's state, not a failure to say it
            self.notes.append(
                f"here status {i}: exit {getattr(res, 'returncode', 0)}: {states(res)}"
            )
        self.kill(self.cfg_h, KILL_H, KILL_H_CLEAN, "")


def size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def said(res: object) -> str:
    out = res.stdout + res.stderr if isinstance(res, subprocess.CompletedProcess) else ""
    return str(out[-300:])


def states(res: object) -> str:
    """`status --json`'s nodes, counted by state (and a sample of why)."""
    try:
        nodes = json.loads(res.stdout)["nodes"]  # type: ignore[attr-defined]
    except (ValueError, KeyError, TypeError):
        return said(res)
    count: dict[str, int] = {}
    for node in nodes:
        count[node["state"]] = count.get(node["state"], 0) + 1
    odd = [f"{x['node']}: {x.get('why', '')}"[:120] for x in nodes if x["state"] != "running"]
    return f"{count} {odd[:3]}"


def status_via(res: object) -> str:
    out = res.stdout if isinstance(res, subprocess.CompletedProcess) else ""
    m = re.search(r'"via": "(\w+)"', out)
    return m[1] if m else "?"


def status_only(rep: Rep, reps: int) -> None:
    """One launch, `reps` rounds of the cold status rows, one kill."""
    res = rep.time(LAUNCH_C, lambda: mntui(rep.cfg_c, "launch", "--no-ui"))
    if "watched by the cluster" not in getattr(res, "stdout", ""):
        rep.notes.append("cluster launch: not watched by the cluster")
    for i in range(reps):
        print(f"  N={rep.n} status round {i + 1}/{reps}", file=sys.stderr, flush=True)
        rep.statuses(i)
    rep.kill(rep.cfg_c, KILL_C, KILL_C_CLEAN, "asked the coordinator")


def bench_n(
    root: Path,
    n: int,
    reps: int,
    seconds: float,
    only_status: bool,
    baseline: dict[str, str] | None,
) -> dict[str, object]:
    fc = FakeCluster(root / f"n{n}", n).start()
    rep = Rep(fc, root, n, baseline)
    win: list[Window] = []

    def window() -> None:
        if not win:  # once per N, after the first cluster launch returned
            win.append(cpu_window(fc, rep.job, Path(os.environ["XDG_STATE_HOME"]), seconds))

    try:
        if only_status:
            status_only(rep, reps)
        for i in range(0 if only_status else reps):
            print(f"  N={n} rep {i + 1}/{reps}", file=sys.stderr, flush=True)
            rep.cluster(i, window)
            rep.here(i)
    finally:
        mntui(rep.cfg_c, "kill", check=False)
        fc.stop()
    return {
        "n": n,
        "reps": reps,
        "ms": rep.ms,
        "status_imports_ms": rep.imports,
        "board_bytes": rep.board,
        "window": win[0].as_dict() if win else None,
        "notes": rep.notes,
        "load_at_end": os.getloadavg(),
    }


def git_rev(rev: str) -> str:
    res = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", rev],
                         capture_output=True, text=True)  # fmt: skip
    return res.stdout.strip() or rev


def git_dirty() -> bool:
    res = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                         capture_output=True, text=True)  # fmt: skip
    return bool(res.stdout.strip())


def baseline_env(root: Path, rev: str) -> dict[str, str]:
    """`rev`'s tree, importable as `mntui` ahead of this one (PYTHONPATH comes before the
    editable install's finder): `git archive`, and a package dir of links to its parts."""
    tree, pkg = root / "baseline-tree", root / "baseline-pkg" / "mntui"
    tree.mkdir()
    pkg.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True,
                             check=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    for part in ("sessions", "tui", "configs"):
        (pkg / part).symlink_to(tree / part)
    env = {**os.environ, "PYTHONPATH": str(pkg.parent)}
    probe = "import mntui.tui.cli.entry as e; print(e.__file__)"
    where = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                           text=True, check=True).stdout  # fmt: skip
    assert where.startswith(str(pkg)), f"the baseline tree is not the one imported: {where}"
    return env


def med(v: list[float]) -> float:
    s = sorted(v)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2


def table(runs: list[dict[str, object]]) -> str:
    lines = [
        "| N | measurement | median ms | min–max ms | vs floor | target |",
        "|---|---|---:|---:|---:|---|",
    ]
    for run in runs:
        ms: dict[str, list[float]] = run["ms"]  # type: ignore[assignment]
        n, floor = run["n"], med(ms[FLOOR])
        for row in ROWS:
            v = ms[row]
            if not v:  # a row this run did not measure (--status-only, no --baseline)
                continue
            lines.append(
                f"| {n} | {row} | {med(v):.0f} | {min(v):.0f}–{max(v):.0f} "
                f"| {med(v) / floor:.2f}× | {TARGET.get(row, '')} |"
            )
        imp: list[float] = run["status_imports_ms"]  # type: ignore[assignment]
        lines.append(f"| {n} | {ST_C} ÷ {ST_B} | {med(ms[ST_C]) / med(ms[ST_B]):.2f} | | | |"
                     if ms[ST_B] else f"| {n} | (no baseline tree) | | | | |")  # fmt: skip
        lines.append(f"| {n} | of which imports inside cluster `status` (`-X importtime`) "
                     f"| {med(imp):.0f} | {min(imp):.0f}–{max(imp):.0f} | | |")  # fmt: skip
        board: list[dict[str, int | None]] = run["board_bytes"]  # type: ignore[assignment]
        last = board[-1] if board else {}
        lines.append(f"| {n} | the main's board when read: status.json / journal.jsonl bytes "
                     f"| {last.get('status.json')} / {last.get('journal.jsonl')} | | | |")  # fmt: skip
    lines += ["", Window.header()]
    for run in runs:
        if run["window"]:
            lines.append(Window.row(run["n"], run["window"]))  # type: ignore[arg-type]
    notes = [f"- N={r['n']}: {x}" for r in runs for x in r["notes"]]  # type: ignore[attr-defined]
    return "\n".join(lines + (["", *notes] if notes else []))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", default="64,128", help="node counts, e.g. 64,128")
    ap.add_argument("--reps", default="5,3", help="repetitions per node count, e.g. 5,3")
    ap.add_argument("--window", type=float, default=20.0, help="seconds of the CPU window")
    ap.add_argument("--quick", action="store_true", help="8 nodes, 1 rep, a 5 s window")
    ap.add_argument("--json", default="", help="write the results here")
    ap.add_argument("--status-only", action="store_true", help="only the cold status rows")
    ap.add_argument("--baseline", default="", help="a git rev whose tree's status is timed too")
    ap.add_argument("--pyc", action="store_true", help="the CLI keeps bytecode, as installed")
    args = ap.parse_args()
    if args.quick:
        args.nodes, args.reps, args.window = "8", "1", 5.0
    counts = [int(x) for x in args.nodes.split(",")]
    reps = [int(x) for x in args.reps.split(",")]
    reps += [reps[-1]] * (len(counts) - len(reps))
    root = Path(tempfile.mkdtemp(prefix="mntui-cb-", dir=os.path.expanduser("~")))
    isolate(root)
    if args.pyc:  # inherited by every CLI process this bench starts, both trees
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = str(root / "pyc")
    baseline = baseline_env(root, args.baseline) if args.baseline else None
    load0 = os.getloadavg()
    meta: dict[str, object] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "python": platform.python_version(),
        "load_at_start": load0,
        "tree": git_rev("HEAD") + (" + uncommitted changes" if git_dirty() else ""),
        "baseline": git_rev(args.baseline) if args.baseline else None,
        "pyc": args.pyc,
        "pythondontwritebytecode": os.environ.get("PYTHONDONTWRITEBYTECODE"),
    }
    runs = []
    try:
        for n, r in zip(counts, reps, strict=False):
            print(f"== N={n}, {r} reps", file=sys.stderr, flush=True)
            runs.append(bench_n(root, n, r, args.window, args.status_only, baseline))
            if args.json:  # each N as it ends: a later one that fails keeps the earlier
                Path(args.json).write_text(json.dumps({**meta, "runs": runs}, indent=2))
    finally:
        subprocess.run(["tmux", "kill-server"], capture_output=True)
    meta["load_at_end"] = load1 = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps({**meta, "runs": runs}, indent=2))
    print(f"clusterbench, {meta['date']}, {meta['machine']}, load {load0[0]:.2f} -> {load1[0]:.2f}")
    print(f"tree {meta['tree']}; baseline {meta['baseline']}; pyc {meta['pyc']} "
          f"(PYTHONDONTWRITEBYTECODE={meta['pythondontwritebytecode']})")  # fmt: skip
    print()
    print(table(runs))
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
