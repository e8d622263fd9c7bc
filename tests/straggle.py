"""Slow nodes for real, and one straggler run, for tests/integration/test_stragglers.py and
bench/stragglers.py.

`cpu_quota`: a fake node's sshd moved into a cgroup v1 `cpu` child with a CFS quota, so
everything it starts afterwards (the node's tmux server, the job's ranks) inherits the
quota: a node slow for real, not by a flag of our own job. The cgroup is ours (created
here under a unique name) and removed after, its processes moved back to the parent
first. `run_once`: a straggler_train.py job on the given nodes, launched with the
cluster's watch (each sentinel samples its ranks with py-spy, the coordinator names the
suspect: node/coord/slowness.py), read from the coordinator's files on the main until it
names a suspect or `seconds` run out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakecluster import FakeCluster, free_port, wait_for

from mntui.sessions.report import Finding, Suspect, finding_of
from mntui.sessions.runs import latest

CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
JOB_SCRIPT = Path(__file__).resolve().parent / "jobs" / "straggler_train.py"


def can_throttle() -> bool:
    return (CPU_CGROUP / "cpu.cfs_quota_us").exists() and os.access(CPU_CGROUP, os.W_OK)


@contextmanager
def cpu_quota(
    pid: int | None, fraction: float | None, name: str, shares: int | None = None
) -> Iterator[Path]:
    """`pid` (an sshd) and its future children limited to `fraction` of one CPU (None: no
    limit); with `shares`, weighted so against the host's other processes (the default
    is 1024 each): a node given its CPU first, as on an idle machine, while the suite's
    other tests load the 2 cores. `pid` None: nobody yet (`move_into` later: a node
    turned slow mid-run)."""
    group = CPU_CGROUP / f"mntui-test-{name}-{os.getpid()}"
    group.mkdir()
    try:
        period = 100_000
        if fraction is not None:
            (group / "cpu.cfs_period_us").write_text(str(period))
            (group / "cpu.cfs_quota_us").write_text(str(int(period * fraction)))
        if shares is not None:
            (group / "cpu.shares").write_text(str(shares))
        if pid is not None:
            (group / "cgroup.procs").write_text(str(pid))
        yield group
    finally:
        for line in (group / "cgroup.procs").read_text().split():
            try:
                (CPU_CGROUP / "cgroup.procs").write_text(line)
            except OSError:
                pass  # it ended meanwhile
        wait_for(lambda: not (group / "cgroup.procs").read_text().split(), 10, what="cgroup empty")
        group.rmdir()


def move_into(group: Path, pids: list[int]) -> int:
    """Each of `pids` (and so all its threads) into `group`; those that ended meanwhile
    are skipped. Returns how many moved."""
    moved = 0
    for pid in pids:
        try:
            (group / "cgroup.procs").write_text(str(pid))
            moved += 1
        except OSError:
            pass  # it ended meanwhile
    return moved


def job_yaml(
    job: str, nodes: list[str], port: int, work_dir: Path, args: str, watch: str, extra: str = ""
) -> str:
    """Watched by the cluster (`where: cluster` unless `watch` says where: a notify
    command would take `auto` elsewhere until issue 37's ports land)."""
    where = "" if "where:" in watch else "where: cluster, "
    return f"""
    job: {job}
    nodes: [{", ".join(nodes)}]
    workdir: {work_dir}
    master_port: {port}
    env: {{OMP_NUM_THREADS: "1"}}
    command: >-
      exec python3 -m torch.distributed.run --nnodes={{nnodes}} --node_rank={{node_rank}}
      --nproc_per_node={{nproc_per_node}} --master_addr={{master_addr}} --master_port={{master_port}}
      straggler_train.py {args}
    launch: {{ready_timeout: 90}}
    kill: {{grace: 2}}
    watch: {{{where}{watch}}}
    {extra}
    """


@dataclass
class Run:
    suspect: Suspect | None = None
    named_after: float | None = None  # seconds from the launch's return
    finding: Finding | None = None
    notices: list[str] | None = None  # the coordinator's journal: each straggler it named
    decision: dict[str, Any] | None = None  # its teardown (`on_slow: kill_all`), if any
    steps: dict[str, list[float]] | None = None  # node -> its rank 0's step times


def step_times(log: str) -> list[float]:
    out = []
    for line in log.splitlines():
        parts = line.split()
        if len(parts) == 6 and parts[0] == "step" and parts[4] == "t":
            try:
                out.append(float(parts[5]))
            except ValueError:
                pass
    return out


def run_once(fake: FakeCluster, path: Path, job: str, seconds: float, stop_early: bool) -> Run:
    """Launch with the cluster's watch, read its coordinator's straggler.json and
    journal on the main for `seconds` (or until a second after it names a suspect, when
    `stop_early`, or it tears the job down), then kill the job."""
    res = subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "launch", "--no-ui"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "watched by the cluster" in res.stdout, res.stdout
    record = latest(job)
    assert record is not None
    coord = fake.node(record.main.node).run_dirs(job)[-1] / "coord"
    run = Run(notices=[])
    t0 = time.monotonic()
    while True:
        _read(coord, run, t0)
        named = run.named_after is not None and time.monotonic() - t0 > run.named_after + 1
        if time.monotonic() - t0 > seconds or run.decision is not None or (stop_early and named):
            break
        time.sleep(0.2)
    names = {n.node for n in record.nodes}
    run.steps = {n.name: step_times(n.log(job)) for n in fake.nodes if n.name in names}
    subprocess.run(
        [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "kill"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return run


def _read(coord: Path, run: Run, t0: float) -> None:
    """What the coordinator wrote so far (node/coord/slowness.py: straggler.json, the journal's
    `straggler` lines; decision.json at a teardown); a file being replaced is read at
    the next look."""
    data = _json(coord / "straggler.json")
    if isinstance(data, dict):
        run.finding = finding_of(data.get("finding")) or run.finding
    if run.finding is not None and run.finding.suspect is not None and run.suspect is None:
        run.suspect, run.named_after = run.finding.suspect, time.monotonic() - t0
    decision = _json(coord / "decision.json")
    run.decision = decision if isinstance(decision, dict) else None
    try:
        lines = (coord / "journal.jsonl").read_text().splitlines()
    except OSError:
        lines = []
    run.notices = []
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue  # a line being written
        if isinstance(e, dict) and e.get("kind") == "straggler":
            run.notices.append(f"straggler: {e['data'].get('line')}")


def _json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def sshd_pid(fake: FakeCluster, node: str) -> int:
    proc = fake.node(node).proc
    assert proc is not None
    return proc.pid


def doctor_pairs(
    fake: FakeCluster, path: Path, quota: float | None, slow: str = "node2"
) -> subprocess.CompletedProcess[str]:
    """`mntui doctor --pairs` over the fake cluster's first 4 nodes, `slow` at `quota` of
    a CPU (None: none slowed); the config is written to `path`."""
    path.write_text(
        textwrap.dedent(f"""
        job: pairs
        nodes: [node0, node1, node2, node3]
        master_port: {free_port()}
        command: "true"
        ssh: {{config: {fake.ssh_config}, connect_timeout: 5}}
        """)
    )
    argv = [sys.executable, "-m", "mntui.tui.cli", "-c", str(path), "doctor", "--pairs"]
    if quota is None:
        return subprocess.run(argv, capture_output=True, text=True, timeout=600)
    with cpu_quota(sshd_pid(fake, slow), quota, "pairs"):
        return subprocess.run(argv, capture_output=True, text=True, timeout=600)
