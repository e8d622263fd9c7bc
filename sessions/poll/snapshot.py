"""What one poll saw on one node, frozen, and the forms it travels in.

A NodeSnapshot is what every consumer of polling reads (states, reports, the CLI and
the app, and the cluster's board read back as one: watch/nodeseen.py); `status` of a
run the cluster watches reads snapshots without polling, so this module needs none of
the poll's machinery, and none of the ssh wing. Its JSON form is for people (`status
--json`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from . import gpu as gpumod


@dataclass(frozen=True)
class JobProc:
    pid: int
    ppid: int
    state: str  # R S D T t Z ...
    cpu_percent: float | None  # None on the first sight of a PID
    rss_mib: float
    cmdline: str


@dataclass(frozen=True)
class NodeSnapshot:
    node: str
    rank: int
    at: float  # local wall time the answer arrived
    reachable: bool
    error: str | None = None
    rtt: float | None = None  # seconds for this poll's round trip
    session: bool | None = None  # the node's tmux session exists
    pane_dead: bool | None = None
    pane_pid: int | None = None
    exit_code: int | None = None  # written by launch.sh when the command ended
    procs: tuple[JobProc, ...] = ()
    ports: tuple[int, ...] = ()  # ports the job's processes listen on
    gpu: gpumod.GpuReading | None = None  # None: no nvidia-smi on the node
    load: tuple[float, float, float] | None = None
    ncpu: int | None = None
    mem_total_mib: float | None = None
    mem_available_mib: float | None = None
    log_size: int | None = None
    output_age: float | None = None  # seconds since output.log last grew (node clock)
    new_output: bytes = b""  # bytes of output.log since the previous poll
    node_time: float | None = None  # the node's wall clock, first poll only
    malformed: int = 0  # lines of the node's answer that were no record of ours: skipped

    @property
    def live_procs(self) -> tuple[JobProc, ...]:
        return tuple(p for p in self.procs if p.state not in ("Z", "X"))


def snapshot_dict(
    s: NodeSnapshot, state: str | None = None, why: str | None = None
) -> dict[str, object]:
    """The JSON form of a snapshot (`mntui status --json`): bytes as text, None as null."""
    d: dict[str, object] = _plain(s)
    d["new_output"] = s.new_output.decode(errors="replace")
    if state is not None:
        d["state"], d["why"] = state, why
    return d


_FIELDS: dict[type, tuple[str, ...]] = {}  # a dataclass's field names; () for any other
_ATOMS = frozenset({str, int, float, bool, type(None), bytes})


def _plain(v: Any) -> Any:
    """dataclasses.asdict's form (dataclasses as dicts in field order, tuples kept as
    tuples) without its deep copy of every value: a snapshot's fields are frozen and
    plain, and asdict was most of a 128-node `status --json`'s rows (~5 ms of CPU).
    Plain values first, and what a type is remembered, dataclass or not: most values
    are numbers and strings, and is_dataclass on each was half of what remained."""
    cls = type(v)
    if cls in _ATOMS:
        return v
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in fields(cls)) if is_dataclass(cls) else ()
    if names:
        return {n: _plain(getattr(v, n)) for n in names}
    if cls is tuple or cls is list:
        return cls(_plain(x) for x in v)
    if cls is dict:
        return {k: _plain(x) for k, x in v.items()}
    return v
