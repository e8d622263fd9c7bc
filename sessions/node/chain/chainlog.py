"""`coord/chain.json`, as the coordinator's chain (chain.py) writes it at every step.

Why a file, rewritten whole (atomic) at each step: the manager reads it on its next
contact and writes a run record for each attempt (watch/clusterchain.py), and a
coordinator started again reads it to go on where its predecessor was (resume.py).
Each attempt's entry has its run, its nodes (by rank, the main first: swaps.py), its
end and what the restart policy said, the next attempt's nodes when a spare is swapped
in; the chain has its status and the nodes it quarantined.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mntui.sessions.node.board.coordstate import Board
from mntui.sessions.node.rules.chainstates import ChainStatus, OutcomeKind
from mntui.sessions.node.rules.placing import Placement
from mntui.sessions.node.rules.restarts import AttemptEnd
from mntui.sessions.node.wire.epochs import number_of
from mntui.sessions.node.wire.watchcfg import WatchConfig

from . import swaps


class ChainLog:
    """`coord/chain.json`: every attempt, how it ended, what the policy said."""

    def __init__(
        self,
        board: Board,
        cfg: WatchConfig,
        saved: dict[str, Any] | None = None,
        shared: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """`saved`: the chain.json a predecessor wrote (resume.py), carried on;
        `shared`: told each write (chaincopy.Replica: every sentinel gets a copy)."""
        self.board, self.cfg, self.shared = board, cfg, shared
        self.resumed = saved is not None
        first = {"attempt": 0, "run": cfg.run, "started_at": time.time(), "nodes": list(cfg.nodes)}
        self.data: dict[str, Any] = saved or {
            "chain": cfg.run,
            "status": ChainStatus.RUNNING.value,
            "attempts": [first],
            "epoch": cfg.epoch,  # who leads it (epochs.py), for the copies and the manager
            "main": cfg.main,
            "rev": 0,  # the writes, counted: the newest copy is the one a successor takes
        }
        if saved is None:
            self._write()
        else:
            if swaps.mend(self.data):  # a predecessor's file is node data: once, and on
                with board.lock:
                    board.malformed += 1
                board.journal("malformed", None, file="chain.json", key=swaps.QUARANTINED)
            if self.shared is not None:
                self.shared(self.data)

    def _write(self) -> None:
        self.data["rev"] = (number_of(self.data.get("rev", 0)) or 0) + 1
        self.board.write("chain.json", self.data)
        if self.shared is not None:
            self.shared(self.data)

    def ending(
        self,
        end: AttemptEnd,
        kind: OutcomeKind,
        seen: dict[str, Any] | None = None,
        first: dict[str, Any] | None = None,
    ) -> list[tuple[str, str]]:
        """How the current attempt ended (written with the decision, attempt_ended), and
        the quarantines it brought: each (node, line), for the caller to notify. `kind`:
        teardown (the coordinator decided it) or ended (by itself); `seen`: what the
        judge decided on (node, state, why, when), `first`: the first failure
        (firstfail.plain). Each attempt's entry says it all: its report is built from
        it, whenever this machine next looks, however many attempts came since."""
        last, now = self.data["attempts"][-1], time.time()
        last.update(end=end.plain(), ended_at=now, kind=kind.value)
        if kind is OutcomeKind.TEARDOWN and self.board.decided_at is not None:
            last["decided_at"] = self.board.decided_at  # a user's kill after it is too late
        if seen is not None:
            last["seen"] = seen
        if first is not None:
            last["first"] = first
        last["steps"] = dict(self.board.clock)  # the ledger's training time
        held = swaps.quarantine(self.data, self.cfg, now)
        for _, said in held:
            self.board.journal("quarantine", None, why=said)
        return held

    def attempt_ended(self, why: str, delay: float | None, at: Placement | None = None) -> None:
        """What the policy said of the attempt `ending` recorded; `at`: where the next
        attempt runs, when there is one."""
        last = self.data["attempts"][-1]
        last.update(restart=why, delay=delay)
        if at is not None:
            last.update(next_nodes=list(at.layout), swapped=list(at.said))
            for said in at.said:
                self.board.journal("swap", None, why=said)
        self.data["status"] = (
            ChainStatus.BACKOFF if delay is not None else ChainStatus.ENDED
        ).value
        self.board.journal("restart" if delay is not None else "chain", None, why=why)
        self._write()

    def starting(self, k: int, run: str) -> tuple[str, ...]:
        """Attempt `k` in the chain; its nodes, as the attempt before placed it."""
        attempts = self.data["attempts"]
        if attempts[-1].get("attempt") == k:  # started again after a respawn: one entry
            attempts.pop()
        nodes = swaps.next_layout(attempts, self.cfg)
        entry = {"attempt": k, "run": run, "started_at": time.time(), "nodes": list(nodes)}
        attempts.append(entry)
        self.data["status"] = ChainStatus.STARTING.value
        self.board.journal("attempt", None, attempt=k, run=run, nodes=list(nodes))
        self._write()
        return nodes

    def running(self, k: int) -> None:
        self.data["status"] = ChainStatus.RUNNING.value
        self._write()

    def end(
        self, status: ChainStatus, why: str, main_here: bool = False, handover: bool = False
    ) -> None:
        """`main_here`: the chain ends here for its main must be replaced (this machine
        reads the board of a successor then: launch/mainmoved.py, on this flag, never on
        the words of `why`); `handover`: the spare that succeeds it goes on with it
        (succession.py acts on this flag)."""
        self.data.update(status=status.value, why=why, ended_at=time.time())
        if main_here:
            self.data["main_here"] = True
        if handover:
            self.data["handover"] = True
        self.data["attempts"][-1].setdefault("steps", dict(self.board.clock))
        self._write()
