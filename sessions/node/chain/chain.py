"""The restart chain on the cluster: after an attempt ends, the coordinator decides
with the restart policy (restarts.decide, the manager's rule), waits out the backoff
and starts the next attempt through the sentinels (relaunch.py: main first, the
workers once the main's port listens), all while the manager may be asleep.

Each node's start was rendered at launch as a template (attemptscript.py), so nothing
here builds a command: the coordinator names attempt k's run (the launch's rule,
runid.py) and says "start attempt k as run r" (and to a spare swapped in, which rank
it takes: placing.py decides where each attempt runs, swaps.py keeps it in the chain);
each sentinel puts in its tag and `MNTUI_RESTART_COUNT`. What it did is in
`coord/chain.json` (chainlog.py, every step), which the manager reads on its next
contact and turns into run records of its own, and from which a coordinator started
again (respawn.py) goes on where its predecessor was (resume.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from mntui.sessions.node.board.teardown import finish, user_kill
from mntui.sessions.node.notice.notifysend import Outbox
from mntui.sessions.node.rules import firstfail
from mntui.sessions.node.rules.chainstates import ChainStatus, OutcomeKind
from mntui.sessions.node.rules.firstfail import NodeCause
from mntui.sessions.node.rules.judging import NodeTrigger
from mntui.sessions.node.rules.restarts import AttemptEnd, Decision, decide
from mntui.sessions.node.rules.states import NodeState, Verdict
from mntui.sessions.node.wire.chaincopy import Replica
from mntui.sessions.node.wire.facts import Facts

from . import resume, succession, swaps
from .chainlog import ChainLog
from .relaunch import Starter, relaunch, use
from .resume import BACKOFF, DECIDE, OVER, START, WATCH, Point

# the chain's end said by a coordinator that lost its nodes (woken from a stop they took
# for its loss, or told of a later epoch): the successor's, if there is one, goes on
STOOD_DOWN = (
    "this coordinator stands down and restarts nothing; a spare that succeeded it, once "
    "every worker lost it, leads the chain (`mntui status` follows it)"
)
# the chain's end said by a coordinator whose own node must be replaced (placing.py)
HANDED = "the chain is handed to the spare {heir}, which succeeds it (the coordinator runs on it)"


@dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    why: str
    trigger: NodeTrigger | None = None
    facts: dict[str, Facts] = field(default_factory=dict)
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    codes: tuple[int, ...] = ()  # the nodes' exit codes, when no facts are left to read
    first: NodeCause | None = None  # the first failure (firstfail.py), once named
    stopped: str | None = None  # the coordinator's own stop lost the attempt: why (no restart)


class Coordinator(Starter, Protocol):
    """What the chain needs of the coordinator (coordinator.py)."""

    notices: Outbox  # what the chain's decisions say (notifysend.py)
    replica: Replica  # every write of chain.json, to every sentinel (chaincopy.py)
    handover: dict[str, Any] | None  # the chain handed to a successor: its last chain.json

    def watch_attempt(self) -> Outcome: ...


def exit_codes(facts: dict[str, Facts]) -> tuple[int, ...]:
    """The nodes' non-zero exit codes, as the restart policy reads them."""
    return tuple(f.exit_code for f in facts.values() if f.exit_code)


def attempt_end(k: int, run: str, out: Outcome, progressed: float) -> AttemptEnd:
    """The culprit is the first failure, not the node the judge saw first: the restart
    policy swaps out, and the history blames, the node that broke."""
    codes = exit_codes(out.facts) or out.codes
    f = out.first
    if out.trigger is not None:
        t = out.trigger
        if f is not None and f.node != t.node:
            said = f"{f.who} {NodeState.FAILED}: {f.why}"
            return AttemptEnd(k, run, NodeState.FAILED, f.node, codes, progressed, said)
        why = f"{f.who} {t.state}: {f.why}" if f is not None else f"{t.node} {t.state}: {t.why}"
        return AttemptEnd(k, run, t.state, t.node, codes, progressed, why)
    failed = [n for n, v in out.verdicts.items() if v.state is NodeState.FAILED]
    if f is not None:
        said = f"{f.who} {NodeState.FAILED}: {f.why}"
        return AttemptEnd(k, run, NodeState.FAILED, f.node, codes, progressed, said)
    if failed:
        return AttemptEnd(k, run, NodeState.FAILED, failed[0], codes, progressed, "exit codes")
    return AttemptEnd(k, run, NodeState.FINISHED, None, codes, progressed, "finished")


def run_chain(c: Coordinator) -> str:
    """The chain from its start, or from where a predecessor left it (resume.py)."""
    saved = resume.load(c.board.out, "chain.json")
    at = None
    if saved is not None and saved.get("chain") == c.cfg.run:
        at = resume.point(saved, resume.load(c.board.out, "decision.json"), time.time())
    log = ChainLog(c.board, c.cfg, saved if at is not None else None, c.replica.publish)
    if at is None:
        at = Point(WATCH, 0, c.cfg.run, (), time.time())
    else:
        c.board.journal("resumed", None, phase=at.phase, attempt=at.k, run=at.run)
        if at.k > 0:  # the attempt a kill takes (its tag, its nodes), and a watch goes on
            use(c, swaps.layout_of(log.data["attempts"][-1], c.cfg) or c.cfg.nodes)
            c.board.new_attempt(at.k, at.run)
        asked = c.kill_requested()  # the user's kill, maybe half carried out: carried out
        if asked is not None:
            _await_peers(c, c.board.silence)
            why = user_kill(c.board, c.cfg, *asked)
            if at.phase != OVER or at.end is not None:
                log.end(ChainStatus.KILLED, why)
            return why
    if at.phase == OVER:
        if at.end is not None:
            log.end(at.end, at.why)
        return at.why
    if at.phase in (WATCH, DECIDE) and log.resumed:
        resume.seed(c.board, at.run)
    return _chain(c, log, at)


