"""A restart's main, ready for its workers: the launch's own rule (`launch.ready`),
checked on the main by the coordinator that runs there.

Why the launch's rule, and not only the port: the launch starts the workers once the
main's master port listens (`port`), its output matches `ready_pattern` (`log`), or
`ready_delay` seconds have passed (`delay`), and says at once a main that died before
(launch/startchecks.py: ready_script). A restart's workers wait on the same thing, or a
job whose main is ready by another sign than its port would have its workers start
too early (or wait out `ready_timeout`) on every restart. The pattern was checked at
load for `grep -E` and is matched by `grep -qE` here too, as the launch's check does:
Python's `re` is another dialect (`[[:digit:]]`, back-references, a lone `{`), so one
rule is one engine. grep gets the pattern as one argument, never through a shell.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Protocol

from mntui.sessions.node.proc import attempt, daemon
from mntui.sessions.node.proc.listens import listening_ports
from mntui.sessions.node.wire.watchcfg import WatchConfig

POLL = 0.2  # seconds between checks (the launch's is one SSH round trip, ~0.1 s)
# within PULSE of the chain's thread, a round's grep and tmux take milliseconds
GREP_TIMEOUT = 10.0  # seconds for one grep of the main's output


class Pulsing(Protocol):
    def pulse(self) -> None: ...


class Asker(Protocol):
    """What the wait needs of the coordinator (relaunch.Starter): its board is pulsed
    each round, or its heartbeats stop (coordpeers.py PULSE, coordinator.py `beat`)."""

    @property
    def board(self) -> Pulsing: ...

    cfg: WatchConfig
    done: threading.Event

    def kill_requested(self) -> tuple[float, str | None] | None: ...


def what(cfg: WatchConfig) -> str:
    """What the wait is for, in the launch's words (startchecks.wait_ready)."""
    if cfg.ready == "log":
        return f"output matching {cfg.ready_pattern!r}"
    if cfg.ready == "delay":
        return f"{cfg.ready_delay:g}s"
    return f"port {cfg.master_port} to listen"


def wait(c: Asker, first_dir: str, k: int) -> str | None:
    """None once attempt `k`'s main (this node, its files beside `first_dir`) is ready;
    else why not: the user's kill, the main gone before, or `ready_timeout` spent."""
    cfg = c.cfg
    t0 = time.monotonic()
    end = t0 + cfg.ready_timeout
    try:
        run_dir = attempt.placed(first_dir, k, cfg)[2]
    except (OSError, ValueError, RuntimeError) as exc:
        return f"the main's attempt {k} cannot be followed: {exc}"
    while True:
        c.board.pulse()
        if c.kill_requested() is not None:
            return "the user's kill came first"
        gone = _gone(run_dir, cfg.session)
        if gone is not None:
            return gone
        if _ready(cfg, run_dir, time.monotonic() - t0):
            return None
        if time.monotonic() >= end:
            return f"the main was not ready within {cfg.ready_timeout:g}s (waited for {what(cfg)})"
        c.done.wait(POLL)


def _gone(run_dir: str, session: str) -> str | None:
    """The main's job ended before it was ready: its pane's state read before its exit
    code, as the launch reads them (a pane dead has written its code)."""
    up, dead, _ = attempt.tmux_pane(session)
    code = attempt.read_exit_code(run_dir)
    if code is not None:
        return f"the main exited before it was ready (exit code {code})"
    if not up:
        return "the main's tmux session is gone before it was ready"
    if dead:
        return "the main's pane died before it was ready"
    return None


def _ready(cfg: WatchConfig, run_dir: str, waited: float) -> bool:
    if cfg.ready == "delay":
        return waited >= cfg.ready_delay
    if cfg.ready == "log":
        return _matches(cfg.ready_pattern or "", os.path.join(run_dir, "output.log"))
    return cfg.master_port in listening_ports()


def _matches(pattern: str, path: str) -> bool:
    """`grep -qE -- PATTERN FILE`, as the launch's ready check runs it."""
    try:
        return (
            subprocess.run(
                ["grep", "-qE", "--", pattern, path],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=GREP_TIMEOUT,
                env=daemon.clean_env(os.environ),
            ).returncode
            == 0
        )
    except (OSError, subprocess.SubprocessError):
        return False
