"""The sentinel's straggler samples: each round (ending near the wall clock's multiples
of ROUND seconds, so that every node's rounds end together), one `py-spy record` of each
of its node's live ranks at 1/`sample_every` samples a second, each sample judged
"waiting in a collective or not", and only those verdicts, in order, sent to the
coordinator (a `waits` frame) with how long the round took.

Why on the node: with `watch.where: cluster` nothing on the manager samples, and the
stacks are where the ranks are; the coordinator needs a few bits per rank, not the
stacks. Why a record, not a dump per sample: a py-spy process costs ~10 ms of CPU to
start (it reads the interpreter's symbols) and ~0.3 ms a sample after that; one record
per rank per ROUND seconds buys 36 samples (at the default 4 a second) for the CPU of
about two dumps (the per-node cost is bench/stragglers.py's). The record reads with
`--nonblocking` (no ptrace stop: no pause in a rank's step, no `t` state a sample of
the node could read as frozen; a torn read is a sample that says nothing) and `--idle`
(a rank waiting in a collective is idle); py-spy is found on the node's PATH or the
ranks' own, runs for all ranks at once, each in a session of its own within the round's
budget and a size cap (stackcap.run_bounded), and writes its speedscope file into the
attempt's own directory, read (bounded) and removed at once. Judged with the one test
(waits.record_waits). It runs on a thread of its own, never in the sampling loop whose
cost per sample is budgeted.

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

from mntui.sessions.node.proc.attempt import Attempt
from mntui.sessions.node.rules.waits import MAX_SAMPLES, record_waits
from mntui.sessions.node.wire.facts import Facts, ProcFact
from mntui.sessions.node.wire.frames import Channel
from mntui.sessions.node.wire.watchcfg import WatchConfig

from .stackcap import run_bounded

KIND = "waits"  # the frame a sentinel sends after each round
ROUND = 10  # seconds: rounds end near the wall clock's multiples of it
MIN_RECORD = 3  # seconds a record lasts at least (py-spy records whole seconds)
STARTUP = 10.0  # seconds py-spy may take to attach, past its record's own
MAX_RATE = 20  # samples a second
DUMP_MAX = 4 << 20  # bytes of one rank's record
CHATTER = 64 * 1024  # bytes of py-spy's own stdout read (and dropped)
ENVIRON_MAX = 256 * 1024
MAX_RANKS = 4096  # ranks in one frame (a node's)
MAX_RANK = 1 << 24
MAX_TOOK = 600.0  # seconds a round may say it took


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


def rate_of(every: float) -> int:
    """py-spy's samples a second for `sample_every` (a whole number: at least one)."""
    return max(1, min(MAX_RATE, round(1 / every))) if every > 0 else 1


def record(spy: str, pid: int, seconds: int, rate: int, path: str) -> str:
    """One rank's round: its samples' verdicts in order (waits.record_waits), "" when
    the record failed (the rank ended, py-spy could not attach, a budget ran out)."""
    argv = [spy, "record", "--nonblocking", "--idle", "--full-filenames", "--format",
            "speedscope", "--rate", str(rate), "--duration", str(seconds), "-o", path,
            "--pid", str(pid)]  # fmt: skip
    try:
        _, error = run_bounded(argv, seconds + STARTUP, CHATTER)
        with open(path, "rb") as f:
            raw = f.read(DUMP_MAX + 1)
    except OSError:
        return ""
    finally:
        try:
            os.unlink(path)  # ours: py-spy wrote it where we told it to
        except OSError:
            pass
    if error is not None or len(raw) > DUMP_MAX:
        return ""
    return record_waits(raw.decode("utf-8", "replace"))


