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

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import traceback
from typing import Any

from . import daemon, frames, killer, proctree
from .facts import Facts, ProcFact
from .logtail import LogTail
from .watchcfg import BadWatchFile, WatchConfig, grace_of, load

COMMANDS = frozenset({"hb", "sample", "kill", "stop"})
RECV_WAIT = 0.1  # how soon a new sample goes out after it was taken


def tmux_pane(session: str) -> tuple[bool, bool, int | None]:
    """(the session exists, its pane is dead, the pane's pid) from the node's tmux."""
    try:
        out = subprocess.run(
            ["tmux", "list-panes", "-t", f"={session}:", "-F", "#{pane_dead} #{pane_pid}"],
            capture_output=True,
            text=True,
            timeout=5,
            env=daemon.clean_env(os.environ),
        )
    except (OSError, subprocess.SubprocessError):
        return False, False, None
    if out.returncode != 0:
        return False, False, None
    words = out.stdout.split("\n", 1)[0].split()
    pid = int(words[1]) if len(words) == 2 and words[1].isdigit() else None
    return True, bool(words) and words[0] == "1", pid


def read_exit_code(run_dir: str) -> int | None:
    try:
        with open(os.path.join(run_dir, "exit_code"), encoding="ascii") as f:
            text = f.read(32).strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if re.fullmatch(r"-?[0-9]{1,9}", text) else None


class Sentinel:
    def __init__(self, cfg: WatchConfig, secret: bytes, run_dir: str) -> None:
        self.cfg, self.secret, self.dir = cfg, secret, run_dir
        self.follower = proctree.Follower(cfg.entry, exclude=(os.getpid(),))
        self.log = LogTail(os.path.join(run_dir, "output.log"), cfg.node, cfg.progress_pattern)
        self.steps: dict[str, float | int | None] = {}
        self.lock = threading.Lock()
        self.facts: Facts | None = None
        self.sampled_at = 0.0  # monotonic
        self.poke = threading.Event()
        self.stopping = threading.Event()
        self.heard = time.monotonic()  # the coordinator's last word (or our start)
        self.channel: frames.Channel | None = None
        self.pane_pid: int | None = None
        self.killed = False
        self.wanted: float | None = None  # the coordinator asked for a sample taken after this

    # -- sampling -------------------------------------------------------------
    def sample(self) -> Facts:
        procs = self.follower.sample()
        if self.pane_pid is None:
            _, _, self.pane_pid = tmux_pane(self.cfg.session)
        pane = self.pane_pid
        if (
            pane is not None
            and all(p.pid != pane for p in procs)
            and os.path.exists(f"/proc/{pane}")
        ):
            # not seen yet, or read before its exec: judged again now, for without it
            # its children would look orphaned, a decision taken at once
            self.follower.add(pane)
            procs = self.follower.sample()
        session, dead = True, False
        if not procs:  # only then does the pane's fate matter (and cost a tmux call)
            session, dead, _ = tmux_pane(self.cfg.session)
        self.log.read()
        self.steps = self.log.steps()
        try:
            st = os.stat(self.log.path)
            size, age = st.st_size, max(0.0, time.time() - st.st_mtime)
        except OSError:
            size, age = None, None
        return Facts(
            reachable=True,
            error=None,
            live_procs=tuple(ProcFact(p.pid, p.ppid, p.state) for p in procs),
            pane_pid=self.pane_pid,
            exit_code=read_exit_code(self.dir),
            session=session,
            pane_dead=dead,
            log_size=size or None,
            output_age=age if size else None,
        )

    def watch(self) -> str:
        """Samples until told to stop or the coordinator is lost; returns why it ends."""
        cfg = self.cfg
        while not self.stopping.is_set():
            facts = self.sample()
            with self.lock:
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

    def kill(self, why: str, grace: float | None = None) -> dict[str, Any]:
        print(f"sentinel: killing this node's ranks: {why}", flush=True)
        self.killed = True
        try:
            res = killer.kill_tagged(
                re.escape(self.cfg.entry),
                grace=self.cfg.grace if grace is None else grace,
                session=self.cfg.session,
                ports=self.cfg.ports,
                exclude=(os.getpid(),),
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
                facts, at = self.facts, self.sampled_at
            now = time.monotonic()
            wanted = self.wanted is not None and at > self.wanted
            if facts is not None and (facts != sent_facts or now - sent_at >= hb or wanted):
                wire = facts.to_wire()
                ch.send(
                    "snap", run=self.cfg.run, age=round(now - at, 4), facts=wire, steps=self.steps
                )
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
            args = (ch, msg.get("s"), why, grace)
            threading.Thread(target=self._kill_and_report, args=args).start()
        elif kind == "stop":
            self.stopping.set()
            self.poke.set()

    def _kill_and_report(self, ch: frames.Channel, seq: object, why: str, grace: float) -> None:
        result = self.kill(why, grace)
        try:
            ch.send("done", re=seq, ok=True, result=result)
        except OSError:
            pass


def write_json(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    """`run RUN_DIR`: start the node's sentinel, detached; prints `SENTINEL <pid>`."""
    if len(argv) != 1:
        print("usage: run RUN_DIR", file=sys.stderr)
        return 2
    run_dir = os.path.abspath(argv[0])
    try:
        cfg, secret = load(run_dir)
    except (OSError, BadWatchFile) as exc:
        print(f"sentinel: {exc}", file=sys.stderr)
        return 2
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
