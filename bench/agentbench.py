"""Benchmarks of the run's agent (issue 13), kept apart from bench.py's own rows.

    .venv/bin/python bench/bench.py --cold 8,32 --cold-reps 5   # cold commands
    .venv/bin/python bench/bench.py --faults 10                 # fault -> whole job down

Cold rows: a fresh `mntui status --json`, `kill`, `logs -n 5` process with the run's
agent (its watchdog polling meanwhile) and without one (`launch --no-watch`: the
direct path), against the cold floor (a fresh Python process that opens N paramiko
connections and runs `true`) and pdsh, interleaved, per repetition. Fault rows: a real 2-node torchrun job (gloo, CPU)
with its watchdog; the time from the fault to the last tagged process gone.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchlib import job_config, pdsh
from fakecluster import (
    FakeCluster,
    alive,
    cmdline,
    free_port,
    pids_with_env,
    process_tree,
    wait_for,
)

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "mntui.tui.cli"]
STATUS_CMD = "tmux ls 2>/dev/null; cat /proc/loadavg; ss -Hltn | wc -l"

FLOOR = """
import sys, threading, paramiko
host, user, key, ports = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def one(port):
    c = paramiko.SSHClient()
    c.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    c.connect(host, int(port), user, key_filename=key, look_for_keys=False, allow_agent=False)
    _, out, _ = c.exec_command("true")
    out.channel.recv_exit_status()
    c.close()
ts = [threading.Thread(target=one, args=(p,)) for p in ports]
[t.start() for t in ts]
[t.join() for t in ts]
"""


def _mntui(cfg: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        [*CLI, "-c", str(cfg), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    if check and res.returncode != 0:
        raise RuntimeError(f"mntui {' '.join(args)}: {res.stderr[-800:]}")
    return res


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _launch_with_agent(cfg: Path, job: str) -> None:
    _mntui(cfg, "launch", "--no-ui")
    wait_for(lambda: _via(cfg) == "agent", 60, interval=0.2, what="the agent")


def _via(cfg: Path) -> str:
    res = _mntui(cfg, "status", "--json", check=False)
    m = re.search(r'"via": "(\w+)"', res.stdout)
    return m[1] if m else ""


def cold_n(root: Path, n: int, reps: int) -> dict[str, list[float]]:
    fc = FakeCluster(root / f"cold{n}", n).start()
    job = f"cold{n}"
    cfg = root / f"{job}.yaml"
    cfg.write_text(job_config(fc, n, job))
    out: dict[str, list[float]] = {}

    def add(name: str, fn: Callable[[], object]) -> None:
        out.setdefault(name, []).append(_timed(fn))

    ports = [str(node.port) for node in fc.nodes]
    floor = [sys.executable, "-c", FLOOR, "127.0.0.1", fc.user, str(fc.key), *ports]
    try:
        for _ in range(reps):
            # With the agent: its watchdog polls the N nodes every second meanwhile.
            _launch_with_agent(cfg, job)
            add("`mntui status --json`, agent", lambda: _mntui(cfg, "status", "--json"))
            add("`mntui logs -n 5`, agent", lambda: _mntui(cfg, "logs", "-n", "5"))
            add("`mntui kill`, agent", lambda: _mntui(cfg, "kill"))
            # Without: no watchdog runs (as with `launch --no-watch`), nothing polls.
            _mntui(cfg, "launch", "--no-ui", "--no-watch")
            add("cold floor: fresh process, N paramiko connections + `true`",
                lambda: subprocess.run(floor, check=True))  # fmt: skip
            add("`mntui status --json`, no agent", lambda: _mntui(cfg, "status", "--json"))
            add("`mntui logs -n 5`, no agent", lambda: _mntui(cfg, "logs", "-n", "5"))
            add("pdsh -R ssh: status command", lambda: pdsh(fc, n, STATUS_CMD))
            add("`mntui kill`, no agent", lambda: _mntui(cfg, "kill"))
    finally:
        subprocess.run(["tmux", "kill-server"], capture_output=True)
        fc.stop()
    return out


# -- faults -> whole job down -------------------------------------------------------

FAULTY = REPO / "tests" / "jobs" / "faulty_train.py"


def _torch_cfg(fc: FakeCluster, root: Path, job: str, args: str, watch: str) -> Path:
    work = root / "work"
    work.mkdir(exist_ok=True)
    shutil.copy(FAULTY, work / "train.py")
    port = free_port()
    path = root / f"{job}.yaml"
    path.write_text(f"""job: {job}
nodes: [node0, node1]
workdir: {work}
master_port: {port}
env: {{OMP_NUM_THREADS: "1"}}
command: >-
  exec python3 -m torch.distributed.run --nnodes=2 --node_rank={{node_rank}}
  --nproc_per_node=1 --master_addr={{master_addr}} --master_port={{master_port}}
  train.py --interval 0.3 --timeout 600 {args}
