"""The coordinator: the job's watchdog, on the main node, fed by the sentinels.

Why here: the main node is where the job lives or dies (its master port, rank 0); a
watch there cannot lose contact with the job while the job goes on, unlike one on the
user's laptop. It judges with the same judge as the manager's watchdog
(`judging.Judge`), from facts the sentinels sample on their own nodes, and a node's
silence counts only from the coordinator's side. On a decision it tells every sentinel
to kill its node's part at once (the main's ranks it kills itself when the main's
sentinel cannot), writes the decision on the main node for the manager to read when it
next connects, stops the sentinels and exits.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from typing import Any

from . import daemon, frames
from .coordstate import Board
from .judging import Judge
from .teardown import teardown, user_kill
from .watchcfg import BadWatchFile, WatchConfig, grace_of, load

FROM_SENTINEL = frozenset({"snap", "done", "bye"})
TICK = 0.25


class Coordinator:
    def __init__(self, cfg: WatchConfig, secret: bytes, run_dir: str, sock: socket.socket):
        self.cfg, self.secret, self.sock = cfg, secret, sock
        self.board = Board(cfg, os.path.join(run_dir, "coord"))
        self.judge = Judge(cfg.rules)
        self.wake = threading.Event()

    def accept(self) -> None:
        while True:
            try:
                conn, addr = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.peer, args=(conn, addr), daemon=True).start()

    def secret_for(self, hello: dict[str, Any]) -> bytes | None:
        ok = hello.get("chain") == self.cfg.run and hello.get("node") in self.cfg.nodes
        return self.secret if ok else None

    def peer(self, conn: socket.socket, addr: Any) -> None:
        where = str(addr[0]) if isinstance(addr, tuple) and addr else "?"
        try:
            ch = frames.server_handshake(conn, self.secret_for, kinds=FROM_SENTINEL)
        except (OSError, frames.Refused) as exc:
            self.board.refused(getattr(exc, "reason", "closed"), where)
            conn.close()
            return
        node = str(ch.peer.get("node"))
        peer = self.board.connected(node, ch)
        try:
            while True:
                self.board.heard(peer, ch.recv(timeout=None))
                self.wake.set()
        except (OSError, frames.Refused) as exc:
            self.board.gone(peer, str(exc) or type(exc).__name__)
        finally:
            ch.close()

    def kill_requested(self) -> float | None:
        """The user's kill, as the manager asked it: the file `coord/kill` (written over
        SSH by the node's own user: the request is as authenticated as the account);
        its grace, or None when there is no request."""
        path = os.path.join(self.board.out, "kill")
        try:
            with open(path, encoding="utf-8") as f:
                data = json.loads(f.read(4096))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return self.cfg.grace
        g = grace_of(data.get("grace")) if isinstance(data, dict) else None
        return self.cfg.grace if g is None else g

    def run(self) -> str:
        """Judges until the job ends or is torn down; returns how it ended."""
        hb_at = 0.0
        while True:
            self.wake.wait(TICK)
            self.wake.clear()
            now = time.monotonic()
            if now - hb_at >= self.cfg.heartbeat:
                self.board.send_all("hb")
                hb_at = now
            grace = self.kill_requested()
            if grace is not None:
                return user_kill(self.board, self.cfg, grace)
            facts, asked = self.board.facts(now)
            verdicts, triggers = self.judge.judge(facts, now, asked)
            self.board.saw(verdicts)
            for d in self.judge.deadlines(facts, verdicts, now):
                if d.at <= now:
                    self.board.poke(d.node, now)
            kills = [t for t in triggers if t.action != "notify"]
            for t in triggers:
                if t.action == "notify":
                    self.board.journal("notify", t.node, state=str(t.state), why=t.why)
            if kills:
                return teardown(self.board, kills[0], self.cfg)
            if self.board.complete(facts) and not may_run(verdicts):
                self.board.ended(verdicts)
                return "the job ended"
            self.board.journal_steps(now)
            self.board.publish(verdicts, now)


def may_run(verdicts: dict[str, Any]) -> bool:
    from .rules import may_still_run

    return may_still_run(v.state for v in verdicts.values())


def listen(port: int) -> socket.socket:
    """The coordinator's port, on every address: the workers reach the main by the
    address the ranks use for `master_addr`, whichever interface that is."""
    if socket.has_dualstack_ipv6():
        return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
    return socket.create_server(("", port))


def main(argv: list[str]) -> int:
    """`coord RUN_DIR`: start the run's coordinator on the main node, detached."""
    if len(argv) != 1:
        print("usage: coord RUN_DIR", file=sys.stderr)
        return 2
    run_dir = os.path.abspath(argv[0])
    try:
        cfg, secret = load(run_dir)
    except (OSError, BadWatchFile) as exc:
        print(f"coordinator: {exc}", file=sys.stderr)
        return 2
    try:
        sock = listen(cfg.coord_port)
    except OSError as exc:
        print(f"coordinator: port {cfg.coord_port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    log, pid = os.path.join(run_dir, "coord.log"), os.path.join(run_dir, "coord.pid")
    ready = daemon.daemonize(log, pid, label="COORD")
    c = Coordinator(cfg, secret, run_dir, sock)
    threading.Thread(target=c.accept, daemon=True).start()
    ready(f"coordinator :{cfg.coord_port}")
    why = c.run()
    print(f"coordinator: exits: {why}", flush=True)
    sock.close()
    return 0
