"""The sentinel: one per node of a run, beside the ranks, in a session of its own.

Why it exists: the manager's watchdog runs wherever the user is, and a laptop that
sleeps or loses its network either leaves the job unguarded or tears a healthy job
down. The sentinel watches its own ranks from /proc at `interval`, tells the
coordinator on the main node what it sees, and kills its node's part of the job when
told to. If it hears nothing from the coordinator for `unreachable_after` while its
ranks run, the job has lost its main: it tears its own ranks down and says why in
`lost.json` (a job without its main cannot go on; its GPUs should not wait 30 min).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
import time
import traceback
from typing import Any

from . import attempt, daemon, frames, killer, stackcap
from .attempt import Attempt
from .facts import Facts
from .watchcfg import WatchConfig, grace_of, load_for, write_json

COMMANDS = frozenset({"hb", "sample", "kill", "start", "stop"})
RECV_WAIT = 0.1  # how soon a new sample goes out after it was taken


class Sentinel:
    def __init__(self, cfg: WatchConfig, secret: bytes, run_dir: str) -> None:
        self.cfg, self.secret, self.dir = cfg, secret, run_dir
        self.att = Attempt(0, cfg.run, cfg.tag, run_dir, cfg.node, cfg.progress_pattern)
        self.steps: dict[str, float | int | None] = {}
        self.lock = threading.Lock()
        self.ops = threading.Lock()  # a kill and an attempt's start, one at a time
        self.facts: Facts | None = None
        self.sampled_at = 0.0  # monotonic
        self.poke = threading.Event()
        self.stopping = threading.Event()
        self.heard = time.monotonic()  # the coordinator's last word (or our start)
        self.channel: frames.Channel | None = None
        self.killed = False
        self.wanted: float | None = None  # the coordinator asked for a sample taken after this

    # -- sampling -------------------------------------------------------------
    def sample(self) -> tuple[Attempt, Facts]:
        with self.lock:  # a restart may swap the attempt under us
            att = self.att
        facts = att.sample(self.cfg.session)
        self.steps = att.log.steps()
        return att, facts

    def watch(self) -> str:
        """Samples until told to stop or the coordinator is lost; returns why it ends."""
        cfg = self.cfg
        woke = time.monotonic()
        while not self.stopping.is_set():
            now = time.monotonic()
            if now - woke > max(2 * cfg.interval, cfg.heartbeat + 1):
                # we were stopped ourselves (SIGSTOP, a suspended VM): the silence is
                # ours, not the coordinator's; give it a heartbeat's time to speak
                self.heard = max(self.heard, now - cfg.heartbeat)
            woke = now
            att, facts = self.sample()
            with self.lock:
                if att is not self.att:  # a sample of the attempt before a restart
                    continue
                if facts.pane_pid is not None or not facts.live_procs:
                    # without the pane's pid its children would look orphaned (a kill
                    # at once): no word until tmux answers; a silence is judged as one
                    self.facts, self.sampled_at = facts, time.monotonic()
            silent = time.monotonic() - self.heard
            if silent >= cfg.rules.unreachable_after:
                if facts.live_procs:
                    return self.lose(silent)
                return "ended, no coordinator"
            self.poke.wait(cfg.interval)
            self.poke.clear()
        return "stopped by the coordinator"

    def lose(self, silent: float) -> str:
        why = (
            f"no word from the coordinator {self.cfg.coord_host}:{self.cfg.coord_port} "
            f"for {silent:.0f} s: this node's ranks were torn down"
        )
        lost_at = time.time()
        result = self.kill(f"lost the coordinator ({silent:.0f} s)")
        write_json(
            os.path.join(self.dir, "lost.json"),
            {"lost_at": lost_at, "torn_down_at": time.time(), "why": why, "kill": result},
        )
        return why

    def kill(
        self, why: str, grace: float | None = None, stacks: stackcap.Ask | None = None
    ) -> dict[str, Any]:
        """Kills the current attempt; after an attempt's start under way, that one (the
        two never interleave: a kill then a start would leave the new attempt unwatched).
        With `stacks` (a hang), the ranks' stacks are taken first, within its budget."""
        with self.ops:
            taken = self._stacks(stacks) if stacks is not None else None
            result = self._kill(why, grace)
            if taken is not None:
                result["stacks"] = taken
            return result

    def _stacks(self, ask: stackcap.Ask) -> dict[str, Any]:
        """The capture the launch rendered for the current attempt, saved in its run dir;
        whatever happens, the kill follows."""
        nonce = self.cfg.stacks_nonce
        with self.lock:
            att = self.att
        if nonce is None or self.cfg.capture_budget <= 0:
            return {"error": "no stacks: the launch rendered no capture script"}
        try:
            script = os.path.join(self.dir, stackcap.SCRIPT)
            return stackcap.take(script, att.entry, att.dir, nonce, att.run, ask)
        except Exception as exc:  # said in the kill's report; the kill goes on
            traceback.print_exc()
            return {"error": f"no stacks: {type(exc).__name__}: {exc}"[:200]}

    def _kill(self, why: str, grace: float | None) -> dict[str, Any]:
        print(f"sentinel: killing this node's ranks: {why}", flush=True)
        self.killed = True
        try:
            with self.lock:
                entry, known = self.att.entry, self.att.follower.members
            res = killer.kill_tagged(
                re.escape(entry),
                grace=self.cfg.grace if grace is None else grace,
                session=self.cfg.session,
                ports=self.cfg.ports,
                exclude=(os.getpid(),),
                known=known,
            )
        except Exception as exc:  # said to the coordinator, never a silent sentinel
            traceback.print_exc()
            return {"error": f"the kill failed on the node: {type(exc).__name__}: {exc}"[:300]}
        return res.as_dict()

    # -- the link to the coordinator ------------------------------------------
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
            self.stopping.wait(backoff)
            backoff = min(1.0, backoff * 2)

    def connect(self) -> frames.Channel:
        cfg = self.cfg
        sock = socket.create_connection((cfg.coord_host, cfg.coord_port), timeout=2.0)
        hello = {"node": cfg.node, "chain": cfg.run, "pid": os.getpid()}
        try:
            ch = frames.client_handshake(sock, self.secret, hello, kinds=COMMANDS)
        except BaseException:
            sock.close()
            raise
        self.channel = ch
        self.heard = time.monotonic()
        return ch

    def serve(self, ch: frames.Channel) -> None:
        sent_facts: Facts | None = None
        sent_at = 0.0
        hb = self.cfg.heartbeat
        while not self.stopping.is_set():
            with self.lock:
                facts, at, run = self.facts, self.sampled_at, self.att.run
            now = time.monotonic()
            wanted = self.wanted is not None and at > self.wanted
            if facts is not None and (facts != sent_facts or now - sent_at >= hb or wanted):
                wire = facts.to_wire()
                age = round(now - at, 4)
                ch.send("snap", run=run, age=age, facts=wire, steps=self.steps)
                sent_facts, sent_at = facts, now
                if wanted:
                    self.wanted = None
            try:
                msg = ch.recv(timeout=RECV_WAIT)
            except socket.timeout:
                continue
            self.heard = time.monotonic()
            self.obey(ch, msg)

    def obey(self, ch: frames.Channel, msg: dict[str, Any]) -> None:
        kind = msg["k"]
        if kind == "sample":  # a deadline: the answer must be sampled after this ask
            self.wanted = time.monotonic()
            self.poke.set()
        elif kind == "kill":
            why = str(msg.get("why", ""))[:200]
            g = grace_of(msg.get("grace"))
            grace = self.cfg.grace if g is None else g
            stacks = stackcap.ask_of(msg.get("stacks"), self.cfg.nodes, self.cfg.capture_budget)
            args = (ch, msg.get("id"), why, grace, stacks)
            threading.Thread(target=self._kill_and_report, args=args).start()
        elif kind == "start":
            k = msg.get("attempt")
            if type(k) is int and 1 <= k <= self.cfg.attempts:
                threading.Thread(target=self._start, args=(ch, msg.get("id"), k)).start()
        elif kind == "stop":
            self.stopping.set()
            self.poke.set()

    def _start(self, ch: frames.Channel, seq: object, k: int) -> None:
        """Attempt `k`, as the coordinator asks (its restart): started from the script the
        launch left, then followed instead of the attempt before."""
        with self.ops:
            try:
                att = attempt.start(self.dir, k, self.cfg)
            except (OSError, ValueError, RuntimeError, subprocess.SubprocessError) as exc:
                print(f"sentinel: attempt {k}: {exc}", flush=True)
                self._send(ch, "done", re=seq, ok=False, error=str(exc)[:300])
                return
            with self.lock:
                self.att, self.facts = att, None
        self.poke.set()
        print(f"sentinel: attempt {k} started, run {att.run}", flush=True)
        self._send(ch, "done", re=seq, ok=True, run=att.run)

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


def main(argv: list[str]) -> int:
    """`run RUN_DIR`: start the node's sentinel, detached; prints `SENTINEL <pid>`."""
    loaded = load_for(argv, "sentinel")
    if isinstance(loaded, int):
        return loaded
    run_dir, cfg, secret = loaded
    ready = daemon.daemonize(
        os.path.join(run_dir, "sentinel.log"), os.path.join(run_dir, "sentinel.pid")
    )
    s = Sentinel(cfg, secret, run_dir)
    threading.Thread(target=s.link, daemon=True).start()
    ready(f"{cfg.node}")
    why = s.watch()
    s.stopping.set()
    print(f"sentinel: exits: {why}", flush=True)
    return 0