launch: {{ready_timeout: 90}}
kill: {{grace: 3}}
watch: {{where: here, {watch}}}
ssh: {{config: {fc.ssh_config}, connect_timeout: 5}}
""")
    return path


def _tagged(job: str, node: str = "[^/]+") -> list[int]:
    return alive(pids_with_env(f"MNTUI_RUN={re.escape(job)}/[^/]+/{node}"))


def _worker(job: str, node: str) -> int | None:
    procs = [p for p in _tagged(job, node) if "train.py" in cmdline(p)]
    workers = [p for p in procs if "torch.distributed.run" not in cmdline(p)]
    return workers[0] if workers else None


def _launcher(job: str, node: str) -> int | None:
    return next((p for p in _tagged(job, node) if "torch.distributed.run" in cmdline(p)), None)


def _sshd(fc: FakeCluster, node: str) -> list[int]:
    """The node's sshd and everything under it (its connections' sshd and shells)."""
    proc = fc.node(node).proc
    assert proc is not None
    return process_tree(proc.pid)


def _signal(pids: list[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def _decided(job: str) -> bool:
    """The job's watchdog has decided: its teardown line is in the run's watch.log."""
    state = Path(os.environ["XDG_STATE_HOME"]) / "mntui" / job
    for log in state.glob("*/watch.log"):
        try:
            if "tearing the job down" in log.read_text(errors="replace"):
                return True
        except OSError:
            continue
    return False


def one_fault(fc: FakeCluster, root: Path, kind: str, i: int) -> tuple[float, float | None]:
    """Launch, wait for training, inject `kind`, time until the job is down; also when
    the watchdog decided (None: the job ended before it did)."""
    job = f"f{kind[:4]}{i}"
    args = "--fail-rank 1 --fail-step 4 --how exit3" if kind == "rank-exit" else ""
    watch = "unreachable_after: 3" if kind == "unreachable" else ""
    cfg = _torch_cfg(fc, root, job, args, watch)
    _mntui(cfg, "launch", "--no-ui")
    wait_for(lambda: "step 1 " in fc.node("node1").log(job), 120, what="training")
    node0_only = kind == "unreachable"  # node1's processes cannot be killed while it is cut off
    stopped: list[int] = []
    if kind == "launcher":
        pid = _launcher(job, "node1")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
    elif kind == "frozen":
        pid = wait_for(lambda: _worker(job, "node1"), 10, what="worker")  # type: ignore[assignment]
        os.kill(pid, signal.SIGSTOP)
    elif kind == "unreachable":
        stopped = _sshd(fc, "node1")
        _signal(stopped, signal.SIGSTOP)
    elif kind == "rank-exit":
        pid = wait_for(lambda: _worker(job, "node1"), 10, what="worker")  # type: ignore[assignment]
        wait_for(lambda: pid not in alive([pid]), 60, interval=0.01, what="the rank's exit")
    t0 = time.perf_counter()
    decided: list[float] = []

    def down() -> bool:
        if not decided and _decided(job):
            decided.append(time.perf_counter() - t0)
        return not _tagged(job, "node0") and (node0_only or not _tagged(job, "node1"))

    try:
        wait_for(down, 120, interval=0.02, what=f"{kind}: job down")
        # The line is written before the kill starts; none: the job ended by itself.
        return time.perf_counter() - t0, decided[0] if decided else None
    finally:
        _signal(stopped, signal.SIGCONT)
        _mntui(cfg, "kill", check=False)
        subprocess.run(["tmux", "kill-server"], capture_output=True)


def faults(
    root: Path, reps: int, kinds: list[str]
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(fault -> job down, fault -> the watchdog's decision), per kind, in seconds."""
    fc = FakeCluster(root / "faults", 2).start()
    out: dict[str, list[float]] = {k: [] for k in kinds}
    decided: dict[str, list[float]] = {k: [] for k in kinds}
    try:
        for i in range(reps):
            for kind in kinds:  # interleaved
                took, when = one_fault(fc, root, kind, i)
                out[kind].append(took)
                if when is not None:
                    decided[kind].append(when)
                said = f", decided {when:.2f}s" if when is not None else ", no teardown"
                print(f"  {kind} #{i}: {took:.2f}s{said}", file=sys.stderr, flush=True)
    finally:
        fc.stop()
    return out, decided


def pct(vals: list[float], q: float) -> float:
    """Nearest-rank percentile (p95 of 10 values is the largest)."""
    s = sorted(vals)
    return s[min(len(s) - 1, max(0, int(-(-q * len(s) // 1)) - 1))]


def table(
    cold: dict[int, dict[str, list[float]]],
    fault: dict[str, list[float]],
    decided: dict[str, list[float]] | None = None,
) -> str:
    lines = ["| N | measurement | median ms | min-max ms | vs cold floor | vs pdsh |",
             "|---|---|---:|---:|---:|---:|"]  # fmt: skip
    for n, rows in cold.items():
        floor = statistics.median(
            rows["cold floor: fresh process, N paramiko connections + `true`"]
        )
        pd = statistics.median(rows["pdsh -R ssh: status command"])
        for name, vals in rows.items():
            med = statistics.median(vals)
            lines.append(
                f"| {n} | {name} | {med * 1000:.0f} | {min(vals) * 1000:.0f}-{max(vals) * 1000:.0f}"
                f" | {med / floor:.2f}x | {pd / med:.1f}x faster |"
            )
    if fault:
        lines += ["", "| fault (2 nodes, torchrun) | n | p50 s | p95 s | min-max s "
                  "| decided: p50 s | p95 s | min-max s |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for kind, vals in fault.items():
            d = (decided or {}).get(kind) or []
            when = (
                f"{pct(d, 0.5):.2f} | {pct(d, 0.95):.2f} | {min(d):.2f}-{max(d):.2f}"
                if d
                else "- | - | -"
            )
            lines.append(
                f"| {kind} | {len(vals)} | {pct(vals, 0.5):.2f} | {pct(vals, 0.95):.2f} "
                f"| {min(vals):.2f}-{max(vals):.2f} | {when} |"
            )
    return "\n".join(lines)
