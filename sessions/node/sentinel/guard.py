"""A worker's guard: starts the node's sentinel again when it dies, and nothing else.

Why: on the main, the sentinel and the coordinator keep each other up (respawn.py). A
worker's sentinel had nobody: one that died alone (a SIGKILL, the OOM killer, a bug)
left its node silent, and after `unreachable_after` the coordinator tore a healthy job
down for it, the very harm a watch on the cluster is there to spare. The guard is that
other half on a worker (and a spare): a process of its own session, tagged
`<tag>/guard` so a kill by tag takes it, that reads one /proc file a second; the
sentinel keeps the guard up in turn. A sentinel that leaves of its own will (the chain
over, the user's kill, its coordinator lost) says so first, and the guard leaves with
it; so does a guard past its respawn budget.
"""

from __future__ import annotations

import os
import select
import signal
import time

from mntui.sessions.node.proc import daemon, respawn
from mntui.sessions.node.wire.watchcfg import load_for

ROLE = "guard"
GONE = 0.02  # seconds before the check after the sentinel's exit (no busy loop meanwhile)


def main(argv: list[str]) -> int:
    """`guard RUN_DIR`: start the node's guard, detached; prints `GUARD <pid>`."""
    loaded = load_for(argv, ROLE)
    if isinstance(loaded, int):
        return loaded
    run_dir, cfg, _ = loaded
    bundle = respawn.bundle_argv()  # before the daemon leaves the shell's directory
    log, pid = os.path.join(run_dir, "guard.log"), os.path.join(run_dir, "guard.pid")
    ready = daemon.daemonize(log, pid, label="GUARD")
    keeper = respawn.Keeper(run_dir, cfg.node, cfg.tag, "sentinel", bundle)
    signal.signal(signal.SIGTERM, lambda *_: _leave(run_dir, "SIGTERM (a kill by tag)"))
    ready(f"guard of {cfg.node}'s sentinel")
    sentinel_pid = os.path.join(run_dir, respawn.PID_FILES["sentinel"])
    while keeper.gave_up is None and os.path.exists(sentinel_pid):
        keeper.check()
        _until_gone(None if keeper.busy.locked() else keeper.known, cfg.interval)
    why = keeper.gave_up or "the sentinel's pid file is gone (the run's files removed)"
    _leave(run_dir, f"the sentinel is not started again: {why}")
    return 0


def _until_gone(known: respawn.Ident | None, seconds: float) -> None:
    """Up to `seconds`, woken at once when the sentinel exits (its pidfd): a sentinel
    that leaves with the user's kill is followed by its guard within milliseconds, so
    the kill's "nothing tagged left" waits for no poll of ours. A SIGTERM's handler
    exits mid-wait."""
    try:
        fd = os.pidfd_open(known.pid) if known is not None else None
    except (AttributeError, OSError):  # gone already, or no pidfds (kernel < 5.3)
        fd = None
    try:
        if known is not None and respawn.live(known.pid) != known:
            time.sleep(GONE)  # it exited since the check: the next one says what to do
        elif fd is not None:
            select.select([fd], [], [], seconds)
        else:  # not known yet, a respawn under way, or no pidfds: a poll
            time.sleep(seconds)
    finally:
        if fd is not None:
            os.close(fd)


def _leave(run_dir: str, why: str) -> None:
    respawn.goodbye(run_dir, ROLE, why)
    print(f"guard: exits: {why}", flush=True)
    os._exit(0)
