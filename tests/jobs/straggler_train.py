"""A synchronous job (gloo, CPU) with one rank that can be made slow, for the straggler
tests and bench/stragglers.py.

Each step "computes" for --work seconds, then all-reduces a gradient-sized tensor, as a
data-parallel step does; the ranks meet in `all_reduce`, so the fast ones wait there for
the slow one. --kind sleep stands in for a GPU's compute (the CPU waits on the device,
which costs this 2-core machine nothing); --kind cpu burns the CPU for real, so a
CPU quota on the node (its sshd's cgroup) slows it. --slow-rank/--slow-factor make one
rank compute that much longer per step; with --slow-after, only from that many seconds
after its first step (a rank turned slow mid-run; it prints "slow from t T" then).
Balanced but uneven work, for the clean runs of bench/stragglers.py: --stall-rank stalls
once for --stall-for seconds at --stall-at (a data loader that stalls once; "stall from
t T"), --chatty-rank prints --chatty-lines more lines a step (a rank that logs more).
Prints "step N rank R t T" (T: the wall clock).
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
    ap.add_argument("--slow-after", type=float, default=0.0)
    ap.add_argument("--stall-rank", type=int, default=-1)
    ap.add_argument("--stall-at", type=float, default=0.0)
    ap.add_argument("--stall-for", type=float, default=0.0)
    ap.add_argument("--chatty-rank", type=int, default=-1)
    ap.add_argument("--chatty-lines", type=int, default=20)
    args = ap.parse_args()

    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    slow = args.slow_factor if rank == args.slow_rank else 1.0
    grad = torch.zeros(4096)
    step = 0
    first = time.time()
    slowed = stalled = False
    while not args.steps or step < args.steps:
        step += 1
        now = time.time()
        work = args.work
        if slow != 1.0 and now - first >= args.slow_after:
            work *= slow
            if not slowed and args.slow_after:
                print(f"slow from t {now:.3f}", flush=True)
            slowed = True
        if rank == args.stall_rank and not stalled and now - first >= args.stall_at:
            print(f"stall from t {now:.3f}", flush=True)
            time.sleep(args.stall_for)
            stalled = True
        if args.kind == "sleep":
            time.sleep(work)
        else:
            burn(work)
        if rank == args.chatty_rank:
            for i in range(args.chatty_lines):
                print(f"rank {rank} metric {i} value {step * i % 997}", flush=True)
        dist.all_reduce(grad)
        print(f"step {step} rank {rank} t {time.time():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