def _chain(c: Coordinator, log: ChainLog, at: Point) -> str:
    history, k, phase, delay = list(at.history), at.k, at.phase, at.left
    started = time.monotonic() - max(0.0, time.time() - at.started_at)
    out = _carried_out(c, at.record) if at.record is not None else None
    while True:
        if phase == WATCH:
            out, phase = c.watch_attempt(), DECIDE
        if phase == DECIDE:
            assert out is not None
            if out.kind is OutcomeKind.KILLED:
                log.end(ChainStatus.KILLED, out.why)
                return out.why
            end = attempt_end(k, c.board.run, out, c.board.progressed_since(started))
            history.append(end)
            held = log.ending(end, out.kind, *_said(out))  # quarantines before the placement
            d = _decision(c, history)
            p = swaps.placement(log.data, c.cfg, history, c.board.live_peers())
            stop = p.stop if d is not None and d.restart else None
            here, heir = p.main_here, None
            if stop is not None and here and p.main_why is not None:  # a spare succeeds it?
                heir = succession.candidate(log.data, c.cfg)
                if heir is not None:
                    main = p.layout[0]
                    stop = f"the main {main} {p.main_why}: {HANDED.format(heir=heir)}"
            if d is not None and d.restart and out.stopped is not None:
                stop, here, heir = f"{out.stopped}: {STOOD_DOWN}", True, None
            if d is not None and stop is not None:  # the main is not this coordinator's
                d = replace(d, restart=False, why=stop)
            c.notices.decided(out, end, d, k, held, stop)
            if d is None or not d.restart:
                why = d.why if d is not None else "restart is off"
                log.attempt_ended(why, None)
                gave_up = d is not None and d.gave_up
                main_here = stop is not None and here
                status = ChainStatus.GAVE_UP if gave_up else ChainStatus.ENDED
                log.end(status, why, main_here, handover=heir is not None)
                if heir is not None:
                    c.handover = dict(log.data)
                return f"{out.why}; {why}"
            log.attempt_ended(d.why, d.delay, p)
            phase, delay = BACKOFF, d.delay
        if phase == BACKOFF:
            if not _backoff(c, delay):
                log.end(ChainStatus.KILLED, "the user's kill in the backoff")
                return "killed by the user"
            k, phase = k + 1, START
        if phase == START:
            failed = relaunch(c, k, log)
            if failed is not None:
                log.end(ChainStatus.FAILED_RESTART, failed)
                c.notices.not_started(failed, k)
                return failed
            started, phase = time.monotonic(), WATCH


def _said(out: Outcome) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """What the judge decided on and the first failure, as chain.json keeps them."""
    t = out.trigger
    seen = {"node": t.node, "state": str(t.state), "why": t.why} if t is not None else None
    first = firstfail.plain(out.first) if out.first is not None else None
    return seen, first


def _decision(c: Coordinator, history: list[AttemptEnd]) -> Decision | None:
    return decide(c.cfg.restart, history) if c.cfg.restart is not None else None


def _carried_out(c: Coordinator, record: dict[str, Any]) -> Outcome:
    """The outcome of a decision a predecessor took for the current attempt: carried out
    (a teardown whose kill it did not finish is finished now), never taken again."""
    ranks = {n: i for i, n in enumerate(c.board.layout)}
    first = firstfail.read(record.get("first"), ranks)  # as the predecessor named it
    if "ended" in record:
        states = record.get("ended")
        known = {s.value: s for s in NodeState}
        verdicts = {
            n: Verdict(known[s], "")
            for n, s in (states.items() if isinstance(states, dict) else ())
            if n in c.cfg.members and s in known
        }
        return Outcome(OutcomeKind.ENDED, "the job ended", None, {}, verdicts, first=first)
    node, state, why = record.get("node"), record.get("state"), str(record.get("why"))[:300]
    if record.get("decided_by") != "coordinator" or node not in c.cfg.members:
        return Outcome(OutcomeKind.KILLED, why)  # the user's stop
    try:
        trigger = NodeTrigger(str(node), NodeState(state), why, "kill_all")
    except ValueError:
        return Outcome(OutcomeKind.KILLED, why)
    if "ended_at" not in record:
        finish(c.board, c.cfg, record)
    codes = record.get("exit_codes")
    codes = tuple(x for x in codes if type(x) is int) if isinstance(codes, list) else ()
    said = f"torn down: {node} {state}: {why}"
    return Outcome(OutcomeKind.TEARDOWN, said, trigger, codes=codes, first=first)


def _await_peers(c: Coordinator, within: float) -> None:
    """The attempt's sentinels, back within `within` s at most: a coordinator started
    again is alone at first (they reconnect within RECONNECT_MAX), and a kill asked of
    no sentinel would say each node's ranks "may still run" while they would have been
    killed; the main's ranks the kill takes itself if its sentinel does not come."""
    end = time.monotonic() + within
    while not set(c.board.layout) <= set(c.board.live_peers()):
        c.board.pulse()
        left = end - time.monotonic()
        if left <= 0:
            return
        c.done.wait(min(0.05, left))


def _backoff(c: Coordinator, delay: float) -> bool:
    """Waits `delay`; False when the user's kill came meanwhile (it is carried out)."""
    end = time.monotonic() + delay
    while time.monotonic() < end:
        c.board.pulse()
        asked = c.kill_requested()
        if asked is not None:
            user_kill(c.board, c.cfg, *asked)
            return False
        c.done.wait(min(0.25, max(0.0, end - time.monotonic())))
    return True
