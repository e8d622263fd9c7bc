"""What a sentinel and its coordinator say to each other: snaps out, commands in.

Why a part of its own: the sentinel (sentinel.py) samples its ranks and kills them; this
is its side of the channel (frames.py): it reconnects after a loss, sends a snap when
the facts changed, a heartbeat's time passed or the coordinator asked for a fresh one,
and carries out what the coordinator says (a kill with its stacks, an attempt's start,
stop) on threads of their own, each answered with the id it came with. An attempt is
started once, whatever a coordinator started again asks. It keeps the copy of the chain
the coordinator shares (chaincopy.py) and follows no coordinator of an epoch it left;
after its main's loss it connects to the successor, with its word, and joins the epoch
that one leads when told (lostmain.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

from mntui.sessions.node.chain.succession import Word
from mntui.sessions.node.proc import attempt, respawn
from mntui.sessions.node.proc.attempt import Attempt
from mntui.sessions.node.wire import chaincopy, frames
from mntui.sessions.node.wire.facts import Facts
from mntui.sessions.node.wire.watchcfg import WatchConfig, grace_of, write_json

from . import gpus, logship, lostmain, nodesnap, stackcap

# follow: logship.py; chain: the coordinator's chain.json (chaincopy.py); epoch: a
# successor leads the chain now (lostmain.py)
# handoff: the chain handed to the successor (chain.py)
COMMANDS = frozenset(
    {"hb", "sample", "kill", "start", "stop", "follow", "chain", "epoch", "handoff"}
)
RECV_WAIT = 0.1  # how soon a new sample goes out after it was taken
# Retries a second at most: a coordinator started again is back within about one
# (respawn.py), and each node must hear it again well within unreachable_after.
RECONNECT_MAX = 0.5
FOLLOWING = "following.json"  # the attempt this node's sentinel follows (a respawn reads it)


class Link:
    """Mixed into the Sentinel, whose state it reads and whose kill it calls."""

    cfg: WatchConfig
    secret: bytes
    dir: str
    att: Attempt
    steps: dict[str, float | int | None]
    lock: threading.Lock
    ops: threading.Lock
    facts: Facts | None
    sampled_at: float
    poke: threading.Event
    stopping: threading.Event
    heard: float
    channel: frames.Channel | None
    wanted: float | None
    keepers: list[respawn.Keeper]
    bundle: list[str] | None
    gpus: gpus.Reader
    snapshot: nodesnap.Builder
    copy: dict[str, Any] | None
    lost: Word | None
    heir: str | None
    stepped_at: float | None
    tended: float

    if TYPE_CHECKING:  # the sentinel's: no definition here to shadow it

        def kill(
            self, why: str, grace: float | None = None, stacks: stackcap.Ask | None = None
        ) -> dict[str, Any]: ...

        def drop_link(self) -> None: ...

        def coordinator_started(self) -> None: ...

    def link(self) -> None:
        """Keeps a channel to the coordinator and serves it, reconnecting after a loss."""
        backoff = 0.2
        while not self.stopping.is_set():
            try:
                self.serve(self.connect())
                backoff = 0.2
            except (OSError, frames.Refused) as exc:
                print(f"sentinel: coordinator link: {exc}", flush=True)
            except Exception:  # a bug in the link must not cut us off for good
                traceback.print_exc()
            self.channel = None
            if self.cfg.is_main:
                self.poke.set()  # a dropped link: is the coordinator's process gone?
            self.stopping.wait(backoff)
            backoff = min(RECONNECT_MAX, backoff * 2)

    def connect(self) -> frames.Channel:
        """To the epoch's coordinator, or after the main's loss to its successor with
        this node's word (lostmain.py); a coordinator of an epoch left is refused."""
        cfg = self.cfg
        host, extra = lostmain.target(self)
        sock = socket.create_connection((host, cfg.coord_port), timeout=2.0)
        hello = {"node": cfg.node, "chain": cfg.run, "pid": os.getpid(), **extra}
        try:
            ch = frames.client_handshake(sock, self.secret, hello, kinds=COMMANDS)
        except BaseException:
            sock.close()
            raise
        fenced = lostmain.fenced(self, ch.peer.get("epoch"))
        if fenced is not None:
            ch.close()
            raise frames.Refused("stale-epoch", fenced)
        self.channel = ch
        self.heard = time.monotonic()
        if self.lost is not None and self.copy is not None:  # the successor takes the newest
            ch.send("chain", data=self.copy)
        return ch

    def serve(self, ch: frames.Channel) -> None:
        sent_facts: Facts | None = None
        sent_at = 0.0
        hb = self.cfg.heartbeat
        outbox = gpus.Outbox(self.gpus)  # a GPU reading goes with a snap when it changed
        nodes = nodesnap.Outbox(self.snapshot)  # and the node's snapshot, as often
        ship = logship.Shipper()  # the log's new bytes, while someone follows the run
        while not self.stopping.is_set():
            with self.lock:
                facts, at, run = self.facts, self.sampled_at, self.att.run
            now = time.monotonic()
            wanted = self.wanted is not None and at > self.wanted
            node = nodes.fields(facts, now)  # a snapshot when one was built and is news
            news = facts != sent_facts or now - sent_at >= hb or wanted or bool(node)
            if facts is not None and news:
                wire = facts.to_wire()
                age = round(now - at, 4)
                gpu = outbox.fields(tuple(p.pid for p in facts.live_procs), now)
                ch.send("snap", run=run, age=age, facts=wire, steps=self.steps, **gpu, **node)
                sent_facts, sent_at = facts, now
                if wanted:
                    self.wanted = None
            ship.ship(ch, self.att.log.path, run)
            try:
                msg = ch.recv(timeout=RECV_WAIT)
            except socket.timeout:
                continue
            if msg["k"] == "follow":  # the port's threads send it: no word of the judge's
                ship.follow(ch, msg)
                continue
            self.heard = time.monotonic()
            self.obey(ch, msg)

    def obey(self, ch: frames.Channel, msg: dict[str, Any]) -> None:
        kind = msg["k"]
        if kind == "chain":
            data = chaincopy.fit(msg.get("data"), self.cfg.run)
            if data is not None and self.lost is None:  # a successor's copy is its own
                self.copy = data
                chaincopy.keep(self.dir, data)
        elif kind == "epoch":
            why = lostmain.join(self, msg)
            if why is not None:
                print(f"sentinel: {why}", flush=True)
        elif kind == "sample":  # a deadline: the answer must be sampled after this ask
            self.wanted = time.monotonic()
            self.poke.set()
        elif kind == "kill":
            why = str(msg.get("why", ""))[:200]
            g = grace_of(msg.get("grace"))
            grace = self.cfg.grace if g is None else g
            stacks = stackcap.ask_of(msg.get("stacks"), self.cfg.members, self.cfg.capture_budget)
            args = (ch, msg.get("id"), why, grace, stacks)
            threading.Thread(target=self._kill_and_report, args=args).start()
        elif kind == "start" and self.lost is not None:  # not before it joined the epoch
            self._send(ch, "done", re=msg.get("id"), ok=False, error="this node lost its main")
        elif kind == "start":
            k = msg.get("attempt")
            if type(k) is int and k >= 1 and self.cfg.attempt_nonce is not None:
                # its run id, named by the coordinator; a spare's rank (attemptscript.py)
                start = (ch, msg.get("id"), k, msg.get("run"), msg.get("rank"))
                threading.Thread(target=self._start, args=start).start()
        elif kind == "stop" or (kind == "handoff" and not lostmain.handed(self, msg)):
            self.stopping.set()
            self.poke.set()

    def _start(
        self, ch: frames.Channel, seq: object, k: int, run: object, rank: object = None
    ) -> None:
        """Attempt `k` as run `run`, as the coordinator asks (its restart): started from
        the template the launch left, then followed instead of the attempt before."""
        with self.ops:
            if self._started_before(ch, seq, k, run):
                return
            try:
                att = attempt.start(self.dir, k, run, self.cfg, rank)
            except (OSError, ValueError, RuntimeError, subprocess.SubprocessError) as exc:
                print(f"sentinel: attempt {k}: {exc}", flush=True)
                self._send(ch, "done", re=seq, ok=False, error=str(exc)[:300])
                return
            with self.lock:
                self.att, self.facts = att, None
            try:
                write_json(os.path.join(self.dir, FOLLOWING), {"attempt": k, "run": att.run})
            except OSError as exc:  # a respawn of this sentinel would follow the one before
                print(f"sentinel: {FOLLOWING}: {exc}", flush=True)
        self.poke.set()
        print(f"sentinel: attempt {k} started, run {att.run}", flush=True)
        self._send(ch, "done", re=seq, ok=True, run=att.run)

    def _started_before(self, ch: frames.Channel, seq: object, k: int, run: object) -> bool:
        """An attempt is started once: a coordinator started again mid-restart asks for
        the attempt its predecessor asked for (the run it named then, kept in
        chain.json), and gets the one already running."""
        with self.lock:
            now = self.att
        if now.number < k:
            return False
        if now.number == k and now.run != run:
            self._send(ch, "done", re=seq, ok=False, error=f"attempt {k} runs as run {now.run}")
        elif now.number == k:
            print(f"sentinel: attempt {k} asked again: already started, run {now.run}", flush=True)
            self._send(ch, "done", re=seq, ok=True, run=now.run)
        else:
            why = f"attempt {k} asked while attempt {now.number} runs"
            self._send(ch, "done", re=seq, ok=False, error=why)
        return True

    def _send(self, ch: frames.Channel, kind: str, **fields: Any) -> None:
        try:
            ch.send(kind, **fields)
        except OSError:
            pass

    def _kill_and_report(
        self, ch: frames.Channel, seq: object, why: str, grace: float, stacks: stackcap.Ask | None
    ) -> None:
        result = self.kill(why, grace, stacks)
        try:
            ch.send("done", re=seq, ok=True, result=result)
        except OSError:
            pass
