"""A synchronous job (gloo, CPU) with one rank that can be made slow, for the straggler
tests and bench/stragglers.py.

Each step "computes" for --work seconds, then all-reduces a gradient-sized tensor, as a
data-parallel step does; the ranks meet in `all_reduce`, so the fast ones wait there for
the slow one. --kind sleep stands in for a GPU's compute (the CPU waits on the device,
which costs this 2-core machine nothing); --kind cpu burns the CPU for real, so a
CPU quota on the node (its sshd's cgroup) slows it. --slow-rank/--slow-factor make one
rank compute that much longer per step. Prints "step N rank R t T" (T: the wall clock).
"""

from __future__ import annotations

import argparse
import time

RATE = 5_000_000  # loop turns per second of an unloaded core, roughly


def burn(seconds: float) -> None:
    """A fixed amount of work, the same on every rank (not calibrated: a rank started
    under a CPU quota must not scale its work down to it)."""
    x = 0
    for i in range(int(seconds * RATE)):
        x += i * i
    del x


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=float, default=0.1)
    ap.add_argument("--kind", choices=("sleep", "cpu"), default="sleep")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-factor", type=float, default=1.0)
    args = ap.parse_args()

    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    work = args.work * (args.slow_factor if rank == args.slow_rank else 1.0)
    grad = torch.zeros(4096)
    step = 0
    while not args.steps or step < args.steps:
        step += 1
        if args.kind == "sleep":
            time.sleep(work)
        else:
            burn(work)
        dist.all_reduce(grad)
        print(f"step {step} rank {rank} t {time.time():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