def one_round(
    procs: Iterable[ProcFact], seconds: int, rate: int, out_dir: str
) -> list[tuple[int, str]]:
    """(rank, verdicts) of every rank recorded, each on its own thread, all within the
    round's budget; ranks whose record failed are left out."""
    ranks, paths = ranks_of(procs)
    spy = find_spy(paths) if ranks else None
    if spy is None:
        return []
    got: dict[int, str] = {}

    def one(pid: int) -> None:
        got[pid] = record(spy, pid, seconds, rate, os.path.join(out_dir, f".spy-{pid}.json"))

    threads = [threading.Thread(target=one, args=(pid,), daemon=True) for pid in ranks]
    for t in threads:
        t.start()
    deadline = time.monotonic() + seconds + STARTUP + 1.0  # run_bounded kills at its budget
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    done = dict(got)
    return sorted((ranks[pid], bits) for pid, bits in done.items() if bits)


def wire(pairs: list[tuple[int, str]]) -> list[list[Any]]:
    return [[rank, bits] for rank, bits in pairs[:MAX_RANKS]]


class Malformed(ValueError):
    """A `waits` frame that is not what a sentinel of ours sends."""


def from_wire(v: object, took: object) -> tuple[float, list[tuple[int, str]]]:
    """A `waits` frame's `took` and `ranks`, strictly: seconds in (0, MAX_TOOK], and a
    bounded list of [rank, verdicts] ("0", "1" and "-", at most MAX_SAMPLES), each rank
    once; anything else is Malformed (counted by the coordinator, never believed)."""
    if isinstance(took, bool) or not isinstance(took, (int, float)) or not 0 < took <= MAX_TOOK:
        raise Malformed("took is the round's seconds")
    if not isinstance(v, list) or len(v) > MAX_RANKS:
        raise Malformed("ranks is a bounded list")
    out: dict[int, str] = {}
    for item in v:
        if not isinstance(item, list) or len(item) != 2:
            raise Malformed("a rank's samples are [rank, verdicts]")
        rank, bits = item
        if type(rank) is not int or not 0 <= rank < MAX_RANK or not isinstance(bits, str):
            raise Malformed("a rank is an integer, its verdicts a string")
        if not 0 < len(bits) <= MAX_SAMPLES or bits.strip("01-"):
            raise Malformed("verdicts are 0, 1 or -, a bounded few")
        if rank in out:
            raise Malformed("a rank sampled twice in one round")
        out[rank] = bits
    return float(took), sorted(out.items())


class Sentinel(Protocol):
    """What the sampler reads of its sentinel (sentinel.py), under its `lock`."""

    cfg: WatchConfig
    lock: threading.Lock
    att: Attempt
    facts: Facts | None
    channel: Channel | None
    stopping: threading.Event


def loop(s: Sentinel) -> None:
    """The sentinel's sampler thread: round after round without a gap (none when
    sample_every is 0), each ending near the next multiple of ROUND on the wall clock,
    its verdicts sent on the coordinator's channel if there is one then. Every node's
    rounds end together (their clocks agree to a second or so): the coordinator judges
    a moment once every node has reached it. A round late by py-spy's start (a busy
    node) is followed at once by a shorter one, never by a skipped one."""
    every = s.cfg.sample_every
    if every <= 0:
        return
    rate = rate_of(every)
    while not s.stopping.is_set():
        t0 = time.monotonic()
        seconds = int(ROUND - time.time() % ROUND)  # whole seconds: py-spy's
        seconds += ROUND if seconds < MIN_RECORD else 0
        with s.lock:
            att, facts = s.att, s.facts
        ch = s.channel
        if ch is None or facts is None or not facts.live_procs:
            s.stopping.wait(ROUND - time.time() % ROUND)  # nothing to sample yet
            continue
        try:
            pairs = one_round(facts.live_procs, seconds, rate, att.dir)
            took = time.monotonic() - t0
            if pairs and 0 < took <= MAX_TOOK:
                ch.send(KIND, run=att.run, took=round(took, 3), ranks=wire(pairs))
        except OSError:
            pass  # the link is the link thread's to mend; this round is lost
        except Exception:  # a sampler's bug must never end the sentinel
            traceback.print_exc()
        if time.monotonic() - t0 < MIN_RECORD:  # no record ran (no py-spy, no rank, a
            s.stopping.wait(ROUND - time.time() % ROUND)  # refusal): the next round's time


def start(s: Sentinel) -> None:
    threading.Thread(target=loop, args=(s,), name="mntui-spysample", daemon=True).start()
