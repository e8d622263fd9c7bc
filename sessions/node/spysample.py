"""The sentinel's straggler samples: every `sample_every`, one py-spy dump of each of its
node's live ranks, each judged "waiting in a collective or not", and only those
booleans sent to the coordinator (a `waits` frame).

Why on the node: with `watch.where: cluster` nothing on the manager samples, and the
stacks are where the ranks are; the coordinator needs one bit per rank, not the stacks.
The dump is the capture script's (launch/stackscript.py) for a sampler: `py-spy dump
--json --nonblocking` (no ptrace stop: no pause in a rank's step, no `t` state a sample
of the node could read as frozen; a torn read is a failed dump, no sample), py-spy
found on the node's PATH or the ranks' own, all ranks at once in a session of their
own within the round's budget and a size cap (stackcap.run_bounded). Judged with the
one test (waits.sample_of). It runs on a thread of its own, every `sample_every` (10 s
by default), never in the sampling loop whose cost per sample is budgeted.

A rank is a followed process with `RANK` in its environment whose parent has none of
the same: torchrun's workers, not the DataLoader workers they fork (which inherit it).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import traceback
from collections.abc import Iterable
from typing import Any, Protocol

from .attempt import Attempt
from .facts import Facts, ProcFact
from .frames import Channel
from .stackcap import run_bounded
from .waits import main_frames, sample_of
from .watchcfg import WatchConfig

KIND = "waits"  # the frame a sentinel sends after each round
MAX_BUDGET = 5.0  # seconds for one round's dumps, however long sample_every is
DUMP_MAX = 4 << 20  # bytes of one rank's dump
ENVIRON_MAX = 256 * 1024
MAX_RANKS = 4096  # ranks in one frame (a node's)
MAX_RANK = 1 << 24


def rank_of(pid: int) -> tuple[int | None, str | None]:
    """The process's `RANK` and `PATH` from its environment (None: none, or gone)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read(ENVIRON_MAX)
    except OSError:
        return None, None
    rank = path = None
    for entry in raw.split(b"\0"):
        if entry.startswith(b"RANK=") and entry[5:].isdigit() and len(entry) < 14:
            rank = int(entry[5:])
        elif entry.startswith(b"PATH="):
            path = entry[5:].decode("utf-8", "replace")
    return rank, path


def ranks_of(procs: Iterable[ProcFact]) -> tuple[dict[int, int], list[str]]:
    """pid -> rank of the node's ranks (a rank's forked children left out), and the
    ranks' PATHs (where else py-spy may be)."""
    found = {p.pid: (p.ppid, *rank_of(p.pid)) for p in procs}
    ranks = {}
    paths = []
    for pid, (ppid, rank, path) in found.items():
        parent = found.get(ppid)
        if rank is not None and (parent is None or parent[1] != rank):
            ranks[pid] = rank
            if path:
                paths.append(path)
    return ranks, paths


def find_spy(paths: Iterable[str]) -> str | None:
    """py-spy on the sentinel's PATH, else on a rank's (a venv activated by `setup`)."""
    for path in (os.environ.get("PATH"), *paths):
        found = shutil.which("py-spy", path=path) if path else None
        if found:
            return found
    return None


def dump(spy: str, pid: int, budget: float) -> bool | None:
    """One rank's sample: waiting or not, None when the dump failed or said nothing."""
    try:
        out, error = run_bounded(
            [spy, "dump", "--json", "--nonblocking", "--pid", str(pid)], budget, DUMP_MAX
        )
    except OSError:
        return None
    if error is not None:
        return None
    frames, _ = main_frames(out.decode("utf-8", "replace"))
    return sample_of(frames)


def one_round(procs: Iterable[ProcFact], budget: float) -> list[tuple[int, bool]]:
    """(rank, waiting) of every rank sampled, each dump on its own thread, all within
    `budget`; ranks whose dump failed are left out."""
    ranks, paths = ranks_of(procs)
    spy = find_spy(paths) if ranks else None
    if spy is None:
        return []
    got: dict[int, bool | None] = {}

    def one(pid: int) -> None:
        got[pid] = dump(spy, pid, budget)

    threads = [threading.Thread(target=one, args=(pid,), daemon=True) for pid in ranks]
    for t in threads:
        t.start()
    deadline = time.monotonic() + budget + 1.0  # run_bounded kills a dump at its budget
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    done = dict(got)
    return sorted((ranks[pid], w) for pid, w in done.items() if w is not None)


def wire(pairs: list[tuple[int, bool]]) -> list[list[Any]]:
    return [[rank, waiting] for rank, waiting in pairs[:MAX_RANKS]]


class Malformed(ValueError):
    """A `waits` frame that is not what a sentinel of ours sends."""


def from_wire(v: object) -> list[tuple[int, bool]]:
    """A `waits` frame's `ranks`, strictly: a bounded list of [rank, bool], each rank
    once; anything else is Malformed (counted by the coordinator, never believed)."""
    if not isinstance(v, list) or len(v) > MAX_RANKS:
        raise Malformed("ranks is a bounded list")
    out: dict[int, bool] = {}
    for item in v:
        if not isinstance(item, list) or len(item) != 2:
            raise Malformed("a rank's sample is [rank, waiting]")
        rank, waiting = item
        if type(rank) is not int or not 0 <= rank < MAX_RANK or type(waiting) is not bool:
            raise Malformed("a rank is an integer, waiting a boolean")
        if rank in out:
            raise Malformed("a rank sampled twice in one round")
        out[rank] = waiting
    return sorted(out.items())


class Sentinel(Protocol):
    """What the sampler reads of its sentinel (sentinel.py), under its `lock`."""

    cfg: WatchConfig
    lock: threading.Lock
    att: Attempt
    facts: Facts | None
    channel: Channel | None
    stopping: threading.Event


def loop(s: Sentinel) -> None:
    """The sentinel's sampler thread: a round every `sample_every` seconds (none when 0),
    its booleans sent on the coordinator's channel if there is one then."""
    every = s.cfg.sample_every
    if every <= 0:
        return
    budget = max(1.0, min(MAX_BUDGET, every))
    wait = every
    while not s.stopping.wait(wait):
        t0 = time.monotonic()
        with s.lock:
            att, facts = s.att, s.facts
        ch = s.channel
        if ch is not None and facts is not None and facts.live_procs:
            try:
                pairs = one_round(facts.live_procs, budget)
                if pairs:
                    ch.send(KIND, run=att.run, ranks=wire(pairs))
            except OSError:
                pass  # the link is the link thread's to mend; this round is lost
            except Exception:  # a sampler's bug must never end the sentinel
                traceback.print_exc()
        wait = max(0.1, every - (time.monotonic() - t0))


def start(s: Sentinel) -> None:
    threading.Thread(target=loop, args=(s,), name="mntui-spysample", daemon=True).start()
