"""The coordinator's board: the sentinels connected, what each last said, and what
the coordinator writes on the main node for the manager to read later.

Why files: the manager may be away for hours; when it comes back it reads
`coord/status.json` (now), `coord/journal.jsonl` (what happened meanwhile) and
`coord/decision.json` (the teardown, if any) over one SSH connection to the main.
Every write is atomic (tmp + rename) so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

from . import frames, gpucount, gpuwire, nodewire
from .facts import Facts, Malformed, from_wire, silent
from .steps import Pace
from .watchcfg import WatchConfig, write_json

JOURNAL_MAX = 8 << 20  # bytes: past this only decisions and refusals are kept
STEPS_EVERY = 5.0  # seconds between two `steps` lines of the journal
MAX_STEP = 10**12
MAX_AGE = 1e6  # seconds: a sentinel's sample age beyond this is no age of ours


@dataclass(eq=False)
class Peer:
    node: str
    ch: frames.Channel


@dataclass(frozen=True)
class Word:
    facts: Facts
    arrival: float  # coordinator's monotonic clock
    asked: float  # when the sample was taken, on the coordinator's clock


class Board:
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
        self.published = 0.0
        self.silence = max(2 * cfg.heartbeat, 1.0)
        self.resumed_at = 0.0  # monotonic: when this process last woke from a stop of its own
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

    # -- what the sentinels say -----------------------------------------------
    def connected(self, node: str, ch: frames.Channel) -> Peer:
        peer = Peer(node, ch)
        with self.lock:
            old = self.peers.get(node)
            self.peers[node] = peer
        if old is not None:
            old.ch.close()
        self.journal("connected", node)
        return peer

    def gone(self, peer: Peer, why: str) -> None:
        with self.lock:
            if self.peers.get(peer.node) is not peer:
                return
            del self.peers[peer.node]
        self.journal("disconnected", peer.node, why=why[:200])

    def heard(self, peer: Peer, msg: dict[str, Any]) -> None:
        if msg["k"] == "done":
            self.replies(peer.node).put(msg)
            return
        if msg["k"] != "snap":
            return
        age = msg.get("age")
        try:
            facts = from_wire(msg.get("facts"))
            if isinstance(age, bool) or not isinstance(age, (int, float)) or not 0 <= age < MAX_AGE:
                raise Malformed("age")
        except Malformed:
            with self.lock:
                self.malformed += 1
            return
        now = time.monotonic()
        steps = _steps(msg.get("steps"))
        pace = _pace(msg.get("steps"))
        gpu = _gpu(msg)
        count = gpucount.listed_in(gpu.csv, gpu.apps) if isinstance(gpu, gpuwire.GpuText) else None
        node = _node(msg)
        with self.lock:
            if msg.get("run") != self.run:  # of an attempt before this one
                return
            self.words[peer.node] = Word(facts, now, now - float(age))
            if isinstance(gpu, gpuwire.GpuText):
                self.gpus[peer.node], self.gpus_changed = gpu, True
                self._held(peer.node, count)
            self.malformed += gpu is False  # the facts stand: the reading alone is dropped
            if isinstance(node, str):
                self.nodes[peer.node], self.nodes_changed = node, True
            self.malformed += node is False  # and so does a snapshot of another shape
            if steps is not None:
                before = self.steps.get(peer.node, (None, None))[0]
                if steps[0] is not None and (before is None or steps[0] > before):
                    self.last_step_at = now
                    self._clock(steps[0])
                self.steps[peer.node] = steps
            else:
                self.malformed += 1
            if pace is not None:  # none until the node has stepped a few times
                self.paces[peer.node] = pace

    def refused(self, reason: str, where: str) -> None:
        with self.lock:
            self.refusals[reason] = self.refusals.get(reason, 0) + 1
            self.last_refused = where
            first = self.refusals[reason] == 1
        if first:
            self.journal("refused", None, reason=reason, peer=where)

    # -- what the judge reads -------------------------------------------------
    def facts(self, now: float) -> tuple[dict[str, Facts], dict[str, float]]:
        """Every node's facts for the judge: fresh words as they are; a node silent
        for `silence` (or whose sentinel never came within `start_grace`) unreachable."""
        out: dict[str, Facts] = {}
        asked: dict[str, float] = {}
        with self.lock:
            words = dict(self.words)
        for node in self.cfg.nodes:
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

    def resumed(self, now: float) -> None:
        """This coordinator was stopped (SIGSTOP, a suspended VM): the sentinels' silence
        over that time is its own. Each node gets `silence` again to speak."""
        self.resumed_at = now
        self.journal("resumed", None)

    def complete(self, facts: dict[str, Facts]) -> bool:
        return all(n in facts for n in self.cfg.nodes)

    # -- telling the sentinels ------------------------------------------------
    def live_peers(self) -> dict[str, Peer]:
        with self.lock:
            return dict(self.peers)

    def send(self, node: str, kind: str, **fields: Any) -> bool:
        peer = self.live_peers().get(node)
        if peer is None:
            return False
        try:
            peer.ch.send(kind, **fields)
        except OSError:
            return False
        return True

    def ask(self, node: str, kind: str, **fields: Any) -> str | None:
        """Send a command whose answer is awaited (`wait_reply`); its id, or None when it
        could not be sent. The id, not the order, pairs an answer with its question: a
        late kill report is never taken for an attempt's start."""
        rid = secrets.token_hex(8)
        return rid if self.send(node, kind, id=rid, **fields) else None

    def replies(self, node: str) -> queue.Queue[dict[str, Any]]:
        with self.lock:
            return self._replies.setdefault(node, queue.Queue())

    def wait_reply(self, node: str, rid: str, deadline: float) -> dict[str, Any] | None:
        """`node`'s answer to `rid` by `deadline` (monotonic), or None; others dropped."""
        q = self.replies(node)
        while True:
            try:
                msg = q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if msg.get("re") == rid:
                return msg

    def send_all(self, kind: str, **fields: Any) -> None:
        for node in self.live_peers():
            self.send(node, kind, **fields)

    def poke(self, node: str, now: float) -> None:
        """Ask `node` for a sample now (a deadline came), at most every 0.3 s."""
        if now - self.poked.get(node, -1.0) >= 0.3:
            self.poked[node] = now
            self.send(node, "sample")

    # -- what the manager reads later -----------------------------------------
    def saw(self, verdicts: dict[str, Any]) -> None:
        for node, v in verdicts.items():
            now = (str(v.state), v.why)
            if self.states.get(node) != now:
                self.states[node] = now
                self.journal("state", node, state=now[0], why=now[1])

    def publish(self, verdicts: dict[str, Any], now: float, force: bool = False) -> None:
        if not force and now - self.published < 1.0:
            return
        self.published = now
        peers = self.live_peers()
        with self.lock:
            words, refusals, malformed = dict(self.words), dict(self.refusals), self.malformed
        nodes = {}
        for n in self.cfg.nodes:
            v, w = verdicts.get(n), words.get(n)
            nodes[n] = {
                "state": str(v.state) if v is not None else None,
                "why": v.why if v is not None else None,
                "connected": n in peers,
                "last_word": round(now - w.arrival, 2) if w is not None else None,
                "procs": len(w.facts.live_procs) if w is not None else None,
                "output_age": w.facts.output_age if w is not None else None,
                "exit_code": w.facts.exit_code if w is not None else None,
                "step": self.steps.get(n, (None, None))[0],
                "rate": self.steps.get(n, (None, None))[1],
            }
        self.write(
            "status.json",
            {
                "run": self.run,
                "attempt": self.attempt,
                "at": time.time(),
                "since": self.start_wall,
                "pid": os.getpid(),
                "nodes": nodes,
                "refused": refusals,
                "refused_last_from": self.last_refused,
                "steps": dict(self.clock),
                "malformed": malformed,
                "write_errors": self.write_errors,
            },
        )
        self.publish_gpus()
        self.publish_nodes()

    def publish_gpus(self) -> None:
        """coord/gpus.json, when a reading came since it was last written: a file of its
        own, as its size grows with the nodes' GPUs and status.json is read every 0.2 s
        while a launch waits (board.py reads this one only for `status`)."""
        with self.lock:
            if not self.gpus_changed:
                return
            self.gpus_changed = False
            texts = dict(self.gpus)
        nodes = {n: gpuwire.board_entry(t) for n, t in texts.items()}
        self.write(gpuwire.BOARD_FILE, gpuwire.within_board({"at": time.time(), "nodes": nodes}))

    def publish_nodes(self) -> None:
        """coord/nodes.json, when a snapshot came since it was last written (at most as
        often as status.json): each entry's JSON was made when it came, once."""
        with self.lock:
            if not self.nodes_changed:
                return
            self.nodes_changed = False
            texts = dict(self.nodes)
        try:
            text = nodewire.board_text(time.time(), texts)
            _write_text(os.path.join(self.out, nodewire.BOARD_FILE), text)
        except OSError:
            self.write_errors += 1

    def journal_steps(self, now: float) -> None:
        """The job's steps every STEPS_EVERY seconds: what `status` says the job did
        while this machine was away."""
        if now - self.steps_at < STEPS_EVERY:
            return
        self.steps_at = now
        with self.lock:
            steps = {n: st for n, (st, _) in self.steps.items() if st is not None}
        if steps:
            self.journal("steps", None, steps=steps)

    def ended(self, verdicts: dict[str, Any]) -> None:
        states = {n: str(v.state) for n, v in verdicts.items()}
        self.journal("ended", None, states=states)
        record = {"run": self.run, "ended_at": time.time(), "ended": states}
        self.write("decision.json", record)
        self.keep_decision(record)
        self.publish(verdicts, time.monotonic(), force=True)

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
        if node not in self.cfg.nodes or not gpucount.see(held, node, self.cfg.nproc(node), count):
            return
        self.clock.update(gpus=sum(held.values()), gpu_nodes=len(held), gpus_by_node=held)

    def progressed_since(self, started: float) -> float:
        """Seconds this attempt kept making progress (its steps advancing): what
        restart.reset_after measures."""
        return max(0.0, self.last_step_at - started)

    def keep_decision(self, record: dict[str, Any]) -> None:
        """Each attempt's decision stays (decision-<run>.json); decision.json is the latest."""
        self.write(f"decision-{self.run}.json", record)

    def answered(self, request: str) -> None:
        """`coord/answered` names the request decision.json now answers: the manager
        waits for it on the main with the shell's own `read`, no program a check (a
        loaded main forks slowly), and reads the decision once."""
        path = os.path.join(self.out, "answered")
        try:
            with open(f"{path}.tmp", "w", encoding="utf-8") as f:
                f.write(request[:64] + "\n")
            os.replace(f"{path}.tmp", path)
        except OSError:
            self.write_errors += 1

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
        self.states.clear()
        self.poked.clear()
        with self.lock:
            self._replies.clear()

    def journal(self, kind: str, node: str | None, **data: Any) -> None:
        path = os.path.join(self.out, "journal.jsonl")
        line = json.dumps({"t": time.time(), "kind": kind, "node": node, "data": data})
        try:
            big = os.path.getsize(path) > JOURNAL_MAX
        except OSError:
            big = False
        if big and kind not in ("decision", "ended", "refused"):
            return
        try:
            with self.lock, open(path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError:
            self.write_errors += 1

    def write(self, name: str, data: dict[str, Any]) -> None:
        try:
            write_json(os.path.join(self.out, name), data)
        except OSError:  # the main's disk full: the watch goes on, the file waits
            self.write_errors += 1


def _gpu(msg: dict[str, Any]) -> gpuwire.GpuText | bool:
    """A snap's GPU reading; True when it has none (unchanged since sent), False when
    it is malformed."""
    if "gpu" not in msg:
        return True
    try:
        csv, apps, own, age = gpuwire.check(msg["gpu"], "age")
    except gpuwire.Malformed:
        return False
    return gpuwire.GpuText(csv, apps, own, time.time() - age)


def _write_text(path: str, text: str) -> None:
    """write_json's atomic write (tmp + rename), of JSON already made."""
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _node(msg: dict[str, Any]) -> str | bool:
    """A snap's node snapshot as the board keeps it; True when it has none (unchanged
    since sent), False when it is malformed."""
    if "node" not in msg:
        return True
    try:
        return nodewire.board_entry(msg["node"], time.time())
    except Malformed:
        return False


def _steps(v: object) -> tuple[int | None, float | None] | None:
    """A sentinel's `steps` ({"step": int|None, "rate": number|None}), or None."""
    if not isinstance(v, dict):
        return None
    step, rate = v.get("step"), v.get("rate")
    if step is not None and (type(step) is not int or not 0 <= step <= MAX_STEP):
        return None
    if rate is not None and (type(rate) not in (int, float) or not 0 <= rate < 1e9):
        return None
    return step, None if rate is None else float(rate)


def _pace(v: object) -> Pace | None:
    """A sentinel's pace (`interval`, `longest`, `gaps` of its `steps`), or None."""
    if not isinstance(v, dict):
        return None
    i, g, n = _positive(v.get("interval")), _positive(v.get("longest")), v.get("gaps")
    if i is None or g is None or type(n) is not int or not 0 < n < 1 << 40:
        return None
    return Pace(i, g, n)


def _positive(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 < x < 1e7:
        return None
    return float(x)
