"""The coordinator's straggler and slow-node watch: the manager's sampler and its
step-rate rule, judged on the main node from what the sentinels send.

Why here: with `watch.where: cluster` the manager may be away; a rank that holds the
job (it never waits while the others wait for it) or a node whose steps lag the others
must still be named, and, with `watch.on_slow: kill_all`, the job taken down. The
sentinels send each rank's round of verdicts (spysample.py's `waits` frames, checked
strictly here and counted as malformed otherwise); this module places them on its own
clock (the round ended when its frame came, and took what it says), judges with the
one rule over time (waitline.py) whenever every rank has been sampled further, keeps
the finding where `status` and `report` read it (`coord/straggler.json`, the manager's
`straggler.json` in its `finding`), journals each rank named once, and hands the
coordinator a kill trigger when `on_slow` asks for one. The evidence names the job's
step time since the onset and before it, from the steps the sentinels read in their
logs. The step rates are judged with the manager's rule too (slowrate.py): a slow node
is journaled, never a kill (as the manager's watchdog).
"""

from __future__ import annotations

import statistics
import threading
import time
import traceback
from bisect import bisect_left
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mntui.sessions.node.rules.judging import NodeTrigger
from mntui.sessions.node.rules.slowrate import SlowEpisodes
from mntui.sessions.node.rules.states import NodeState
from mntui.sessions.node.rules.straggle import Suspect, finding_json
from mntui.sessions.node.rules.waitline import HISTORY, Timeline, judge
from mntui.sessions.node.sentinel.spysample import KIND, Malformed, from_wire

if TYPE_CHECKING:
    from mntui.sessions.node.board.coordstate import Board
    from mntui.sessions.node.notice.notifysend import Outbox
    from mntui.sessions.node.wire.watchcfg import WatchConfig

FILE = "straggler.json"  # in the coordinator's dir (coord/), read by the manager's board
KILL_ALL = "kill_all"
BEFORE = 30.0  # seconds before the onset whose steps say what a step took then
MIN_STEP_SPAN = 2.0  # seconds of steps a step time rests on, at least
ADVANCE = 2.0  # seconds every rank must have been sampled further for a new judgement


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
            self.pending: list[tuple[str, float, float, list[tuple[int, str]]]] = []
        self.line = Timeline()
        self.judged: float | None = None  # the moment every rank was sampled up to, judged
        self.suspect: Suspect | None = None
        self.told: set[int] = set()
        self.stepped: list[tuple[float, int]] = []  # (monotonic, the job's step) as it rose

    def heard(self, node: str, msg: dict[str, Any], now: float | None = None) -> bool:
        """True when `msg` was a sentinel's `waits` frame (taken, or counted malformed);
        the board hears every other kind. The round ended now (monotonic), on this clock."""
        if msg.get("k") != KIND:
            return False
        now = time.monotonic() if now is None else now
        try:
            took, pairs = from_wire(msg.get("ranks"), msg.get("took"))
        except Malformed:
            with self.board.lock:  # the board's count of malformed frames, in status.json
                self.board.malformed += 1
            with self.lock:
                self.malformed += 1
            return True
        with self.lock:
            if msg.get("run") == self.run == self.board.run:  # not an attempt before
                self.pending.append((node, now - took, now, pairs))
        return True

    def judge(self, now: float) -> list[NodeTrigger]:
        """After each judgement of the job: the step rates, then the rounds that came
        since the last one; a kill trigger when a rank is newly named and `on_slow` is
        kill_all. A bug here never ends the coordinator's watch."""
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
            pending, self.pending = self.pending, []
        for node, start, end, pairs in pending:
            for rank, bits in pairs:
                self.line.add(rank, node, start, end, bits)
        self.line.prune(now)
        reached = self.line.end(self.line.live())
        if not pending or reached is None or reached < (self.judged or 0.0) + ADVANCE:
            return []  # nothing new, or a node's round of this moment is on its way
        self.judged = reached
        found = self._round(now)
        if found is None or self.cfg.on_slow != KILL_ALL:
            return []
        return [NodeTrigger(found.node, NodeState.RUNNING, f"straggler: {found.line}", KILL_ALL)]

    def _round(self, now: float) -> Suspect | None:
        """The rule judged on every rank's samples so far; the finding written; a rank
        named for the first time (journaled once per rank and attempt: one that comes
        and goes is no spam)."""
        self.line.rounds += 1
        found = judge(self.line, now, time.time(), self.stepped)
        if found is None:
            self.suspect = None
        elif self.suspect is None or self.suspect.rank != found.rank:
            self.suspect = self._evidence(found, now)
        else:  # the same rank still: named when first named, on today's shares
            self.suspect = replace(self.suspect, ranks=found.ranks)
        ranks = self.suspect.ranks if self.suspect is not None else self.line.shown()
        finding = finding_json(self.suspect, ranks, self.line.rounds, self.malformed)
        self.board.write(FILE, {"v": 1, "run": self.run, "finding": finding})
        if self.suspect is None or self.suspect.rank in self.told:
            return None
        found = self.suspect
        self.told.add(found.rank)
        self.board.journal("straggler", found.node, rank=found.rank, line=found.line,
                           action=self.cfg.on_slow, since=found.since)  # fmt: skip
        if self.notices is not None:
            self.notices.slow(f"straggler: {found.line}")
        return found

    def _evidence(self, s: Suspect, now: float) -> Suspect:
        """The job's step time since the onset, and before it, from its steps."""
        if s.since is None:
            return s
        onset = now - (time.time() - s.since)
        return replace(s, step=self._step_time(onset, now),
                       step_before=self._step_time(onset - BEFORE, onset))  # fmt: skip

    def _step_time(self, a: float, b: float) -> float | None:
        """Seconds a step between `a` and `b` (monotonic), from the steps seen nearest to
        each; None without two distinct steps there."""
        seen = self.stepped
        i, j = bisect_left(seen, (a,)), bisect_left(seen, (b,))
        if i >= len(seen) or j == 0:
            return None
        (t0, s0), (t1, s1) = seen[i], seen[j - 1]
        return (t1 - t0) / (s1 - s0) if s1 > s0 and t1 - t0 >= MIN_STEP_SPAN else None

    def _rates(self, now: float) -> None:
        """The manager's `flag_slow`: a node below `slow_fraction` of the median step rate
        for `slow_after`, journaled (a notice, never a kill)."""
        with self.board.lock:
            rates = {n: rate for n, (_, rate) in self.board.steps.items()}
            steps = [st for st, _ in self.board.steps.values() if st is not None]
        if steps and (not self.stepped or max(steps) > self.stepped[-1][1]):
            self.stepped.append((now, max(steps)))  # the job's step, as it rose
            while self.stepped[0][0] < now - HISTORY - BEFORE:
                self.stepped.pop(0)
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
