"""The chain's file, shared: the coordinator sends `coord/chain.json` to every sentinel
each time it writes it, and each sentinel keeps the latest copy in its run dir
(`chain-copy.json`).

Why: the chain's state (every attempt, its end and its nodes, the quarantines, the
restarts spent) lives on the main, and a main that is lost takes it along. The spare
that succeeds it (succession.py) goes on from its copy, the newest of its own and its
workers' (`rev` counts the coordinator's writes), so a successor restarts the job with
the restarts that are left and keeps quarantined nodes out, and this machine reads
every attempt, the lost main's included, from the successor's board. The sends run on
a thread of their own: a sentinel that reads nothing (stopped) holds that thread up to
the channel's send timeout, never the judge.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from typing import Any

from mntui.sessions.node.files.plainfile import read_plain

from .epochs import number_of
from .watchcfg import write_json

COPY = "chain-copy.json"
MOST = 8 << 20  # bytes of a copy read back (chain.json's own bound: resume.load)
TICK = 0.5  # seconds between two looks for a peer without the latest copy


def fit(data: object, chain: str) -> dict[str, Any] | None:
    """A copy as a frame or a file carries it (node data): the chain's, with attempts
    and a revision; None otherwise."""
    if not isinstance(data, dict) or data.get("chain") != chain:
        return None
    items = data.get("attempts")
    if not isinstance(items, list) or not items or number_of(data.get("rev", 0)) is None:
        return None
    return data


def load(run_dir: str, chain: str) -> dict[str, Any] | None:
    raw = read_plain(os.path.join(run_dir, COPY), MOST)
    try:
        return fit(json.loads(raw), chain) if raw is not None else None
    except ValueError:
        return None


def keep(run_dir: str, data: dict[str, Any]) -> None:
    """The copy into the run dir (a sentinel started again goes on from it); a disk
    that is full costs the file, never the sentinel."""
    try:
        write_json(os.path.join(run_dir, COPY), data)
    except OSError as exc:
        print(f"sentinel: {COPY}: {exc}", flush=True)


class Replica:
    """The coordinator's side: the latest chain.json, and which peer has it."""

    def __init__(self, peers: Callable[[], dict[str, Any]], done: threading.Event) -> None:
        """`peers`: the board's live peers (node -> Peer, whose `ch` sends)."""
        self.peers, self.done = peers, done
        self.lock = threading.Lock()
        self.data: dict[str, Any] | None = None
        self.rev = -1
        self.sent: dict[str, tuple[object, int]] = {}  # node -> (its peer, the rev it has)
        self.wake = threading.Event()

    def publish(self, data: dict[str, Any]) -> None:
        """A write of chain.json (chainlog.py): a copy of it goes out to every peer."""
        frozen = json.loads(json.dumps(data))  # the chain's thread goes on changing its own
        with self.lock:
            self.data, self.rev = frozen, number_of(frozen.get("rev", 0)) or 0
        self.wake.set()

    def joined(self) -> None:
        """A sentinel connected: it gets the latest copy at once."""
        self.wake.set()

    def run(self) -> None:
        while not self.done.is_set():
            self.wake.wait(TICK)
            self.wake.clear()
            with self.lock:
                data, rev = self.data, self.rev
            if data is None:
                continue
            for node, peer in self.peers().items():
                if self.sent.get(node) == (peer, rev):
                    continue
                try:
                    peer.ch.send("chain", data=data)
                except OSError:
                    continue
                self.sent[node] = (peer, rev)
