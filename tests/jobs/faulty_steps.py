"""faulty_train.py's failures without torch, for the tests of the restart chain itself
(backoffs, give-up, a spare swapped in, a supervisor's death, the history and its
ledger): the same flags and the same lines, up in a fraction of a second where torchrun
and its worker take seconds (four torch imports an attempt on 2 cores).

One rank a node, its node rank (--rank): with --port, rank 0 listens on it (the
launch's readiness, as torchrun's store), and every rank prints `step N loss X rank R`
each --interval. The ranks do not all-reduce: a failing rank ends only its own node,
and the watchdog must take the others down. What torchrun itself does with a failure
(its exit code, a peer left in a collective) is what the torchrun tests cover
(test_restart's frozen worker and `not_on`, test_recovery, test_reports, the chaos
campaigns). With no start-up of seconds, a failure at an early step can come before the
watchdog's first poll: a test that needs the steps followed fails later
(test_history_chains).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--interval", type=float, default=0.3)
    ap.add_argument("--timeout", type=float, default=600)  # faulty_train's, unused here
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--fail-rank", type=int, default=-1)
    ap.add_argument("--fail-step", type=int, default=3)
    ap.add_argument("--how", choices=("exit3",), default="exit3")
    ap.add_argument("--fail-attempts", type=int, default=1 << 30)
    ap.add_argument("--fail-if-env", default="", help="fail only where this variable is set")
    args = ap.parse_args()

    rank = args.rank
    if rank == 0 and args.port is not None:
        store = socket.socket()
        store.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        store.bind(("127.0.0.1", args.port))
        store.listen()
    attempt = int(os.environ.get("MNTUI_RESTART_COUNT", "0"))
    failing = rank == args.fail_rank and attempt < args.fail_attempts
    if args.fail_if_env:
        failing = bool(os.environ.get(args.fail_if_env)) and attempt < args.fail_attempts
    print(f"rank {rank} up, attempt {attempt}", flush=True)
    step = 0
    while not args.steps or step < args.steps:
        step += 1
        print(f"step {step} loss {1 / (step + 1):.4f} rank {rank}", flush=True)
        if failing and step == args.fail_step:
            sys.stdout.flush()
            os._exit(3)  # as faulty_train's exit3
        time.sleep(args.interval)
    print(f"rank {rank} done after {step} steps", flush=True)


if __name__ == "__main__":
    main()
