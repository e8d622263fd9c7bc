"""What the coordinator writes on the main node for the manager to read later.

Why files: the manager may be away for hours; when it comes back it reads
`coord/status.json` (now), `coord/journal.jsonl` (what happened meanwhile),
`coord/decision.json` (the teardown, if any), `coord/gpus.json` and `coord/nodes.json`
over one SSH connection to the main. Every write is atomic (tmp + rename) so a reader
never sees half a file; a write that fails (the main's disk full) is counted, never the
end of the watch.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from mntui.sessions.node.files.plainfile import plain
from mntui.sessions.node.wire import gpuwire, nodewire
from mntui.sessions.node.wire.snapwire import Word
from mntui.sessions.node.wire.watchcfg import WatchConfig, write_json

if TYPE_CHECKING:
    from .coordpeers import Peer

JOURNAL_MAX = 8 << 20  # bytes: past this only decisions and refusals are kept
STEPS_EVERY = 5.0  # seconds between two `steps` lines of the journal


class BoardFiles:
    """Mixed into the Board, whose state it writes out."""

    cfg: WatchConfig
    out: str
    lock: threading.Lock
    run: str
    attempt: int
    start_wall: float
    published: float
    words: dict[str, Word]
    refusals: dict[str, int]
    last_refused: str | None
    malformed: int
    write_errors: int
    steps: dict[str, tuple[int | None, float | None]]
    steps_at: float
    clock: dict[str, Any]
    gpus: dict[str, gpuwire.GpuText]
    gpus_changed: bool
    nodes: dict[str, str]
    nodes_changed: bool
    layout: tuple[str, ...]
    first: dict[str, Any] | None

    if TYPE_CHECKING:  # the peer table's (coordpeers.py): no definition here to shadow it

        def live_peers(self) -> dict[str, Peer]: ...

    def publish(self, verdicts: dict[str, Any], now: float, force: bool = False) -> None:
        if not force and now - self.published < 1.0:
            return
        self.published = now
        peers = self.live_peers()
        with self.lock:
            words, refusals, malformed = dict(self.words), dict(self.refusals), self.malformed
        nodes = {}
        for rank, n in enumerate(self.layout):  # the layout is by rank; the file's keys sorted
            v, w = verdicts.get(n), words.get(n)
            nodes[n] = {
                "rank": rank,
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
                "first": self.first,  # the attempt's first failure (firstfail.py), once named
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

    def journal_steps(self, now: float, force: bool = False) -> None:
        """The job's steps every STEPS_EVERY seconds (`force`: now, at a teardown's
        decision): what `status` says the job did while this machine was away, and where
        each rank stood when the attempt ended (the saved report's progress line)."""
        if now - self.steps_at < STEPS_EVERY and not force:
            return
        with self.lock:
            steps = {n: st for n, (st, _) in self.steps.items() if st is not None}
        if steps:  # none yet: the first ones are journaled as soon as they come
            self.steps_at = now
            self.journal("steps", None, steps=steps)

    def ended(self, verdicts: dict[str, Any], first: dict[str, Any] | None = None) -> None:
        """The attempt ended by itself; `first`: its first failure (firstfail.plain)."""
        states = {n: str(v.state) for n, v in verdicts.items()}
        self.journal("ended", None, states=states, first=first)
        record: dict[str, Any] = {"run": self.run, "ended_at": time.time(), "ended": states}
        if first is not None:
            record["first"] = self.first = first
        self.write("decision.json", record)
        self.keep_decision(record)
        self.publish(verdicts, time.monotonic(), force=True)

    def keep_decision(self, record: dict[str, Any]) -> None:
        """Each attempt's decision stays (decision-<run>.json); decision.json is the latest."""
        self.write(f"decision-{self.run}.json", record)

    def answered(self, request: str) -> None:
        """`coord/answered` names the request decision.json now answers: the manager
        waits for it on the main with the shell's own `read`, no program a check (a
        loaded main forks slowly), and reads the decision once."""
        try:
            _write_text(os.path.join(self.out, "answered"), request[:64] + "\n")
        except OSError:
            self.write_errors += 1

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
            with self.lock, open(path, "a", encoding="utf-8", opener=plain) as f:
                f.write(line + "\n")
        except OSError:
            self.write_errors += 1

    def write(self, name: str, data: dict[str, Any]) -> None:
        try:
            write_json(os.path.join(self.out, name), data)
        except OSError:  # the main's disk full: the watch goes on, the file waits
            self.write_errors += 1


def _write_text(path: str, text: str) -> None:
    """write_json's atomic write (tmp + rename), of JSON already made."""
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "w", encoding="utf-8", opener=plain) as f:
        f.write(text)
    os.replace(tmp, path)
