"""The coordinator: the job's watchdog, on the main node, fed by the sentinels (its port:
coordport.py).

Why here: the main node is where the job lives or dies (its master port, rank 0); a
watch there cannot lose contact with the job while the job goes on, unlike one on the
user's laptop. It judges with the same judge as the manager's watchdog
(`judging.Judge`), from facts the sentinels sample on their own nodes, and a node's
silence counts only from the coordinator's side. On a decision it tells every sentinel
to kill its node's part at once (the main's ranks it kills itself when the main's
sentinel cannot), writes the decision on the main node for the manager to read when it
next connects, and then restarts the job as the restart policy says (chain.py) or
stops the sentinels and exits. It and the main's sentinel keep each other up
(respawn.py): a coordinator that dies is started again by that sentinel and goes on
from its files (resume.py); it starts that sentinel again when it dies. On a spare
that succeeds a lost main it first counts the workers' words (successor.py), then
leads the next epoch; a coordinator that learns of a later epoch, or wakes from a stop
its workers took for its loss, stands down and restarts nothing.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any

from mntui.sessions.node.board.coordstate import Board
from mntui.sessions.node.board.teardown import blame, kill_everywhere, teardown, user_kill
from mntui.sessions.node.chain.chain import Outcome, exit_codes, run_chain
from mntui.sessions.node.files.plainfile import NotPlain, plain
from mntui.sessions.node.notice.notifysend import Outbox
from mntui.sessions.node.proc import daemon, respawn
from mntui.sessions.node.rules import firstfail
from mntui.sessions.node.rules.chainstates import OutcomeKind
from mntui.sessions.node.rules.judging import Judge, NodeTrigger
from mntui.sessions.node.rules.states import NodeState
from mntui.sessions.node.wire import chaincopy
from mntui.sessions.node.wire.facts import Facts
from mntui.sessions.node.wire.watchcfg import WatchConfig, grace_of, load_for

from . import coordport, feedserve, successor
from .slowness import SlowWatch

TICK = 0.25
BACK = 2.0  # silences (coordstate.Board.silence) for every node to speak after our own stop
STUCK = 2.0  # heartbeats: the chain's thread silent this long sends none (`beat`)
COALESCE = 0.1  # seconds: the least time between two judgements of the whole job
KILL_POLL = 0.02  # seconds: how often the coalescing looks for the user's kill request


class Coordinator:
    def __init__(self, cfg: WatchConfig, secret: bytes, run_dir: str, sock: socket.socket):
        self.cfg, self.secret, self.sock, self.dir = cfg, secret, sock, run_dir
        self.board = Board(cfg, os.path.join(run_dir, "coord"))
        self.slow = SlowWatch(cfg, self.board)  # stragglers and slow nodes
        self.feed = feedserve.Feed(self.board)  # the nodes' logs, to the app's stream
        self.wake = threading.Event()
        self.done = threading.Event()
        self.shaking = threading.BoundedSemaphore(2 * len(cfg.nodes) + 8)
        self.leaving = threading.Event()  # the chain is over: the main's sentinel may go
        self.keeper: respawn.Keeper | None = None  # keeps the main's sentinel up
        self.odd_kill = False  # coord/kill was found no regular file (journaled once)
        most = cfg.restart.max if cfg.restart is not None else 0
        self.notices = Outbox(cfg.notify, cfg.job, most, self.board)  # sent from here
        self.slow.notices = self.notices
        self.replica = chaincopy.Replica(self.board.live_peers, self.done)  # chain.json, shared
        self.heir: successor.Heir | None = None  # a successor not elected yet: what it takes over
        self.copies: dict[str, dict[str, Any]] = {}  # the voters' copies of the chain
        self.superseded: str | None = None  # a sentinel follows a later epoch: why
        self.handover: dict[str, Any] | None = None  # the chain handed to a successor

    def accept(self) -> None:
        """The port's connections, until the chain is over (coordport.py)."""
        coordport.accept(self)

    def kill_requested(self) -> tuple[float, str | None] | None:
        """The user's kill, as the manager asked it: the file `coord/kill` (written over
        SSH by the node's own user: the request is as authenticated as the account);
        its grace and id, or None when there is no request."""
        path = os.path.join(self.board.out, "kill")
        try:
            with open(path, encoding="utf-8", opener=plain) as f:
                data = json.loads(f.read(4096))
        except FileNotFoundError:
            return None
        except NotPlain as exc:  # a FIFO, a symlink: not the manager's (it writes a file)
            if not self.odd_kill:
                self.odd_kill = True
                self.board.journal("kill-ignored", None, why=f"coord/kill: {exc.strerror}")
            return None
        except (OSError, ValueError):
            return self.cfg.grace, None
        if not isinstance(data, dict):
            return self.cfg.grace, None
        g, rid = grace_of(data.get("grace")), data.get("id")
        return (self.cfg.grace if g is None else g), (rid if isinstance(rid, str) else None)

    def _coalesce(self, judged: float) -> tuple[float, str | None] | None:
        """Waits out COALESCE since the last judgement, looking for the user's kill every
        KILL_POLL meanwhile (a file's open a look): a `mntui kill` is taken at once, not
        up to COALESCE later (the kill's target: 1.5 s at 64 nodes)."""
        while True:
            self.board.pulse()
            request = self.kill_requested()
            left = judged + COALESCE - time.monotonic()
            if request is not None or left <= 0:
                return request
            time.sleep(min(KILL_POLL, left))

    def beat(self) -> None:
        """Heartbeats to every sentinel, whatever the chain is doing (a backoff, a
        relaunch), while the chain's thread works: each of its loops pulses
        (coordpeers.py). One stuck (a hung filesystem under its files) lets the
        sentinels call the coordinator lost after `unreachable_after`, as a dead one;
        its heartbeats went on before, and the job ran on unwatched (issue 39)."""
        hb = self.cfg.heartbeat
        stuck = False
        while not self.done.wait(hb):
            idle = time.monotonic() - self.board.pulsed
            if idle <= STUCK * hb:
                self.board.send_all("hb")
            elif not stuck:  # once an episode; the journal is a file, maybe the hung one
                print(
                    f"coordinator: the chain's thread stuck {idle:.1f} s: no heartbeats", flush=True
                )
            stuck = idle > STUCK * hb

    def watch_attempt(self) -> Outcome:
        """Judges the current attempt until it ends, is torn down or the user kills it."""
        judge = Judge(self.cfg.rules)
        judged = 0.0
        while True:
            self.wake.wait(TICK)
            # frames wake the judge, at most every COALESCE: each of N sentinels sends
            # ~2 a second while training, and judging all N on each was N² work
            request = self._coalesce(judged)
            self.wake.clear()
            now = time.monotonic()
            if judged and now - judged > max(2 * self.cfg.heartbeat, TICK + 1.0):
                self.board.resumed(now, now - judged)  # we slept, not the sentinels
            judged = now
            if request is not None:
                return Outcome(OutcomeKind.KILLED, user_kill(self.board, self.cfg, *request))
            if self.superseded is not None:  # another leads the chain: this one stands down
                facts, _ = self.board.facts(now)
                why = f"superseded: {self.superseded}"
                return self._stand_down(facts, why, f"the main {self.cfg.main} was {why}")
            if judge.learn(self.board.pace()):  # `stall_after: auto`, as the manager learns it
                self.board.journal("stall-threshold", None, seconds=round(judge.stall_after, 1))
            facts, asked = self.board.facts(now)
            verdicts, triggers = judge.judge(facts, now, asked)
            triggers = [*triggers, *self.slow.judge(now)]  # on_slow: kill_all
            self.board.saw(verdicts)
            for d in judge.deadlines(facts, verdicts, now):
                if d.at <= now:
                    self.board.poke(d.node, now)
            if self.board.stopped is not None:  # a long stop of ours: is every node back?
                out = self._after_stop(now, facts)
                if out is not None:
                    return out
                if self.board.stopped is not None:  # not yet: nobody is judged meanwhile
                    self.board.publish(verdicts, now)
                    continue
            kills = [t for t in triggers if t.action != "notify"]
            for t in triggers:
                if t.action == "notify":
                    self.board.journal("notify", t.node, state=str(t.state), why=t.why)
            if kills:
                why, first = teardown(self.board, kills[0], self.cfg, exit_codes(facts))
                return Outcome(OutcomeKind.TEARDOWN, why, kills[0], facts, first=first)
            if self.board.complete(facts) and not may_run(verdicts):
                return self._ended(facts, verdicts)
            self.board.journal_steps(now)
            self.board.publish(verdicts, now)

    def _ended(self, facts: dict[str, Any], verdicts: dict[str, Any]) -> Outcome:
        """The attempt ended by itself: what is left is the dead panes (remain-on-exit)
        and any straggler; a failed one's first failure is named from the closing's
        reports, as a teardown's is."""
        kill = kill_everywhere(self.board, self.cfg, "the job ended: closing its sessions", 0.0)
        failed = any(v.state is NodeState.FAILED for v in verdicts.values())
        first = blame(self.board, kill, None) if failed else None
        self.board.ended(verdicts, firstfail.plain(first) if first is not None else None)
        return Outcome(OutcomeKind.ENDED, "the job ended", None, facts, verdicts, first=first)

    def _after_stop(self, now: float, facts: dict[str, Facts]) -> Outcome | None:
        """After this coordinator's own stop, long enough for its sentinels to call it
        lost (a frozen main, a suspended VM): they may have torn their nodes down and
        left. Their silence is not theirs to blame, and no restart starts on a main whose
        workers are gone (issue 39: the woken coordinator blamed node1 for its own
        freeze and started the next attempt's rank 0 on itself). None while every node
        may still come back (BACK silences from the wake) or once all did; then the
        attempt ends, the main named (it was stopped), and nothing restarts from here
        (chain.py: the outcome's `stopped`)."""
        away = self.board.away()
        if away is None or self.board.stopped is None:
            return None
        woke, gap = self.board.stopped
        if now - woke < BACK * self.board.silence:
            return None
        most = self.cfg.rules.unreachable_after
        took = f"stopped {gap:.0f} s, past unreachable_after ({most:g} s)"
        gone = f"{', '.join(away)} did not come back (a sentinel that hears nothing leaves)"
        main = self.board.layout[0]
        why = f"its coordinator was {took}: {gone}"
        return self._stand_down(facts, why, f"the main {main}'s coordinator was {took}: {gone}")

    def _stand_down(self, facts: dict[str, Facts], why: str, stopped: str) -> Outcome:
        """The attempt ends here, the main named (its coordinator lost its nodes), and
        the chain with it: nothing restarts from this coordinator (chain.py: the
        outcome's `stopped`). Its workers, gone, gave their word to a successor, which
        leads the chain if every one of them did (successor.py)."""
        main = self.board.layout[0]
        t = NodeTrigger(main, NodeState.UNREACHABLE, why, "kill_all")
        done, first = teardown(self.board, t, self.cfg, exit_codes(facts))
        self.board.journal("stood-down", main, why=why)
        print(f"coordinator: stands down: {stopped}", flush=True)
        return Outcome(OutcomeKind.TEARDOWN, done, t, facts, first=first, stopped=stopped)

    def guard(self) -> None:
        """The main's sentinel, started again when it died (not once the chain is over:
        then the sentinels are told to stop, and leave)."""
        while not self.done.wait(TICK):
            if self.keeper is not None and not self.leaving.is_set():
                self.keeper.check()

    def run(self) -> str | None:
        """The chain: watch an attempt, then restart it as the policy says; returns
        how the chain ended, or None when this coordinator failed (a bug): the main's
        sentinel starts another, which goes on from the files (resume.py)."""
        threading.Thread(target=self.beat, daemon=True).start()
        threading.Thread(target=self.guard, daemon=True).start()
        threading.Thread(target=self.replica.run, daemon=True).start()
        try:
            why = successor.elect(self) if self.heir is not None else None
            if why is None:
                why = run_chain(self)
        except Exception:
            traceback.print_exc()
            self.done.set()
            return None
        self.leaving.set()
        respawn.goodbye(self.dir, "coord", why)  # before the stop: nobody starts us again
        if self.handover is None:
            self.board.send_all("stop", why="the chain ended")
        self.done.set()  # the accepting ends: the port is let go before the webhook's wait
        coordport.unlisten(self.sock)
        if self.handover is not None:  # the port free first: the successor listens on it
            self.board.send_all("handoff", why=why[:300], data=self.handover)
        self.notices.close()  # what it could not send by then: the manager's
        return why


