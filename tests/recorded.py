"""Node snapshots built from recorded real nvidia-smi output, for app snapshots and scale runs.

Everything here is deterministic (fixed times, PIDs, log lines), so screenshots compare.
"""

from __future__ import annotations

from pathlib import Path

from mntui.sessions.poll.gpu import parse_reading
from mntui.sessions.poll.snapshot import JobProc, NodeSnapshot

SMI = Path(__file__).resolve().parent / "data" / "nvidia-smi"
H100X8 = (SMI / "h100x8.gpu.csv").read_text()
APPS = "pid, gpu_uuid, used_gpu_memory [MiB], process_name\n"


def h100_node(
    name: str,
    rank: int,
    *,
    step: int = 1200,
    foreign: bool = False,
    frozen: bool = False,
    reachable: bool = True,
) -> tuple[NodeSnapshot, bytes]:
    if not reachable:
        return NodeSnapshot(
            name, rank, at=0.0, reachable=False, error="cannot connect: timed out"
        ), b""
    procs = (
        JobProc(100, 1, "S", 0.1, 4.0, "bash ./launch.sh"),
        JobProc(101, 100, "S", 2.0, 900.0, "python -m torch.distributed.run ..."),
        *(
            JobProc(110 + i, 101, "T" if frozen else "R", 99.0, 30000.0, "python train.py")
            for i in range(8)
        ),
    )
    apps = APPS + ("4242, , 2048 MiB, /usr/bin/python3 someone_elses.py\n" if foreign else "")
    reading = parse_reading(H100X8, apps, frozenset(p.pid for p in procs))
    log = "".join(
        f"step {step + i} loss {2.0 / (step + i):.4f} lr 3.0e-04 tok/s 181234\n" for i in range(12)
    )
    snap = NodeSnapshot(
        name,
        rank,
        at=0.0,
        reachable=True,
        rtt=0.004,
        session=True,
        pane_dead=False,
        pane_pid=100,
        procs=procs,
        ports=(29500,) if rank == 0 else (),
        gpu=reading,
        load=(8.1, 8.0, 7.9),
        ncpu=96,
        mem_total_mib=2_000_000,
        mem_available_mib=1_500_000,
        log_size=100_000,
        output_age=0.5,
        new_output=log.encode(),
    )
    return snap, log.encode()
