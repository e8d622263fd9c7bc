"""One attempt of the restart chain started on the cluster: the main first, the
workers once the main is ready (the launch's `launch.ready`: readywait.py), a spare
told the rank it takes.

Why apart from the chain (chain.py): the chain decides whether and when; this carries
out a start, through the sentinels, and nothing else: each node's start was rendered
at launch as a template (attemptscript.py), so the coordinator only names the
attempt's run and says "start attempt k as run r", waits for every answer (the cleanup
after a failed start must find every attempt that did start), and says why not in one
line.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Protocol

from mntui.sessions.node.board.coordstate import Board
from mntui.sessions.node.board.teardown import stop
from mntui.sessions.node.rules.restarts import attempt_label
from mntui.sessions.node.rules.runid import RUN_ID, new_run_id
from mntui.sessions.node.wire.watchcfg import WatchConfig

from . import readywait
from .chainlog import ChainLog

START_ANSWER = 90.0  # seconds for a sentinel to say its attempt started


class Starter(Protocol):
    """What a start needs of the coordinator (coordinator.py)."""

    board: Board
    cfg: WatchConfig
    done: threading.Event

    def kill_requested(self) -> tuple[float, str | None] | None: ...


def relaunch(c: Starter, k: int, log: ChainLog) -> str | None:
    """Attempt `k`: the main first, the workers once it is ready. None when every node
    started; else why not (what did start is killed by the caller's stop)."""
    run = _run_of(k, log)
    layout = log.starting(k, run)
    use(c, layout)
    c.board.new_attempt(k, run)
    main, workers = layout[0], layout[1:]
    why = _all_there(c, layout)
    if why is None:
        why = _start_on(c, [main], k, run, layout)
    if why is None:
        why = _ready(c, k)
    if why is None:
        why = _start_on(c, list(workers), k, run, layout)
    if why is not None:
        why = f"{attempt_label(k)} did not start: {why}"
        stop(c.board, c.cfg, {"decided_by": "coordinator", "why": why}, c.cfg.grace)
        return why
    log.running(k)
    return None


def _run_of(k: int, log: ChainLog) -> str:
    """Attempt `k`'s run id: the one chain.json gave it already (a coordinator started
    again mid-start asks for the same run), else a new one by the launch's rule, none
    an earlier attempt of the chain had."""
    attempts = log.data["attempts"]
    named = attempts[-1].get("run")
    if attempts[-1].get("attempt") == k and isinstance(named, str) and RUN_ID.fullmatch(named):
        return named
    used = {a.get("run") for a in attempts}
    run = new_run_id()
    while run in used:
        run = new_run_id()
    return run


def use(c: Starter, layout: tuple[str, ...]) -> None:
    """The attempt's nodes, for the judge and the kills (the board's)."""
    c.board.layout = layout


def _all_there(c: Starter, layout: tuple[str, ...]) -> str | None:
    """Every node's sentinel connected, and heard within `silence`, before any rank of
    the attempt starts (a sentinel reconnecting is waited for, `silence` at most): a
    main whose workers are gone started its rank 0 alone, then found no sentinel on the
    worker and stopped it (issue 39, a main woken from a freeze); and one cut from a
    worker by a partition (its connection still open here) started the attempt on the
    others and waited for that worker's answer (issue 37)."""
    end = time.monotonic() + c.board.silence
    while True:
        c.board.pulse()
        live, fresh = c.board.live_peers(), c.board.fresh_peers(c.board.silence)
        gone = [n for n in layout if n not in live]
        quiet = [n for n in layout if n in live and n not in fresh]
        if not gone and not quiet:
            return None
        if time.monotonic() >= end:
            if gone:
                return f"no sentinel connected on {', '.join(gone)}: nothing started"
            silent = f"{c.board.silence:g} s"
            return f"no word from the sentinel on {', '.join(quiet)} for {silent}: nothing started"
        c.done.wait(0.05)


def _start_on(
    c: Starter, nodes: list[str], k: int, run: str, layout: tuple[str, ...]
) -> str | None:
    """Attempt `k` (run `run`) on `nodes`, all at once (a spare is told the rank it
    takes); every answer is awaited before saying why one failed, so the cleanup after
    it finds every attempt that did start."""
    missing = [n for n in nodes if n not in c.board.fresh_peers(c.board.silence)]
    if missing:
        return f"no sentinel connected (or heard lately) on {', '.join(missing)}"
    spares = c.cfg.spares
    asked = {
        n: c.board.ask(
            n, "start", attempt=k, run=run, **({"rank": layout.index(n)} if n in spares else {})
        )
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


def _ready(c: Starter, k: int) -> str | None:
    """The main ready as the launch waits for it (`launch.ready`: readywait.py)."""
    return readywait.wait(c, os.path.dirname(c.board.out), k)
