"""The sentinel: one per node of a run, beside the ranks, in a session of its own.

Why it exists: the manager's watchdog runs wherever the user is, and a laptop that
sleeps or loses its network either leaves the job unguarded or tears a healthy job
down. The sentinel watches its own ranks from /proc at `interval`, tells the
coordinator on the main node what it sees, and kills its node's part of the job when
told to. If it hears nothing from the coordinator for `unreachable_after` while its
ranks run, the job has lost its main: it takes their stacks (they are likely blocked
in a collective with the main's, and exist only until the kill), tears them down and
says why in `lost.json` (a job without its main cannot go on; its GPUs should not wait
30 min); with no ranks left it says so all the same (lostword.py). Then, when the chain
could go on, it gives its word to the spare that succeeds the main and joins the next
epoch when that one leads (lostmain.py); else it leaves. The main's sentinel also keeps
the coordinator up (respawn.py): a coordinator that died is started again before the
others call it lost.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import traceback
from typing import Any

from mntui.sessions.node.chain.succession import Word
from mntui.sessions.node.files.plainfile import plain
from mntui.sessions.node.proc import attempt, daemon, killer, respawn
from mntui.sessions.node.proc.attempt import Attempt
from mntui.sessions.node.proc.logtail import LogTail
from mntui.sessions.node.rules import firstfail
from mntui.sessions.node.wire import chaincopy, frames
from mntui.sessions.node.wire.facts import Facts
from mntui.sessions.node.wire.watchcfg import WatchConfig, load_for

from . import gpus, lostmain, nodesnap, spysample, stackcap
from .lostword import lost_why, say_lost
from .sentinellink import FOLLOWING, Link

# The stacks before a lost node's kill wait no longer than a freeze's (teardown.py's
# FROZEN_BUDGET, for the same reasons): the ranks are likely blocked with the main's.
LOST_STACKS = 1.5


# An idle spare's facts: no /proc walk, no tmux call a sample for a node that runs
# nothing of the job (the coordinator ignores them: the spare is in no attempt's layout).
IDLE = Facts(True, None, (), None, None, False, False, None, None)


class Sentinel(Link):
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
        self.killing = threading.Event()  # a kill under way: no samples meanwhile
        self.wanted: float | None = None  # the coordinator asked for a sample taken after this
        # keep the coordinator (the epoch's main) and the guard (any node but the launch's
        # main) up
        self.keepers: list[respawn.Keeper] = []
        self.bundle: list[str] | None = None  # how to start a watcher as this one was
        self.gpus = gpus.Reader()  # the node's GPUs, on a thread of their own (gpus.py)
        self.snapshot = nodesnap.Builder()  # the node as a poll sees it, for `status`
        self.copy = chaincopy.load(run_dir, cfg.run)  # the chain as last shared (chaincopy.py)
        self.lost: Word | None = None  # its word once it lost the main (lostmain.py)
        self.heir: str | None = None  # the spare that word goes to
        self.stepped_at: float | None = None  # wall clock: its ranks' step last advanced
        self.tended = 0.0  # monotonic: lostmain.tend's next try
        self.step: int | None = None

    # -- sampling -------------------------------------------------------------
    def sample(self) -> tuple[Attempt, Facts]:
        with self.lock:  # a restart may swap the attempt under us
            att = self.att
        if att.number == 0 and self.cfg.node in self.cfg.spares:
            return att, IDLE  # nothing of the job here until the coordinator swaps it in
        facts = att.sample(self.cfg.session)
        self.steps = att.log.steps()
        step = self.steps.get("step")
        if isinstance(step, int) and (self.step is None or step > self.step):
            self.step, self.stepped_at = step, time.time()
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
            if self.killing.is_set():  # no sample: its /proc reads and the kill's would
                self.keep_up()  # compete for a CPU (64 sentinels on one host)
                self.poke.wait(cfg.interval)
                self.poke.clear()
                continue
            att, facts = self.sample()
            with self.lock:
                if att is not self.att:  # a sample of the attempt before a restart
                    continue
                if facts.pane_pid is not None or not facts.live_procs:
                    # without the pane's pid its children would look orphaned (a kill
                    # at once): no word until tmux answers; a silence is judged as one
                    self.facts, self.sampled_at = facts, time.monotonic()
            self.keep_up()
            cfg = self.cfg  # a successor's epoch joined meanwhile (lostmain.join)
            silent = time.monotonic() - self.heard
            if self.lost is None and silent >= cfg.rules.unreachable_after:  # ranks or none
                why, lost_at = self.lose(silent, bool(facts.live_procs))
                if not lostmain.stay(self, lost_at):
                    return why
            gone = lostmain.patient(self, time.time())
            if gone is not None:
                return gone
            lostmain.tend(self, time.monotonic())
            self.poke.wait(cfg.interval)
            self.poke.clear()
        return "stopped by the coordinator"

    def lose(self, silent: float, ranks: bool) -> tuple[str, float]:
        """Its ranks torn down, and its word written; why, and when it lost the main."""
        why = lost_why(f"{self.cfg.coord_host}:{self.cfg.coord_port}", silent, ranks)
        lost_at = time.time()
        result = None
        if ranks:
            budget = min(LOST_STACKS, self.cfg.capture_budget)
            ask = stackcap.Ask(self.cfg.main, "unreachable", why, lost_at, budget)
            result = self.kill(f"lost the coordinator ({silent:.0f} s)", stacks=ask)
        with self.lock:
            run = self.att.run
        say_lost(self.dir, lost_at, time.time(), why, result, self.cfg.epoch, run)
        return why, lost_at

    def keep_up(self) -> None:
        for keeper in list(self.keepers):
            keeper.check()

    def drop_link(self) -> None:
        """The link's channel closed: it connects again, where lostmain.target says."""
        ch = self.channel
        if ch is not None:
            ch.close()

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
            result["cause"] = self._cause()
            return result

    def _cause(self) -> dict[str, Any] | None:
        """This node's part of the attempt's end (firstfail.py), read once its ranks are
        gone and every line is written: the coordinator names the first failure by it."""
        with self.lock:
            att = self.att
        try:
            return firstfail.node_cause(att.dir, self.cfg.node).to_wire()
        except Exception:  # a log it cannot read: no cause, never a kill that fails
            traceback.print_exc()
            return None

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
        self.killing.set()
        try:
            with self.lock:
                att = self.att
            target = killer.Target(
                job=re.escape(att.entry),
                session=self.cfg.session,
                ports=self.cfg.ports,
                runs=(att.dir,),
            )
            res = killer.kill(
                target,
                grace=self.cfg.grace if grace is None else grace,
                exclude=(os.getpid(),),
                known=att.follower.identities,
            )
        except Exception as exc:  # said to the coordinator, never a silent sentinel
            traceback.print_exc()
            return {"error": f"the kill failed on the node: {type(exc).__name__}: {exc}"[:300]}
        finally:
            self.killing.clear()
        return res.as_dict()

    def resume(self) -> str:
        """A sentinel started again (respawn.py) follows the attempt its predecessor
        followed, and reads the log from near its end (its steps are the last ones; a
        long log read from its start would take minutes of samples, an old step meanwhile)."""
        said = "following the first attempt"
        try:
            with open(os.path.join(self.dir, FOLLOWING), encoding="utf-8", opener=plain) as f:
                data = json.loads(f.read(4096))
            k = data.get("attempt") if isinstance(data, dict) else None
            if type(k) is int and k >= 1:
                self.att = attempt.follow(self.dir, k, self.cfg)
                said = f"following attempt {k}, run {self.att.run}"
        except FileNotFoundError:
            pass
        except (OSError, ValueError, RuntimeError) as exc:
            said += f" ({FOLLOWING}: {exc})"
        _to_tail(self.att.log.path, self.att.log)
        again = lostmain.resume(self)  # it had lost the main: its word, given again
        return said if again is None else f"{said}; {again}"

    def coordinator_started(self) -> None:
        """The coordinator was just started again here: it is not silent."""
        self.heard = time.monotonic()


