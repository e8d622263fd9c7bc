"""A tiny DDP training job for the demo and the tests: gloo on CPU, a small MLP.

It prints `step N loss X` regularly and runs until killed, or for --seconds /
--steps. Run it under torchrun; it reads RANK/WORLD_SIZE/MASTER_* from the env.
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--seconds", type=float, default=0, help="stop after this long (0: run until killed)"
    )
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between steps")
    ap.add_argument("--timeout", type=float, default=60, help="collective timeout, seconds")
    args = ap.parse_args()

    import datetime

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    print(
        f"rank {rank}/{world} up on {os.uname().nodename} "
        f"NODE_RANK={os.environ.get('NODE_RANK')} MASTER={os.environ.get('MASTER_ADDR')}:"
        f"{os.environ.get('MASTER_PORT')}",
        flush=True,
    )
    torch.manual_seed(0)
    model = DDP(
        torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(rank)
    t0, step = time.monotonic(), 0
    while True:
        x = torch.randn(64, 32, generator=gen)
        y = x.sum(dim=1, keepdim=True) * 0.1
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]  # the all-reduce: a frozen peer stops every rank here
        opt.step()
        step += 1
        print(f"step {step} loss {loss.item():.4f} rank {rank}", flush=True)
        if (args.steps and step >= args.steps) or (
            args.seconds and time.monotonic() - t0 >= args.seconds
        ):
            break
        time.sleep(args.interval)
    dist.destroy_process_group()
    print(f"rank {rank} done after {step} steps", flush=True)


if __name__ == "__main__":
    main()
