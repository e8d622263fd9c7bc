"""The restart chain on the cluster: after an attempt ends, the coordinator decides
with the restart policy (restarts.decide, the manager's rule), waits out the backoff
and starts the next attempt through the sentinels, main first, the workers once the
main's port listens, all while the manager may be asleep.

Each attempt's script was rendered at launch (its run id, tag, `MNTUI_RESTART_COUNT`),
so nothing here builds a command: the coordinator only says "start attempt k". What it
did is in `coord/chain.json` (atomic, every step), which the manager reads on its next
contact and turns into run records of its own.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .coordstate import Board
from .facts import Facts
from .judging import NodeTrigger
from .killer import listening_ports
from .restarts import AttemptEnd, decide
from .rules import NodeState, Verdict
from .teardown import stop, user_kill
from .watchcfg import WatchConfig

START_ANSWER = 90.0  # seconds for a sentinel to say its attempt started


@dataclass(frozen=True)
class Outcome:
    kind: str  # "teardown" | "ended" | "killed"
    why: str
    trigger: NodeTrigger | None = None
    facts: dict[str, Facts] = field(default_factory=dict)
    verdicts: dict[str, Verdict] = field(default_factory=dict)


class Coordinator(Protocol):
    """What the chain needs of the coordinator (coordinator.py)."""

    board: Board
    cfg: WatchConfig
    done: threading.Event

    def watch_attempt(self) -> Outcome: ...
    def kill_requested(self) -> tuple[float, str | None] | None: ...


def attempt_end(k: int, run: str, out: Outcome, progressed: float) -> AttemptEnd:
    codes = tuple(f.exit_code for f in out.facts.values() if f.exit_code)
    if out.trigger is not None:
        t = out.trigger
        return AttemptEnd(
            k, run, t.state, t.node, codes, progressed, f"{t.node} {t.state}: {t.why}"
        )
    failed = [n for n, v in out.verdicts.items() if v.state is NodeState.FAILED]
    if failed:
        return AttemptEnd(k, run, NodeState.FAILED, failed[0], codes, progressed, "exit codes")
    return AttemptEnd(k, run, NodeState.FINISHED, None, codes, progressed, "finished")


def run_chain(c: Coordinator) -> str:
    history: list[AttemptEnd] = []
    log = ChainLog(c)
    k = 0
    while True:
        started = time.monotonic()
        out = c.watch_attempt()
        if out.kind == "killed":
            log.end("killed", out.why)
            return out.why
        end = attempt_end(k, c.board.run, out, c.board.progressed_since(started))
        history.append(end)
        d = decide(c.cfg.restart, history) if c.cfg.restart is not None else None
        if d is not None and d.restart and k >= c.cfg.attempts:  # reset_after reset the count
            spent = f"no more restarts: {c.cfg.attempts} were rendered at launch"
            d = replace(d, restart=False, gave_up=True, why=spent)
        if d is None or not d.restart:
            why = d.why if d is not None else "restart is off"
            log.attempt_ended(end, why, None, out.kind)
            log.end("gave-up" if d is not None and d.gave_up else "ended", why)
            return f"{out.why}; {why}"
        log.attempt_ended(end, d.why, d.delay, out.kind)
        if not _backoff(c, d.delay):
            log.end("killed", "the user's kill in the backoff")
            return "killed by the user"
        k += 1
        failed = relaunch(c, k, log)
        if failed is not None:
            log.end("failed-restart", failed)
            return failed


def _backoff(c: Coordinator, delay: float) -> bool:
    """Waits `delay`; False when the user's kill came meanwhile (it is carried out)."""
    end = time.monotonic() + delay
    while time.monotonic() < end:
        asked = c.kill_requested()
        if asked is not None:
            user_kill(c.board, c.cfg, *asked)
            return False
        c.done.wait(min(0.25, max(0.0, end - time.monotonic())))
    return True