def main(argv: list[str]) -> int:
    """`run RUN_DIR`: start the node's sentinel, detached; prints `SENTINEL <pid>`."""
    loaded = load_for(argv, "sentinel")
    if isinstance(loaded, int):
        return loaded
    run_dir, cfg, secret = loaded
    bundle = respawn.bundle_argv()  # before the daemon leaves the shell's directory
    pid_file = os.path.join(run_dir, "sentinel.pid")
    again = os.path.exists(pid_file)  # a predecessor's: this one was started again
    ready = daemon.daemonize(os.path.join(run_dir, "sentinel.log"), pid_file)
    s = Sentinel(cfg, secret, run_dir)
    s.bundle = bundle
    if again:
        print(f"sentinel: started again: {s.resume()}", flush=True)
    if cfg.is_main:
        keeper = respawn.Keeper(run_dir, cfg.node, cfg.tag, "coord", bundle, s.coordinator_started)
        s.keepers.append(keeper)
    if cfg.node != cfg.nodes[0]:  # launched with a guard (guard.py): a worker, a spare
        s.keepers.append(respawn.Keeper(run_dir, cfg.node, cfg.tag, "guard", bundle))
    signal.signal(signal.SIGTERM, lambda *_: _leave(run_dir, "SIGTERM (a kill by tag)"))
    threading.Thread(target=s.link, daemon=True).start()
    spysample.start(s)  # the straggler's samples, every sample_every, on their own thread
    s.gpus.start()  # after the daemon's fork, as every thread
    ready(f"{cfg.node}")
    why = s.watch()
    s.stopping.set()
    respawn.goodbye(run_dir, "sentinel", why)  # not started again by the coordinator
    print(f"sentinel: exits: {why}", flush=True)
    return daemon.leave()  # a kill under way ends first; no interpreter teardown


def _leave(run_dir: str, why: str) -> None:
    """A SIGTERM is a kill by tag (`mntui kill`): leave, and say so first, so the
    coordinator does not start this sentinel again under the kill's sweep."""
    respawn.goodbye(run_dir, "sentinel", why)
    print(f"sentinel: exits: {why}", flush=True)
    os._exit(0)


def _to_tail(path: str, log: LogTail) -> None:
    """`log` reads on from the start of the last whole line within its last chunk."""
    try:
        with open(path, "rb", opener=plain) as f:
            size = os.fstat(f.fileno()).st_size
            at = max(0, size - (64 << 10))
            f.seek(at)
            head = f.read(64 << 10)
    except OSError:
        return
    cut = head.find(b"\n") if at > 0 else -1
    log.offset = at + cut + 1 if at > 0 and cut >= 0 else at
