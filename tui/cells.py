"""One node's numbers as short text cells, for every view that shows them.

`mntui status` (plain text over a bare SSH session) and the app's panes and table show
the same GPU, memory, load, age and round-trip numbers; formatted here once, so the
views cannot drift apart. Pure and free of Textual and rich: views.py imports it.
"""

from __future__ import annotations

from mntui.sessions.poll import GpuReading, NodeProgress, NodeSnapshot, NodeState


def age(seconds: float | None) -> str:
    """Seconds since the node last printed: `12s`, `3m`, `1.5h`; `-` when unknown."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def rtt(s: NodeSnapshot) -> str:
    return "-" if s.rtt is None else f"{s.rtt * 1000:.0f}ms"


def gpu_util(reading: GpuReading) -> str:
    """`8x 97%`: how many GPUs and their mean utilization (`?%` when none reports it)."""
    utils = [g.util for g in reading.gpus if g.util is not None]
    mean = f"{sum(utils) / len(utils):.0f}%" if utils else "?%"
    return f"{len(reading.gpus)}x {mean}"


def gpu_mem(reading: GpuReading) -> str:
    """`312/640G`: memory used and total over the node's GPUs."""
    used = sum(g.mem_used or 0 for g in reading.gpus) / 1024
    total = sum(g.mem_total or 0 for g in reading.gpus) / 1024
    return f"{used:.0f}/{total:.0f}G"


def load(s: NodeSnapshot, digits: int = 1) -> str:
    """`load 7.9/96`: the 1-minute load average over the CPU count."""
    if not s.load:
        return "load ?"
    return f"load {s.load[0]:.{digits}f}" + (f"/{s.ncpu}" if s.ncpu else "")


def host_mem(s: NodeSnapshot) -> str | None:
    """`mem 12.3/503G`: host memory in use; None when the node did not say."""
    if not s.mem_total_mib or s.mem_available_mib is None:
        return None
    used = (s.mem_total_mib - s.mem_available_mib) / 1024
    return f"mem {used:.1f}/{s.mem_total_mib / 1024:.0f}G"


def gpu_summary(s: NodeSnapshot) -> str:
    """The one GPU cell of `mntui status`: count, utilization, memory, trouble."""
    if not s.reachable:
        return "-"
    if s.gpu is None:
        mem = host_mem(s)
        return f"no GPU: {load(s)}" + (f" {mem}" if mem else "")
    return gpu_cell(s.gpu)


def gpu_cell(reading: GpuReading) -> str:
    """`8x 97% 312/640G +ERR 1 foreign`: a node's GPUs, however they were read (a poll,
    or its sentinel for a run the cluster watches)."""
    if not reading.gpus:
        return "GPU ERROR: " + "; ".join(reading.errors)[:60]
    cell = f"{gpu_util(reading)} {gpu_mem(reading)}"
    if reading.errors:
        cell += " +ERR"
    if reading.foreign_apps:
        cell += f" {len(reading.foreign_apps)} foreign"
    return cell


def table_cells(s: NodeSnapshot | None) -> tuple[str, str, str, str]:
    """(GPUs, memory, output age, rtt) for the app's table row."""
    if s is None or not s.reachable:
        return ("-", "-", "-", "-")
    if s.gpu is not None and s.gpu.gpus:
        util, mem = gpu_util(s.gpu), gpu_mem(s.gpu)
    elif s.gpu is not None:
        util, mem = "GPU ERROR", "-"
    else:
        util, mem = "no GPU", load(s)
    return (util, mem, age(s.output_age), rtt(s))


def step(p: NodeProgress | None, state: NodeState | None = None) -> str:
    """`4812 @2.1/s`: the last training step seen, and the rate once there are two. The
    rate only while the node's processes may still step (`state` None: not known yet):
    an ended or unreachable node's rate is no rate, just the window emptying slowly."""
    if p is None or p.step is None:
        return "-"
    moving = state is None or state.is_active
    return f"{p.step}" + (f" @{p.rate:.2g}/s" if p.rate and moving else "")
