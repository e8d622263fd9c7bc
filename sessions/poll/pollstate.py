"""What one node's answer means given the polls before it: the state between polls.

A poll's answer alone is not a snapshot: CPU rates need the ticks of the previous
poll, the log is read from the offset the previous poll reached, command lines are
sent once per PID, and the output's age comes from the node's clock on the first poll
and then from our own sightings of the log's size. PollState holds that memory for one
node; `apply_answer` turns a PollAnswer into a frozen NodeSnapshot and updates it. No
IO here: the Poller does the asking, and unit tests feed recorded answers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from mntui.sessions.runs import NodeRecord

from . import gpu as gpumod
from .pollscript import PollAnswer, parse_answer
from .snapshot import JobProc, NodeSnapshot


@dataclass
class PollState:
    offset: int = 0
    cmdlines: dict[int, str] = field(default_factory=dict)
    ticks: dict[int, tuple[float, int]] = field(default_factory=dict)  # pid -> (node uptime, ticks)
    clk_tck: int = 100
    page: int = 4096
    ncpu: int | None = None
    first: bool = True
    polls: int = 0
    pane_pid: int | None = None
    ports: tuple[int, ...] = ()
    listeners: tuple[tuple[int, int], ...] = ()  # (port, pid) of the last port scan
    size: int | None = None
    changed_at: float | None = None  # local time output.log last grew
    keep: int = 0  # with offset -1: start this many bytes before the end


def _update_procs(a: PollAnswer, st: PollState) -> tuple[JobProc, ...]:
    """The job's processes with CPU rates from the ticks of the previous poll."""
    if a.sysconf is not None:
        st.clk_tck, st.page, ncpu = a.sysconf
        st.ncpu, st.first = ncpu, False
    st.cmdlines.update(a.cmdlines)
    now = a.uptime or 0.0  # node uptime: a monotonic clock for CPU rates
    procs = []
    seen: dict[int, tuple[float, int]] = {}
    for s in a.stats:
        prev = st.ticks.get(s.pid)
        cpu = (
            100.0 * (s.ticks - prev[1]) / max(st.clk_tck, 1) / (now - prev[0])
            if prev and now > prev[0]
            else None
        )
        seen[s.pid] = (now, s.ticks)
        rss = s.rss_pages * st.page / 2**20
        procs.append(JobProc(s.pid, s.ppid, s.state, cpu, rss, st.cmdlines.get(s.pid, "")))
    st.ticks = seen
    st.cmdlines = {p: c for p, c in st.cmdlines.items() if p in seen}
    # Ports are scanned every few polls; a process gone since takes its ports along now,
    # or a dead job's pane listed its ports next to 0 processes (issue 29).
    if a.listeners is not None:
        st.listeners = a.listeners
    live = {p.pid for p in procs if p.state not in ("Z", "X")}
    st.ports = tuple(sorted({port for port, pid in st.listeners if pid in live}))
    st.pane_pid = a.pane.pid if a.pane is not None and not a.pane.dead else None
    return tuple(procs)


def _update_log(a: PollAnswer, st: PollState) -> float | None:
    """Advance the log offset; the output's age, from the node's clock on the first
    poll, then from our own observations of the size."""
    if a.log_size is not None and a.log_size < st.offset:  # truncated or replaced
        st.offset = 0
    st.offset += len(a.log)
    local = time.time()
    if a.node_now is not None and a.log_mtime is not None:
        st.changed_at = local - max(0.0, a.node_now - a.log_mtime)
    elif a.log_size is not None and a.log_size != st.size:
        st.changed_at = local
    st.size = a.log_size
    return (local - st.changed_at) if st.changed_at is not None else None


def apply_answer(
    rec: NodeRecord, a: PollAnswer, st: PollState, rtt: float, gpus: bool = True
) -> NodeSnapshot:
    """The state update: what this answer means given what earlier polls left in `st`."""
    procs = _update_procs(a, st)
    reading = None
    if gpus and a.nvidia_smi:
        pids = frozenset(p.pid for p in procs)
        reading = gpumod.parse_reading(a.gpu_text, a.apps_text, pids)
    return NodeSnapshot(
        node=rec.node,
        rank=rec.rank,
        at=time.time(),
        reachable=True,
        rtt=rtt,
        session=a.pane is not None,
        pane_dead=a.pane.dead if a.pane is not None else None,
        pane_pid=a.pane.pid if a.pane is not None else None,
        exit_code=a.exit_code,
        procs=procs,
        ports=st.ports,
        gpu=reading,
        load=a.load,
        ncpu=st.ncpu,
        mem_total_mib=a.mem_kib["MemTotal"] / 1024 if "MemTotal" in a.mem_kib else None,
        mem_available_mib=(
            a.mem_kib["MemAvailable"] / 1024 if "MemAvailable" in a.mem_kib else None
        ),
        log_size=a.log_size,
        output_age=_update_log(a, st),
        new_output=a.log,
        node_time=a.node_now,
        malformed=a.malformed,
    )


def parse_poll(
    rec: NodeRecord, out: str, st: PollState, rtt: float, gpus: bool = True
) -> NodeSnapshot:
    return apply_answer(rec, parse_answer(out), st, rtt, gpus)
