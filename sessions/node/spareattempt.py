"""A spare's part of a restart: the attempt's script with the rank it takes.

Why one script per attempt and not one per (attempt, rank): a spare may take any
worker's rank, and at 128 nodes and 10 attempts a script for each would be ~1270 of
them, megabytes over one SSH stdin at launch. The launch renders each attempt once for
the spare with a token where the rank goes (`@@MNTUI_RANK_<nonce>@@`, in the places
`node_rank` is put: the command's placeholder, NODE_RANK, the script's header) and the
sentinel puts in the rank the coordinator gave, checked to be a worker's rank of the
run: an integer, so nothing a message carries reaches a shell but digits.
"""

from __future__ import annotations

import os

from .plainfile import plain
from .watchcfg import WatchConfig

MAX_SCRIPT = 4 << 20  # bytes: the launch's script, with the job's own setup lines


def script_for(first_dir: str, k: int, cfg: WatchConfig, rank: object) -> str:
    """The path of attempt `k`'s script to run on this node; RuntimeError when `rank`
    is not one this node may take (a node of the run takes its own, given or not)."""
    base = os.path.join(first_dir, "attempts", f"{k}.sh")
    if cfg.rank_token is None:
        own = cfg.nodes.index(cfg.node)
        if rank is not None and rank != own:
            raise RuntimeError(f"attempt {k}: asked for rank {rank!r}, this node runs {own}")
        return base
    if type(rank) is not int or not 1 <= rank < len(cfg.nodes):
        raise RuntimeError(f"attempt {k}: {rank!r} is no worker rank of this run")
    with open(base, "rb", opener=plain) as f:
        data = f.read(MAX_SCRIPT + 1)
    if len(data) > MAX_SCRIPT:  # cut, it would run without its end: refused, never run
        raise RuntimeError(f"attempts/{k}.sh is over {MAX_SCRIPT >> 20} MiB: not the launch's")
    text = data.decode("utf-8", "surrogateescape")
    if cfg.rank_token not in text:
        raise RuntimeError(f"attempts/{k}.sh has no rank to take: not a spare's script")
    out = os.path.join(first_dir, "attempts", f"{k}.rank.sh")
    tmp = f"{out}.tmp-{os.getpid()}"
    fd = plain(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)  # 0600: the daemon's umask
    with os.fdopen(fd, "wb") as f:
        f.write(text.replace(cfg.rank_token, str(rank)).encode("utf-8", "surrogateescape"))
    os.replace(tmp, out)
    return out
