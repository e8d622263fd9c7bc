"""The `mntui doctor --allreduce` smoke job: one checked all_reduce, then latency and bandwidth.

Runs under torchrun on every node; nccl where CUDA works, gloo otherwise. Each rank
prints one `MNTUI_SMOKE <marker> {json}` line that the doctor collects; the marker is
the doctor's random one for this run (argv[2]), so no other output can pass for a result.
With argv[3] (seconds, `doctor --pairs`), latency and bandwidth are each measured over
that long: a node slowed by a quota or a throttled clock shows only under sustained load.
"""

import datetime
import json
import os
import sys
import time
from typing import Any


def main() -> int:
    import torch
    import torch.distributed as dist

    timeout = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    mark = " ".join(["MNTUI_SMOKE", *sys.argv[2:3]])
    sustain = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    out: dict[str, Any] = {
        "rank": int(os.environ.get("RANK", "-1")),
        "node_rank": os.environ.get("NODE_RANK"),
        "host": os.uname().nodename,
        "backend": backend,
        "ok": False,
    }
    try:
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
        rank, world = dist.get_rank(), dist.get_world_size()
        out.update(rank=rank, world=world)
        t = torch.tensor([float(rank)], device=device)
        dist.all_reduce(t)
        expected = world * (world - 1) / 2
        out["sum"], out["expected"] = t.item(), expected

        def seconds_per_all_reduce(tensor: Any, warmup: int, n: int) -> float:
            for i in range(warmup + n):
                if i == warmup:
                    if cuda:
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                dist.all_reduce(tensor)
            if cuda:
                torch.cuda.synchronize()
            return (time.perf_counter() - t0) / n

        def sustained(tensor: Any, seconds: float) -> float:
            """Rounds of 5 until rank 0 has seen `seconds` go by: it decides for all (a
            rank that stopped on its own clock would leave the others in a collective)."""
            flag, n, t0 = torch.ones(1, device=device), 0, time.perf_counter()
            while flag.item() > 0:
                for _ in range(5):
                    dist.all_reduce(tensor)
                n += 5
                flag.fill_(1.0 if time.perf_counter() - t0 < seconds else 0.0)
                dist.broadcast(flag, 0)
            if cuda:
                torch.cuda.synchronize()
            return (time.perf_counter() - t0) / n

        small, big = torch.zeros(1, device=device), torch.ones(1 << 20, device=device)  # 4 MiB
        if sustain > 0:
            out["latency_us"] = sustained(small, sustain / 2) * 1e6
            out["algbw_gbps"] = big.numel() * 4 / sustained(big, sustain / 2) / 1e9
        else:
            out["latency_us"] = seconds_per_all_reduce(small, 5, 20) * 1e6
            out["algbw_gbps"] = big.numel() * 4 / seconds_per_all_reduce(big, 1, 5) / 1e9
        out["ok"] = abs(out["sum"] - expected) < 1e-6
        dist.destroy_process_group()
    except Exception as exc:  # reported, not raised: the doctor reads every rank's line
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
    # One write(2) per line: ranks of a node share the pipe, and with PYTHONUNBUFFERED
    # print() writes text and newline separately, so two ranks' lines could interleave.
    os.write(1, f"{mark} {json.dumps(out)}\n".encode())
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
