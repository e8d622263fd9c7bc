"""One attempt of the restart chain started on the cluster: the main first, the
workers once the main's port listens, a spare told the rank it takes.

Why apart from the chain (chain.py): the chain decides whether and when; this carries
out a start, through the sentinels, and nothing else: each attempt's script was
rendered at launch, so the coordinator only says "start attempt k", waits for every
answer (the cleanup after a failed start must find every attempt that did start), and
says why not in one line.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Protocol

from .chainlog import ChainLog
from .coordstate import Board
from .killer import listening_ports
from .plainfile import plain
from .restarts import attempt_label
from .teardown import stop
from .watchcfg import WatchConfig

START_ANSWER = 90.0  # seconds for a sentinel to say its attempt started


class Starter(Protocol):
    """What a start needs of the coordinator (coordinator.py)."""

    board: Board
    cfg: WatchConfig
    done: threading.Event

    def kill_requested(self) -> tuple[float, str | None] | None: ...


def relaunch(c: Starter, k: int, log: ChainLog) -> str | None:
    """Attempt `k`: the main first, the workers once its port listens. None when every
    node started; else why not (what did start is killed by the caller's stop)."""
    run = _run_of(c, k)
    layout = log.starting(k, run)
    use(c, layout)
    c.board.new_attempt(k, run)
    main, workers = layout[0], layout[1:]
    why = _all_there(c, layout)
    if why is None:
        why = _start_on(c, [main], k, layout)
    if why is None:
        why = _ready(c)
    if why is None:
        why = _start_on(c, list(workers), k, layout)
    if why is not None:
        why = f"{attempt_label(k)} did not start: {why}"
        stop(c.board, c.cfg, {"decided_by": "coordinator", "why": why}, c.cfg.grace)
        return why
    log.running(k)
    return None


def _run_of(c: Starter, k: int) -> str:
    path = os.path.join(os.path.dirname(c.board.out), "attempts", f"{k}.json")
    try:
        with open(path, encoding="utf-8", opener=plain) as f:
            run = json.loads(f.read(4096)).get("run")
    except (OSError, ValueError, AttributeError):
        run = None
    return run if isinstance(run, str) else f"attempt-{k}"


def use(c: Starter, layout: tuple[str, ...]) -> None:
    """The attempt's nodes, for the judge and the kills (the board's)."""
    c.board.layout = layout


def _all_there(c: Starter, layout: tuple[str, ...]) -> str | None:
    """Every node's sentinel connected before any rank of the attempt starts (a
    sentinel reconnecting is waited for, `silence` at most): a main whose workers are
    gone started its rank 0 alone, then found no sentinel on the worker and stopped it
    (issue 39, a main woken from a freeze)."""
    end = time.monotonic() + c.board.silence
    while True:
        c.board.pulse()
        missing = [n for n in layout if n not in c.board.live_peers()]
        if not missing:
            return None
        if time.monotonic() >= end:
            return f"no sentinel connected on {', '.join(missing)}: nothing started"
        c.done.wait(0.05)


def _start_on(c: Starter, nodes: list[str], k: int, layout: tuple[str, ...]) -> str | None:
    """Attempt `k` on `nodes`, all at once (a spare is told the rank it takes); every
    answer is awaited before saying why one failed, so the cleanup after it finds every
    attempt that did start."""
    missing = [n for n in nodes if n not in c.board.live_peers()]
    if missing:
        return f"no sentinel connected on {', '.join(missing)}"
    spares = c.cfg.spares
    asked = {
        n: c.board.ask(n, "start", attempt=k, **({"rank": layout.index(n)} if n in spares else {}))
        for n in nodes
    }
    deadline = time.monotonic() + START_ANSWER
    why = None
    for n, rid in asked.items():
        msg = c.board.wait_reply(n, rid, deadline) if rid is not None else None
        if msg is None:
            why = why or f"{n}'s sentinel did not say {attempt_label(k)} started"
        elif msg.get("ok") is not True:
            why = why or f"{n}: {str(msg.get('error'))[:200]}"
    return why


def _ready(c: Starter) -> str | None:
    """The main's master port listening, as the launch waits for it (`ready: port`)."""
    end = time.monotonic() + c.cfg.ready_timeout
    while time.monotonic() < end:
        c.board.pulse()
        if c.cfg.master_port in listening_ports():
            return None
        if c.kill_requested() is not None:
            return "the user's kill came first"
        c.done.wait(0.2)
    return f"the main's port {c.cfg.master_port} did not listen in {c.cfg.ready_timeout:.0f} s"