def may_run(verdicts: dict[str, Any]) -> bool:
    from mntui.sessions.node.rules.states import may_still_run

    return may_still_run(v.state for v in verdicts.values())


def main(argv: list[str]) -> int:
    """`coord RUN_DIR`: start the run's coordinator on the main node, detached."""
    loaded = load_for(argv, "coordinator")
    if isinstance(loaded, int):
        return loaded
    run_dir, cfg, secret = loaded
    cfg, heir = successor.pending(run_dir, cfg)  # a spare that succeeds a lost main
    if not cfg.is_main:
        print(f"coordinator: {cfg.node} does not lead the chain (its main is {cfg.main})",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        sock = coordport.listen(cfg.coord_port)
    except OSError as exc:
        print(f"coordinator: port {cfg.coord_port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    log, pid = os.path.join(run_dir, "coord.log"), os.path.join(run_dir, "coord.pid")
    bundle = respawn.bundle_argv()  # before the daemon leaves the shell's directory
    ready = daemon.daemonize(log, pid, label="COORD")
    c = Coordinator(cfg, secret, run_dir, sock)
    c.heir = heir
    if cfg.node == cfg.nodes[0]:  # elsewhere the node's guard keeps its sentinel (guard.py)
        c.keeper = respawn.Keeper(run_dir, cfg.node, cfg.tag, "sentinel", bundle)
    signal.signal(signal.SIGTERM, lambda *_: _leave(run_dir, "SIGTERM (a kill by tag)"))
    threading.Thread(target=c.accept, daemon=True).start()
    ready(f"coordinator :{cfg.coord_port}")
    why = c.run()
    sock.close()
    if why is None:
        print("coordinator: crashed: the main's sentinel starts another", flush=True)
        return 1
    print(f"coordinator: exits: {why}", flush=True)
    return 0


def _leave(run_dir: str, why: str) -> None:
    """A SIGTERM is a kill by tag (`mntui kill`): leave, and say so first, so the main's
    sentinel does not start this coordinator again under the kill's sweep."""
    respawn.goodbye(run_dir, "coord", why)
    print(f"coordinator: exits: {why}", flush=True)
    os._exit(0)
