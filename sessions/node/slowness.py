"""The coordinator's straggler and slow-node watch: the manager's sampler and its
step-rate rule, judged on the main node from what the sentinels send.

Why here: with `watch.where: cluster` the manager may be away; a rank that holds the
job (it never waits while the others wait for it) or a node whose steps lag the others
must still be named, and, with `watch.on_slow: kill_all`, the job taken down. The
sentinels send one boolean per rank per sample (spysample.py's `waits` frames, checked
strictly here and counted as malformed otherwise); this module tallies them by rank
and judges with the one rule (straggle.py) after each round (a sample of every rank seen
so far, or what came within `sample_every`: the sentinels sample on clocks of their
own), keeps the finding where `status` and `report` read it
(`coord/straggler.json`, the manager's `straggler.json` in its `finding`), journals
each rank named once, and hands the coordinator a kill trigger when `on_slow` asks for
one. The step rates the sentinels already send are judged with the manager's rule too
(slowrate.py): a slow node is journaled, never a kill (as the manager's watchdog).
"""

from __future__ import annotations

import statistics
import threading
import time
import traceback
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .judging import NodeTrigger
from .rules import NodeState
from .slowrate import SlowEpisodes
from .spysample import KIND, Malformed, from_wire
from .straggle import Sample, Suspect, Tally, finding_json, name_suspect

if TYPE_CHECKING:
    from .coordstate import Board
    from .notifysend import Outbox
    from .watchcfg import WatchConfig

FILE = "straggler.json"  # in the coordinator's dir (coord/), read by the manager's board
KILL_ALL = "kill_all"


class SlowWatch:
    notices: Outbox | None = None  # the coordinator's: a slow node is notified (notifysend.py)

    def __init__(self, cfg: WatchConfig, board: Board) -> None:
        self.cfg, self.board = cfg, board
        self.lock = threading.Lock()  # `heard` on the peers' threads, `judge` on the loop's
        self.malformed = 0
        self.episodes = SlowEpisodes()
        self._new_attempt(board.run)

    def _new_attempt(self, run: str) -> None:
        """Samples of the attempt before are no evidence about this one."""
        with self.lock:
            self.run = run
            self.pending: dict[int, tuple[str, bool]] = {}
        self.tally = Tally()
        self.opened: float | None = None  # monotonic: when the round under way got a sample
        self.first: float | None = None  # monotonic: the first round with samples
        self.suspect: Suspect | None = None
        self.told: set[int] = set()

    def heard(self, node: str, msg: dict[str, Any]) -> bool:
        """True when `msg` was a sentinel's `waits` frame (taken, or counted malformed);
        the board hears every other kind."""
        if msg.get("k") != KIND:
            return False
        try:
            pairs = from_wire(msg.get("ranks"))
        except Malformed:
            with self.board.lock:  # the board's count of malformed frames, in status.json
                self.board.malformed += 1
            with self.lock:
                self.malformed += 1
            return True
        with self.lock:
            if msg.get("run") == self.run == self.board.run:  # not an attempt before
                for rank, waiting in pairs:
                    self.pending[rank] = (node, waiting)
        return True

    def judge(self, now: float) -> list[NodeTrigger]:
        """After each judgement of the job: the step rates, then the round of samples
        that came since the last one; a kill trigger when a rank is newly named and
        `on_slow` is kill_all. A bug here never ends the coordinator's watch."""
        try:
            return self._judge(now)
        except Exception:
            traceback.print_exc()
            return []

    def _judge(self, now: float) -> list[NodeTrigger]:
        if self.board.run != self.run:
            self._new_attempt(self.board.run)
        self._rates(now)
        with self.lock:
            if not self.pending:
                return []
            self.opened = now if self.opened is None else self.opened
            every_rank = set(self.pending) >= set(self.tally.seen)
            if not every_rank and now - self.opened < self.cfg.sample_every:
                return []  # the other nodes' samples of this round are on their way
            pending, self.pending, self.opened = self.pending, {}, None
        found = self._round([Sample(r, n, w) for r, (n, w) in sorted(pending.items())], now)
        if found is None or self.cfg.on_slow != KILL_ALL:
            return []
        return [NodeTrigger(found.node, NodeState.RUNNING, f"straggler: {found.line}", KILL_ALL)]

    def _round(self, samples: list[Sample], now: float) -> Suspect | None:
        """One round into the tally; the finding written; a rank named for the first time
        (journaled once per rank and attempt: one that comes and goes is no spam)."""
        if self.first is None:
            self.first = now
        self.tally.add(samples)
        ranks = self.tally.ranks()
        found = name_suspect(ranks, now - self.first, time.time())
        if found is None or self.suspect is None or self.suspect.rank != found.rank:
            self.suspect = found
        else:  # the same rank still: named when first named, on today's evidence
            self.suspect = replace(self.suspect, ranks=found.ranks)
        finding = finding_json(self.suspect, ranks, self.tally.rounds, self.malformed)
        self.board.write(FILE, {"v": 1, "run": self.run, "finding": finding})
        if found is None or found.rank in self.told:
            return None
        self.told.add(found.rank)
        self.board.journal("straggler", found.node, rank=found.rank, line=found.line,
                           action=self.cfg.on_slow)  # fmt: skip
        if self.notices is not None:
            self.notices.slow(f"straggler: {found.line}")
        return found

    def _rates(self, now: float) -> None:
        """The manager's `flag_slow`: a node below `slow_fraction` of the median step rate
        for `slow_after`, journaled (a notice, never a kill)."""
        with self.board.lock:
            rates = {n: rate for n, (_, rate) in self.board.steps.items()}
        cfg = self.cfg
        for node in self.episodes.see(rates, now, cfg.slow_fraction, cfg.slow_after):
            rate = rates.get(node)
            median = statistics.median(r for r in rates.values() if r is not None)
            layout = list(self.board.layout)  # one reference, swapped whole by chain.py
            where = f" (node rank {layout.index(node)})" if node in layout else ""
            line = (
                f"{node} is slow{where}: below {cfg.slow_fraction:g}x the median step rate for "
                f"{cfg.slow_after:g}s ({rate or 0.0:.2f} steps/s, the median {median:.2f})"
            )
            self.board.journal("slow", node, line=line)
            if self.notices is not None:
                self.notices.slow(line)
