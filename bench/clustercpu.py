"""What a cluster-watched run costs while it runs, read from /proc (clusterbench's window).

The manager is every process that inherited this bench's `XDG_STATE_HOME` (whatever
`mntui` left behind: nothing, since issue 37, which is what it checks) or carries the
job's tag, outside the fake nodes: a fake node's processes carry `MNTUI_FAKE_NODE`, and its sshd
listener and connection processes (which inherited the bench's environment) sit under
the listener's PID. The fake nodes share this machine's /proc, so the sentinels and the
coordinator are read there too, by their own tag.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from fakecluster import FakeCluster, cmdline, environ_of, pids_with_env

TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")
NODE_INTERVAL = 0.5  # watch.node_interval's default: a sentinel's samples


def _stat(pid: int) -> tuple[int, float] | None:
    """(ppid, utime+stime in ms), None when gone."""
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(rest[1]), (int(rest[11]) + int(rest[12])) * TICK_MS


def _under(pid: int, roots: set[int]) -> bool:
    seen = 0
    while pid > 1 and seen < 64:
        if pid in roots:
            return True
        st = _stat(pid)
        if st is None:
            return False
        pid, seen = st[0], seen + 1
    return False


def manager_pids(fc: FakeCluster, job: str, state: Path) -> list[int]:
    mark = f"XDG_STATE_HOME={state}".encode()
    tag = re.compile(f"MNTUI_RUN={re.escape(job)}/.*".encode())
    listeners = {n.proc.pid for n in fc.nodes if n.proc is not None}
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        env = environ_of(int(entry))
        if any(e.startswith(b"MNTUI_FAKE_NODE=") for e in env):
            continue
        if (mark in env or any(tag.fullmatch(e) for e in env)) and not _under(
            int(entry), listeners
        ):
            out.append(int(entry))
    return out


@dataclass(frozen=True)
class Window:
    seconds: float
    manager_procs: int  # distinct local processes seen in the window
    manager_cmdlines: list[str]
    manager_cpu_ms: float
    sentinels: int
    sentinel_ms_per_sample_p50: float
    sentinel_ms_per_sample_p95: float
    sentinel_ms_per_sample_max: float
    coordinator_cpu_pct: float | None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    @staticmethod
    def header() -> str:
        return (
            "| N | window s | manager: processes | manager CPU ms | sentinels "
            "| sentinel ms/sample p50 | p95 | max | coordinator CPU % |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        )

    @staticmethod
    def row(n: object, d: dict[str, object]) -> str:
        coord = d["coordinator_cpu_pct"]
        return (
            f"| {n} | {d['seconds']:.0f} | {d['manager_procs']} | {d['manager_cpu_ms']:.0f} "
            f"| {d['sentinels']} | {d['sentinel_ms_per_sample_p50']:.2f} "
            f"| {d['sentinel_ms_per_sample_p95']:.2f} | {d['sentinel_ms_per_sample_max']:.2f} "
            f"| {'-' if coord is None else f'{coord:.1f}'} |"
        )


def _role(job: str, role: str) -> list[int]:
    return pids_with_env(f"MNTUI_RUN={re.escape(job)}/[^/]+/[^/]+/{role}")


def pct(vals: list[float], q: float) -> float:
    """Nearest rank."""
    s = sorted(vals)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def cpu_window(fc: FakeCluster, job: str, state: Path, seconds: float) -> Window:
    """Samples the manager's processes every second for `seconds` (a short-lived one is
    counted with all its CPU), and the sentinels' and the coordinator's CPU across it."""
    watched = {p: _stat(p) for p in _role(job, "sentinel") + _role(job, "coord")}
    coord = set(_role(job, "coord"))
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    names: dict[int, str] = {}
    t0 = time.monotonic()
    end, opening = t0 + seconds, True
    while True:
        for pid in manager_pids(fc, job, state):
            st = _stat(pid)
            if st is not None:  # one born in the window counts all its CPU
                first.setdefault(pid, st[1] if opening else 0.0)
                last[pid] = st[1]
                names.setdefault(pid, cmdline(pid)[:120])
        if time.monotonic() >= end:
            break
        opening = False
        time.sleep(min(1.0, max(0.0, end - time.monotonic())))
    took = time.monotonic() - t0
    per_sample, coord_ms = [], None
    for pid, before in watched.items():
        after = _stat(pid)
        if before is None or after is None:
            continue
        used = after[1] - before[1]
        if pid in coord:
            coord_ms = used
        else:
            per_sample.append(used / (took / NODE_INTERVAL))
    per_sample = per_sample or [float("nan")]
    return Window(
        seconds=took,
        manager_procs=len(last),
        manager_cmdlines=sorted(set(names.values())),
        manager_cpu_ms=sum(last[p] - first[p] for p in last),
        sentinels=len(per_sample),
        sentinel_ms_per_sample_p50=statistics.median(per_sample),
        sentinel_ms_per_sample_p95=pct(per_sample, 0.95),
        sentinel_ms_per_sample_max=max(per_sample),
        coordinator_cpu_pct=None if coord_ms is None else coord_ms / took / 10,
    )