def relaunch(c: Coordinator, k: int, log: ChainLog) -> str | None:
    """Attempt `k`: the main first, the workers once its port listens. None when every
    node started; else why not (what did start is killed by the caller's stop)."""
    run = _run_of(c, k)
    c.board.new_attempt(k, run)
    log.starting(k, run)
    main, workers = c.cfg.nodes[0], c.cfg.nodes[1:]
    why = _start_on(c, [main], k)
    if why is None:
        why = _ready(c)
    if why is None:
        why = _start_on(c, list(workers), k)
    if why is not None:
        why = f"attempt {k} did not start: {why}"
        stop(c.board, c.cfg, {"decided_by": "coordinator", "why": why}, c.cfg.grace)
        return why
    log.running(k)
    return None


def _run_of(c: Coordinator, k: int) -> str:
    path = os.path.join(os.path.dirname(c.board.out), "attempts", f"{k}.json")
    try:
        with open(path, encoding="utf-8") as f:
            run = json.loads(f.read(4096)).get("run")
    except (OSError, ValueError, AttributeError):
        run = None
    return run if isinstance(run, str) else f"attempt-{k}"


def _start_on(c: Coordinator, nodes: list[str], k: int) -> str | None:
    """Attempt `k` on `nodes`, all at once; every answer is awaited before saying why
    one failed, so the cleanup after it finds every attempt that did start."""
    missing = [n for n in nodes if n not in c.board.live_peers()]
    if missing:
        return f"no sentinel connected on {', '.join(missing)}"
    asked = {n: c.board.ask(n, "start", attempt=k) for n in nodes}
    deadline = time.monotonic() + START_ANSWER
    why = None
    for n, rid in asked.items():
        msg = c.board.wait_reply(n, rid, deadline) if rid is not None else None
        if msg is None:
            why = why or f"{n}'s sentinel did not say attempt {k} started"
        elif msg.get("ok") is not True:
            why = why or f"{n}: {str(msg.get('error'))[:200]}"
    return why


def _ready(c: Coordinator) -> str | None:
    """The main's master port listening, as the launch waits for it (`ready: port`)."""
    end = time.monotonic() + c.cfg.ready_timeout
    while time.monotonic() < end:
        if c.cfg.master_port in listening_ports():
            return None
        if c.kill_requested() is not None:
            return "the user's kill came first"
        c.done.wait(0.2)
    return f"the main's port {c.cfg.master_port} did not listen in {c.cfg.ready_timeout:.0f} s"


class ChainLog:
    """`coord/chain.json`: every attempt, how it ended, what the policy said."""

    def __init__(self, c: Coordinator) -> None:
        self.c = c
        self.data: dict[str, Any] = {
            "chain": c.cfg.run,
            "status": "running",
            "attempts": [{"attempt": 0, "run": c.cfg.run, "started_at": time.time()}],
        }
        self._write()

    def _write(self) -> None:
        self.c.board.write("chain.json", self.data)

    def attempt_ended(self, end: AttemptEnd, why: str, delay: float | None, kind: str) -> None:
        """`kind`: "teardown" (the coordinator decided it) or "ended" (by itself)."""
        last = self.data["attempts"][-1]
        last.update(end=end.plain(), ended_at=time.time(), restart=why, delay=delay, kind=kind)
        last["steps"] = dict(self.c.board.clock)  # the ledger's training time
        self.data["status"] = "backoff" if delay is not None else "ended"
        self.c.board.journal("restart" if delay is not None else "chain", None, why=why)
        self._write()

    def starting(self, k: int, run: str) -> None:
        self.data["attempts"].append({"attempt": k, "run": run, "started_at": time.time()})
        self.data["status"] = "starting"
        self.c.board.journal("attempt", None, attempt=k, run=run)
        self._write()

    def running(self, k: int) -> None:
        self.data["status"] = "running"
        self._write()

    def end(self, status: str, why: str) -> None:
        self.data.update(status=status, why=why, ended_at=time.time())
        self.data["attempts"][-1].setdefault("steps", dict(self.c.board.clock))
        self._write()
