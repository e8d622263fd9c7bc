"""Reading the ranks' Flight Recorder dumps in a child process, within a time budget.

Every part of a dump is bounded once it is unpickled (frparse.py), but unpickling is
not: a dict keyed by a tuple that the pickle's memo shares with itself sixty levels
deep costs 2**60 hashes, inside C code that never lets go of the GIL. In the process
that builds a report (a verb, the app) that would stop every thread from a 163-byte
file. So
the report's dumps are parsed by a child (`python -m mntui.sessions.report.frchild`),
one after another, each answered on a line of its own: a dump that takes longer than
PER_DUMP, or that the child dies on, is counted as malformed, the child is killed (by
its PID) and a new one goes on with the next. All of them together get BUDGET seconds;
what is left when it runs out is counted too. The child's CPU time is capped by the
kernel as well, so one whose parent died cannot spin on.

The child reads its input from a file: for each dump a line `[index, size]` and the
bytes. It answers `{"i": index, "dump": ...}`; its answers are parsed strictly.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from typing import IO, Any

from .flightrec import Reading, assemble, rank_of
from .frparse import Op, Parsed, parse

BUDGET = 30.0  # every dump of a run: a few hundred ranks of 2,000 entries take ~10 s
PER_DUMP = 5.0  # one dump at its 16 MiB bound reads in well under a second
START = 10.0  # a child's Python and imports, on a loaded machine
MAX_ANSWER = 128 * 1024 * 1024  # one dump's answer: at most 65,536 ops of short text
MODULE = "mntui.sessions.report.frchild"


def read_within(
    files: Mapping[tuple[str, str], bytes],
    world: int | None = None,
    budget: float = BUDGET,
    per_dump: float = PER_DUMP,
) -> Reading:
    """flightrec.read's Reading of `files`, each parsed in a child process."""
    keys = sorted(k for k in files if rank_of(k[1]) is not None)
    parsed: dict[tuple[str, str], Parsed | None] = dict.fromkeys(files)
    late: list[str] = []
    deadline = time.monotonic() + budget
    with tempfile.TemporaryFile() as feed:
        offsets = _write_feed(feed, [files[k] for k in keys])
        done = 0
        while done < len(keys) and time.monotonic() < deadline:
            answers = _run_child(feed, offsets[done], done, deadline, per_dump)
            for i, got in answers.items():
                parsed[keys[i]] = got
            done += len(answers)
            if done < len(keys):  # the child stopped on this one: out of time, or dead
                late.append("/".join(keys[done]))
                done += 1
    late += ["/".join(k) for k in keys[done:]]
    return assemble(parsed, world, late)


def _write_feed(feed: IO[bytes], dumps: list[bytes]) -> list[int]:
    """Each dump behind a `[index, size]` line; where each one starts."""
    offsets = []
    for i, data in enumerate(dumps):
        offsets.append(feed.tell())
        feed.write(json.dumps([i, len(data)]).encode() + b"\n")
        feed.write(data)
    feed.flush()
    return offsets


def _run_child(
    feed: IO[bytes], offset: int, first: int, deadline: float, per_dump: float
) -> dict[int, Parsed | None]:
    """One child's answers, from dump `first` on, in order, until it ends or is stopped."""
    feed.seek(offset)
    cpu = max(1, int(deadline - time.monotonic()) + 1)
    argv = [sys.executable, "-P", "-m", MODULE, str(cpu)]
    try:
        child = subprocess.Popen(argv, stdin=feed, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL)  # fmt: skip
    except OSError:
        return {}
    answers: dict[int, Parsed | None] = {}
    wait = [min(deadline, time.monotonic() + START + per_dump)]
    try:
        assert child.stdout is not None
        for line in _lines(child.stdout, wait):
            i, got = _answer(line)
            if i != first + len(answers):
                break
            answers[i] = got
            wait[0] = min(deadline, time.monotonic() + per_dump)
    except ValueError:  # out of time, or an answer that is not one
        pass
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    return answers


def _lines(out: IO[bytes], until: list[float]) -> Iterator[bytes]:
    """The child's lines as they come, until its end; ValueError once `until[0]` (the
    monotonic clock) passes, or a line grows past MAX_ANSWER."""
    fd = out.fileno()
    pending: list[bytes] = []
    size = 0
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = until[0] - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise ValueError("out of time")
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return
            start = 0
            while (cut := chunk.find(b"\n", start)) >= 0:
                pending.append(chunk[start:cut])
                yield b"".join(pending)
                pending, size, start = [], 0, cut + 1
            pending.append(chunk[start:])
            size += len(chunk) - start
            if size > MAX_ANSWER:
                raise ValueError("an answer too long")


# -- the answers: what a child says of one dump, as JSON, read back strictly ------------


def _encode(got: Parsed | None) -> Any:
    if got is None:
        return None
    ops = {pg: [[o.seq, o.name, o.shape, o.created, o.completed, o.site] for o in group]
           for pg, group in got.ops.items()}  # fmt: skip
    return {"ops": ops, "enqueued": dict(got.enqueued), "completed": dict(got.completed)}


def _answer(line: bytes) -> tuple[int, Parsed | None]:
    """(index, what the dump says); ValueError for anything but the shape _encode gives."""
    msg = json.loads(line)
    if type(msg) is not dict or msg.keys() != {"i", "dump"} or type(msg["i"]) is not int:
        raise ValueError("not an answer")
    d = msg["dump"]
    if d is None:
        return msg["i"], None
    if type(d) is not dict or d.keys() != {"ops", "enqueued", "completed"}:
        raise ValueError("not a dump")
    ops = {_str(pg): tuple(_op(o) for o in _list(group)) for pg, group in _dict(d["ops"])}
    enq = {_str(k): _int(v) for k, v in _dict(d["enqueued"])}
    done = {_str(k): _int(v) for k, v in _dict(d["completed"])}
    return msg["i"], Parsed(ops, enq, done)


def _op(o: Any) -> Op:
    seq, name, shape, created, completed, site = _list(o, 6)
    if created is not None and type(created) not in (int, float):
        raise ValueError("created")
    if type(completed) is not bool:
        raise ValueError("completed")
    when = None if created is None else float(created)
    return Op(_int(seq), _str(name), _str(shape), when, completed, _str(site))


def _dict(v: Any) -> Any:
    if type(v) is not dict:
        raise ValueError("expected an object")
    return v.items()


def _list(v: Any, n: int | None = None) -> list[Any]:
    if type(v) is not list or (n is not None and len(v) != n):
        raise ValueError("expected a list")
    return v


def _int(v: Any) -> int:
    if type(v) is not int:
        raise ValueError("expected an integer")
    return v


def _str(v: Any) -> str:
    if type(v) is not str:
        raise ValueError("expected a string")
    return v


# -- the child ------------------------------------------------------------------------


def main(argv: list[str]) -> None:
    """Parse each dump of stdin, answer each on its own line. Its CPU seconds are capped
    (argv[0]): the kernel ends one that spins on after its parent is gone."""
    cpu = int(argv[0])
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    cap = cpu if hard == resource.RLIM_INFINITY else min(cpu, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (cap, hard))
    src, out = sys.stdin.buffer, sys.stdout.buffer
    while header := src.readline(64):
        i, size = json.loads(header)
        got = parse(src.read(size))
        out.write(json.dumps({"i": i, "dump": _encode(got)}, separators=(",", ":")).encode())
        out.write(b"\n")
        out.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
