"""The coordinator's board: what each sentinel last said, what the judge reads of it,
and the attempt's clock (its steps, pace and GPUs).

Why one object: the judge, the chain, the teardown and the straggler rule read the same
words under one lock. Its two other sides are parts of their own, mixed in: the live
channels to the sentinels (coordpeers.py) and the files the manager reads later
(coordfiles.py); a snap is checked before any of it is kept (snapwire.py).
"""

from __future__ import annotations

import os
import queue
import statistics
import threading
import time
from typing import Any

from mntui.sessions.node.rules import gpucount
from mntui.sessions.node.rules.steps import Pace
from mntui.sessions.node.wire import gpuwire, snapwire
from mntui.sessions.node.wire.facts import Facts, silent
from mntui.sessions.node.wire.snapwire import Word
from mntui.sessions.node.wire.watchcfg import WatchConfig

from .coordfiles import BoardFiles
from .coordpeers import Peer, PeerTable

__all__ = ["Board", "Peer", "Word"]


class Board(PeerTable, BoardFiles):
    def __init__(self, cfg: WatchConfig, out: str) -> None:
        self.cfg, self.out = cfg, out
        os.makedirs(out, mode=0o700, exist_ok=True)
        self.lock = threading.Lock()
        self.peers: dict[str, Peer] = {}
        self.words: dict[str, Word] = {}
        self.start, self.start_wall = time.monotonic(), time.time()
        self.refusals: dict[str, int] = {}
        self.last_refused: str | None = None
        self.malformed = 0
        self.states: dict[str, tuple[str, str]] = {}
        self.poked: dict[str, float] = {}
        self.sentinel_pids: dict[str, int] = {}
        self.last_frame: dict[str, float] = {}
        self.pulsed = time.monotonic()
        self.main = cfg.main  # the epoch's (epochs.py): a successor's own node
        self.published = 0.0
        self.silence = max(2 * cfg.heartbeat, 1.0)
        self.resumed_at = 0.0  # monotonic: when this process last woke from a stop of its own
        self.stopped: tuple[float, float] | None = None  # (woke, seconds) of a long one: `away`
        self._replies: dict[str, queue.Queue[dict[str, Any]]] = {}
        self.write_errors = 0  # the main's disk full: counted, never the end of the watch
        self.attempt, self.run = 0, cfg.run
        self.last_step_at = 0.0  # monotonic: when a node's step last advanced
        self.clock: dict[str, Any] = {}  # the attempt's steps, as the ledger's `steps` note
        self.paces: dict[str, Pace] = {}  # each node's step interval and longest pause
        self.steps: dict[str, tuple[int | None, float | None]] = {}
        self.steps_at = 0.0
        self.gpus: dict[str, gpuwire.GpuText] = {}  # each node's last GPU reading
        self.gpus_changed = False  # since coord/gpus.json was last written
        self.nodes: dict[str, str] = {}  # each node's last snapshot, as JSON (nodewire.py)
        self.nodes_changed = False  # since coord/nodes.json was last written
        self.layout = cfg.nodes  # the attempt's node of each rank (chain.py swaps a spare in)
        self.problem_at: dict[str, float] = {}  # when the judge first saw each node in trouble
        self.verdicts: dict[str, Any] = {}  # the judge's last, for a status written after it
        self.first: dict[str, Any] | None = None  # the attempt's first failure, once named
        self.decided_at: float | None = None  # the attempt's teardown decided (teardown.py)

    # -- what the sentinels say -----------------------------------------------
    def heard(self, peer: Peer, msg: dict[str, Any]) -> None:
        self.heard_from(peer.node)  # a snap at least every heartbeat: its link lives
        if msg["k"] == "done":
            self.replies(peer.node).put(msg)
            return
        if msg["k"] != "snap":
            return
        snap = snapwire.parse(msg)
        if snap is None:
            with self.lock:
                self.malformed += 1
            return
        now = time.monotonic()
        with self.lock:
            if snap.run != self.run or peer.node not in self.layout:
                return  # of an attempt before this one, or of no node of it (an idle spare)
            self.words[peer.node] = Word(snap.facts, now, now - snap.age)
            self.malformed += snap.malformed_parts  # the facts stand: those parts are dropped
            if isinstance(snap.gpu, gpuwire.GpuText):
                self.gpus[peer.node], self.gpus_changed = snap.gpu, True
                self._held(peer.node, snap.gpu_count)
            if isinstance(snap.node, str):
                self.nodes[peer.node], self.nodes_changed = snap.node, True
            if snap.steps is not None:
                step, before = snap.steps[0], self.steps.get(peer.node, (None, None))[0]
                if step is not None and (before is None or step > before):
                    self.last_step_at = now
                    self._clock(step)
                self.steps[peer.node] = snap.steps
            if snap.pace is not None:  # none until the node has stepped a few times
                self.paces[peer.node] = snap.pace

    # -- what the judge reads -------------------------------------------------
    def facts(self, now: float) -> tuple[dict[str, Facts], dict[str, float]]:
        """Every node's facts for the judge: fresh words as they are; a node silent
        for `silence` (or whose sentinel never came within `start_grace`) unreachable."""
        out: dict[str, Facts] = {}
        asked: dict[str, float] = {}
        with self.lock:
            words = dict(self.words)
        for node in self.layout:
            w = words.get(node)
            if w is not None and w.arrival < self.resumed_at:  # our own stop, not theirs
                w = Word(w.facts, self.resumed_at, w.asked + (self.resumed_at - w.arrival))
            stale = self.silence + 2 * self.cfg.interval  # its sampling stopped (hung I/O)
            if w is not None and now - w.arrival <= self.silence and now - w.asked <= stale:
                out[node], asked[node] = w.facts, w.asked
            elif w is not None and now - w.arrival <= self.silence:
                out[node] = silent(f"its sentinel's samples stopped {now - w.asked:.0f} s ago")
            elif w is not None:
                out[node] = silent(f"no word from its sentinel for {now - w.arrival:.0f} s")
            elif now - self.start >= self.cfg.start_grace:
                out[node] = silent("its sentinel never connected")
        return out, asked

    def resumed(self, now: float, gap: float) -> None:
        """This coordinator was stopped `gap` s (SIGSTOP, a suspended VM: its own clock
        jumped between two ticks): the sentinels' silence over that time is its own. Each
        node gets `silence` again to speak. A stop long enough for a sentinel to have
        called it lost (its last heartbeat came up to one before the stop) is kept
        (`away`): until every node is heard from again, nobody is judged."""
        self.resumed_at = now
        # its last heartbeat before the stop, and the first after, up to one away each
        lost = gap + 2 * self.cfg.heartbeat >= self.cfg.rules.unreachable_after
        if lost:
            self.stopped = (now, gap)
        self.journal("resumed", None, stopped=round(gap, 1), lost=lost)

    def away(self) -> list[str] | None:
        """After a stop of this coordinator's own that its sentinels may have taken for
        its loss (`resumed`): the attempt's nodes not heard from since it woke; None when
        there was none, or once every node is back. A sentinel's snaps sent while this
        process was stopped wait in the socket and come at once when it wakes, from one
        that has since left too: a node is back on a word a heartbeat after the wake
        (a live sentinel sends one at least that often), still connected."""
        if self.stopped is None:
            return None
        fresh = self.stopped[0] + self.cfg.heartbeat
        live = self.live_peers()
        with self.lock:
            heard = {n for n, w in self.words.items() if w.arrival >= fresh and n in live}
        missing = [n for n in self.layout if n not in heard]
        if not missing:
            self.stopped = None
            self.journal("back", None, nodes=list(self.layout))
        return missing or None

    def complete(self, facts: dict[str, Facts]) -> bool:
        return all(n in facts for n in self.layout)

    # -- what the judge's verdicts leave in the journal ---------------------
    def saw(self, verdicts: dict[str, Any]) -> None:
        self.verdicts = dict(verdicts)
        for node, v in verdicts.items():
            if v.state.is_problem:  # the first failure's clock for a node that wrote none
                self.problem_at.setdefault(node, time.time())
            now = (str(v.state), v.why)
            if self.states.get(node) != now:
                self.states[node] = now
                self.journal("state", node, state=now[0], why=now[1])

    def pace(self) -> Pace | None:
        """The job's pace as the manager's tracker makes it from all nodes: the median
        of the nodes' step intervals, the longest pause of any (`stall_after: auto`)."""
        with self.lock:
            paces = list(self.paces.values())
        if not paces:
            return None
        interval = statistics.median(p.step_interval for p in paces)
        return Pace(interval, max(p.longest_gap for p in paces), sum(p.gaps for p in paces))

    def _clock(self, step: int) -> None:
        """The job's step (the highest of any node's) and when, on this node's clock: the
        ledger's training time of the attempt (first step to last)."""
        c, now = self.clock, time.time()
        if "first_step_at" not in c:
            c.update(first_step=step, first_step_at=now, checkpoints=False)
            c.setdefault("gpus", 0)
            c.setdefault("gpu_nodes", 0)
        if step > c.get("last_step", -1):
            c.update(last_step=step, last_step_at=now)

    def _held(self, node: str, count: int | None) -> None:
        """A reading's GPUs into the clock, by the watchdog's rule (gpucount.py): the
        ledger prices the attempt from `gpus` once `gpu_nodes` covers every node. The
        map by node lives in the clock, so a respawned coordinator (resume.py) goes on
        from it rather than from nothing."""
        held = gpucount.held_of(self.clock.get("gpus_by_node"))
        if node not in self.layout or not gpucount.see(held, node, self.cfg.nproc(node), count):
            return
        self.clock.update(gpus=sum(held.values()), gpu_nodes=len(held), gpus_by_node=held)

    def progressed_since(self, started: float) -> float:
        """Seconds this attempt kept making progress (its steps advancing): what
        restart.reset_after measures."""
        return max(0.0, self.last_step_at - started)

    def new_attempt(self, k: int, run: str) -> None:
        """What the sentinels said of the attempt before is no evidence about this one."""
        with self.lock:
            self.attempt, self.run = k, run
            self.words.clear()
            self.steps.clear()
            self.clock = {}
            self.paces.clear()
            self.gpus.clear()  # whose processes are the job's is the attempt's
            self.gpus_changed = True
            self.nodes.clear()  # and so are its processes
            self.nodes_changed = True
            self.start = time.monotonic()
            self.stopped = None  # a stop of ours is the attempt before's
        self.states.clear()
        self.poked.clear()
        self.problem_at.clear()
        self.verdicts, self.first, self.decided_at = {}, None, None
        with self.lock:
            self._replies.clear()
