"""A training job (gloo, CPU) in which one rank hangs on purpose, for the hang-finding
tests and bench/hangs.py.

Each step loads a batch (`next_batch`), runs the model and all-reduces its loss for
logging, as a real job's metric reduction would; so the ranks waiting for a hung peer
wait inside `all_reduce`. With --hang-rank/--hang-step that rank, at that step, hangs
the way --how says: `sleep` in data loading, `busy` in a Python loop, `lock` on a lock
nobody releases, `barrier` where the others all-reduce (a mismatch). SIGSTOP and a
stopped sshd come from outside (bench/hangs.py).

NCCL dumps its Flight Recorder by itself (when a collective times out, and when a line
is written to its debug-info pipe, TORCH_NCCL_DEBUG_INFO_PIPE_FILE<rank>.pipe); gloo does
neither. So, and only for gloo, this job does what NCCL would: a thread watches the same
pipe and writes `_dump_fr_trace` to TORCH_FR_DUMP_TEMP_FILE<rank>, and a timed-out
collective writes one too. mntui's side (the pipe, the files) is the same for both.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from typing import Any

LOCK = threading.Lock()


def next_batch(step: int, hang: bool) -> int:
    """Data loading: a rank told to hang here never comes back (a stuck reader)."""
    if hang:
        time.sleep(3600)
    return step


def augment(value: float, hang: bool) -> float:
    """A Python loop that never ends (a bug in a transform), the GIL taken in turns."""
    while hang:
        value = value * 1.000001 + 1e-9
    return value


def load_shard(hang: bool) -> None:
    """A lock taken by a helper that never gives it back."""
    if hang:
        threading.Thread(target=LOCK.acquire, daemon=True).start()
        time.sleep(0.2)
    with LOCK:
        pass


def dump_flight_record(reason: str) -> None:
    """What NCCL does by itself: the Flight Recorder's pickle, to TORCH_FR_DUMP_TEMP_FILE
    followed by the rank (written whole, then renamed)."""
    import torch

    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    if not prefix:
        return
    path = f"{prefix}{os.environ.get('RANK', '0')}"
    data = torch._C._distributed_c10d._dump_fr_trace(True, True, False)
    with open(path + ".tmp", "wb") as fh:
        fh.write(data)
    os.replace(path + ".tmp", path)
    print(f"flight recorder dumped ({reason}) to {path}", flush=True)


def watch_pipe() -> None:
    """NCCL's debug-info pipe for gloo: a write to <prefix><rank>.pipe asks for a dump."""
    stem = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    if not stem:
        return
    path = f"{stem}{os.environ.get('RANK', '0')}.pipe"
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.mkfifo(path, 0o600)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    while True:
        time.sleep(0.2)
        try:
            if os.read(fd, 128):
                dump_flight_record("asked on the pipe")
        except BlockingIOError:
            pass


def step_once(model: Any, opt: Any, step: int, args: argparse.Namespace, hang: bool) -> float:
    import torch
    import torch.distributed as dist

    if hang:  # for bench/hangs.py: when the hang began
        print(f"hang: {args.how} at {time.time():.3f}", flush=True)
    batch = next_batch(step, hang and args.how == "sleep")
    load_shard(hang and args.how == "lock")
    x = torch.randn(32, 16) + augment(0.0, hang and args.how == "busy") + batch * 0
    loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True) * 0.1)
    metric = loss.detach().clone()
    if hang and args.how == "barrier":
        dist.barrier()  # the others all-reduce: a mismatch
    else:
        dist.all_reduce(metric)  # a hung peer stops the other ranks here
    opt.zero_grad()
    loss.backward()  # type: ignore[no-untyped-call]
    opt.step()
    return float(metric.item())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--interval", type=float, default=0.3)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--hang-rank", type=int, default=-1)
    ap.add_argument("--hang-step", type=int, default=5)
    ap.add_argument("--how", choices=("sleep", "busy", "lock", "barrier"), default="sleep")
    args = ap.parse_args()

    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    threading.Thread(target=watch_pipe, daemon=True).start()
    print(f"rank {rank} up", flush=True)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    while not args.steps or step < args.steps:
        step += 1
        hang = rank == args.hang_rank and step == args.hang_step
        try:
            loss = step_once(model, opt, step, args, hang)
        except RuntimeError:
            dump_flight_record("a collective timed out")
            raise
        print(f"step {step} loss {loss:.4f} rank {rank}", flush=True)
        time.sleep(args.interval)
    dist.destroy_process_group()
    print(f"rank {rank} done after {step} steps", flush=True)


if __name__ == "__main__":
    main()
