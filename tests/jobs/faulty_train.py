"""A DDP job (gloo, CPU) that breaks on purpose, for the failure-report and restart tests.

Each step all-reduces the loss for logging before the backward pass, so a rank whose
peer froze waits inside `all_reduce`, as a real job's metric reduction would. With
--fail-rank/--fail-step it breaks the way --how says, on the attempts before
--fail-attempts (read from MNTUI_RESTART_COUNT; default: every attempt); with
--fail-if-env, every rank of a node where that variable is set breaks instead.
With --rename it names itself at start (setproctitle, as many training stacks do: its
environment, mntui's tag included, is written over); with --helper it starts a helper
with a clean environment (`env -i`) in a session of its own, which names itself too.
Each writes its pid into the run dir (rank-RANK.pid, helper-RANK.pid): nothing of them
carries a tag to find them by.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

HELPER = """import os, setproctitle, sys, time
setproctitle.setproctitle("data-server")
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(3600)
"""


def hide(rename: bool, helper: bool) -> None:
    """--rename and --helper, before anything else: the rank's pid said first."""
    rank, where = os.environ.get("RANK", "0"), os.environ.get("MNTUI_RUN_DIR", ".")
    with open(f"{where}/rank-{rank}.pid", "w") as f:
        f.write(str(os.getpid()))
    if helper:
        argv = ["env", "-i", sys.executable, "-c", HELPER, f"{where}/helper-{rank}.pid"]
        quiet = subprocess.DEVNULL
        subprocess.Popen(argv, start_new_session=True, stdin=quiet, stdout=quiet, stderr=quiet)
    if rename:
        import setproctitle

        setproctitle.setproctitle(f"trainer rank {rank}")


def fail(how: str) -> None:
    if how == "oom":
        raise RuntimeError(
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "79.15 GiB of which 1.25 GiB is free. Including non-PyTorch memory, this process "
            "has 77.89 GiB memory in use."
        )
    if how == "exit3":
        # Not sys.exit(3): with gloo's threads still alive the interpreter's shutdown now and
        # then aborts (SIGABRT, "Fatal Python error: Aborted"), and the exit code becomes -6.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(3)
    if how == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if how == "hang":
        time.sleep(3600)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--interval", type=float, default=0.3)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--fail-rank", type=int, default=-1)
    ap.add_argument("--fail-step", type=int, default=3)
    ap.add_argument("--how", choices=("oom", "exit3", "segv", "hang"), default="oom")
    ap.add_argument("--fail-attempts", type=int, default=1 << 30)
    ap.add_argument("--fail-if-env", default="", help="fail only where this variable is set")
    ap.add_argument("--rename", action="store_true", help="setproctitle at start")
    ap.add_argument("--helper", action="store_true", help="an `env -i` helper, renamed")
    args = ap.parse_args()
    if args.rename or args.helper:
        hide(args.rename, args.helper)

    import datetime

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    attempt = int(os.environ.get("MNTUI_RESTART_COUNT", "0"))
    failing = rank == args.fail_rank and attempt < args.fail_attempts
    if args.fail_if_env:
        failing = bool(os.environ.get(args.fail_if_env)) and attempt < args.fail_attempts
    print(f"rank {rank} up, attempt {attempt}", flush=True)
    model = DDP(
        torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    while not args.steps or step < args.steps:
        step += 1
        x = torch.randn(32, 16)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True) * 0.1)
        metric = loss.detach().clone()
        dist.all_reduce(metric)  # a frozen peer stops the other ranks here
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        print(f"step {step} loss {metric.item():.4f} rank {rank}", flush=True)
        if failing and step == args.fail_step:
            fail(args.how)
        time.sleep(args.interval)
    dist.destroy_process_group()
    print(f"rank {rank} done after {step} steps", flush=True)


if __name__ == "__main__":
    main()
