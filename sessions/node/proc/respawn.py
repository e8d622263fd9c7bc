"""Each node's two watchers keep each other up: on the main, its sentinel starts the
coordinator again when that dies, the coordinator its sentinel; on a worker, the
sentinel and its guard (guard.py) do the same for each other.

Why: both run beside the job on the main, and either may die alone (a SIGKILL, the OOM
killer, a bug). A dead coordinator leaves every sentinel without a word; after
`unreachable_after` they tear the healthy job down as for a lost main. A dead main
sentinel leaves the main's ranks unwatched. Each is on the same node as the other, so
it can tell a death from a dropped connection by the process itself (its pid file, then
the pid's start time and tag in /proc: a reused pid is no watcher of ours), and start
the other exactly as the launch did (`python3 -I -S <bundle> coord|run|guard RUN_DIR`, with
its tag, double-forked by daemon.py); the coordinator resumes the chain from its files.

A watcher that leaves of its own will (the chain ended, the user's kill, a SIGTERM of a
kill by tag, a sentinel that lost its coordinator) says so first in `<role>.exited`
with its pid: that one is not started again. Respawns are bounded (MAX in WINDOW
seconds, counted in `respawn-<role>.json` across the processes that respawn); past it
the keeper gives up and says why in its log, the journal and that file. Each respawn
is one journal line on the main (`coord/journal.jsonl`), which `status` shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mntui.sessions.node.files.plainfile import plain, read_plain
from mntui.sessions.node.wire.watchcfg import write_json

from .proctree import parse_stat, read_bounded

MAX = 5  # respawns of one watcher ...
WINDOW = 60.0  # ... in this many seconds, then the keeper gives up
SPAWN_TIMEOUT = 40.0  # seconds: past daemon.daemonize's own wait for the ready word
VERBS = {"coord": "coord", "sentinel": "run", "guard": "guard"}
PID_FILES = {"coord": "coord.pid", "sentinel": "sentinel.pid", "guard": "guard.pid"}
NAMES = {"coord": "coordinator", "sentinel": "sentinel", "guard": "guard"}


def bundle_argv() -> list[str] | None:
    """How to start a watcher as this one was started (`python3 -I -S <bundle>.pyz`), or
    None when this one does not run from the bundle (then nothing is respawned)."""
    archive = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if not archive.endswith(".pyz") or not os.path.isfile(archive) or not sys.executable:
        return None
    return [sys.executable, "-I", "-S", archive]


@dataclass(frozen=True)
class Ident:
    """One process despite pid reuse: its pid and start time (ticks since boot)."""

    pid: int
    start: int


def live(pid: int) -> Ident | None:
    """`pid` as a live process (a zombie is dead), or None."""
    data = read_bounded(f"/proc/{pid}/stat", 4096)
    line = parse_stat(pid, data) if data is not None else None
    if line is None or line.proc.state in ("Z", "X", "x"):
        return None
    return Ident(pid, line.proc.start)


def read_pid(path: str) -> int | None:
    raw = read_plain(path, 32)
    text = raw.decode("ascii", "replace").strip() if raw is not None else ""
    return int(text) if text.isdigit() and 0 < int(text) < 1 << 31 else None


def goodbye(run_dir: str, role: str, why: str) -> None:
    """Said by a watcher that leaves of its own will, before it does: not respawned."""
    try:
        write_json(exited_path(run_dir, role), {"pid": os.getpid(), "why": why[:300],
                                                "at": time.time()})  # fmt: skip
    except OSError:
        pass  # a full disk: the worst case is a respawn that finds the chain over


def exited_path(run_dir: str, role: str) -> str:
    return os.path.join(run_dir, f"{role}.exited")


def said_goodbye(run_dir: str, role: str, pid: int) -> bool:
    raw = read_plain(exited_path(run_dir, role), 4096)
    try:
        data = json.loads(raw) if raw is not None else None
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("pid") == pid


def journal(run_dir: str, kind: str, node: str, **data: Any) -> None:
    """One line of the coordinator's journal (coordstate.Board.journal's shape), from
    whichever watcher is alive to write it."""
    line = json.dumps({"t": time.time(), "kind": kind, "node": node, "data": data})
    try:
        path = os.path.join(run_dir, "coord", "journal.jsonl")
        with open(path, "a", encoding="utf-8", opener=plain) as f:
            f.write(line + "\n")
    except OSError:
        pass


class Keeper:
    """One watcher's watch over the other (`role`): `check()` from its loop costs one
    read of /proc while the other lives; when it died without a goodbye, it is started
    again on a thread of its own (the caller's loop goes on), within the budget."""

    def __init__(
        self,
        run_dir: str,
        node: str,
        tag: str,
        role: str,
        argv: list[str] | None,
        started: Callable[[], None] | None = None,
    ) -> None:
        self.dir, self.node, self.role, self.argv = run_dir, node, role, argv
        self.tag = f"{tag}/{role}"  # the other's own tag, as the launch gave it
        self.name = NAMES[role]
        self.known: Ident | None = None
        self.busy = threading.Lock()
        self.gave_up: str | None = None
        self.started = started  # told after a respawn (the sentinel: its silence clock)
        self.lost_at = 0.0

    def check(self) -> None:
        if self.gave_up is not None or self.argv is None or self.busy.locked():
            return
        if self.known is not None and live(self.known.pid) == self.known:
            return
        pid = read_pid(os.path.join(self.dir, PID_FILES[self.role]))
        if pid is None:
            return  # not started yet (the launch starts the coordinator, then us)
        now = live(pid)
        if now is not None and self._tagged(pid):
            self.known = now
            return
        if said_goodbye(self.dir, self.role, pid):
            self.gave_up = f"the {self.name} exited of its own will"
            return
        if not self.busy.acquire(blocking=False):
            return
        self.lost_at = time.monotonic()
        threading.Thread(target=self._respawn, args=(pid,), daemon=True).start()

    def start(self) -> str:
        """Starts the other now, unless it runs (a first start, not a respawn: nothing
        of the budget): the coordinator of a spare that succeeds a lost main
        (lostmain.py). What was done, in words."""
        with self.busy:
            pid = read_pid(os.path.join(self.dir, PID_FILES[self.role]))
            now = live(pid) if pid is not None else None
            if pid is not None and now is not None and self._tagged(pid):
                self.known = now
                return f"the {self.name} runs already (pid {pid})"
            got, said = self._spawn()
            if got is None:
                return f"the {self.name} did not start: {said}"
            self.known = live(got)
            journal(self.dir, "started", self.node, who=self.name, pid=got)
            return f"the {self.name} started (pid {got})"

    def _tagged(self, pid: int) -> bool:
        raw = read_bounded(f"/proc/{pid}/environ", 1 << 20)
        return raw is not None and f"MNTUI_RUN={self.tag}".encode() in raw.split(b"\0")

    def _respawn(self, dead: int) -> None:
        try:
            spent = self._spend()
            if spent is not None:
                self._give_up(dead, spent)
                return
            t0 = time.monotonic()
            pid, said = self._spawn()
            took = round(time.monotonic() - t0, 3)
            gap = round(time.monotonic() - self.lost_at, 3)
            if pid is None:
                print(f"respawn: the {self.name} (pid {dead}) did not start again: {said}",
                      flush=True)  # fmt: skip
                journal(self.dir, "respawn-failed", self.node, who=self.name, pid_was=dead,
                        why=said[:200])  # fmt: skip
                return
            self.known = live(pid)
            print(f"respawn: the {self.name} (pid {dead}) died; started again as pid {pid} "
                  f"in {took:.2f} s", flush=True)  # fmt: skip
            journal(self.dir, "respawn", self.node, who=self.name, pid_was=dead, pid=pid,
                    seconds=took, gap=gap)  # fmt: skip
            if self.started is not None:
                self.started()
        finally:
            self.busy.release()

    def _spawn(self) -> tuple[int | None, str]:
        assert self.argv is not None
        env = dict(os.environ, MNTUI_RUN=self.tag)
        try:
            proc = subprocess.run(
                [*self.argv, VERBS[self.role], self.dir],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=SPAWN_TIMEOUT,
                env=env,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"{type(exc).__name__}: {exc}"
        words = proc.stdout.split("\n", 1)[0].split()
        if proc.returncode == 0 and len(words) >= 2 and words[1].isdigit():
            return int(words[1]), proc.stdout.strip()
        said = (proc.stderr.strip() or proc.stdout.strip()).split("\n")[-1:]
        return None, f"exit {proc.returncode}: {said[0] if said else ''}"[:300]

    def _spend(self) -> str | None:
        """One respawn from the budget, kept in a file (the keeper itself may be a
        respawned process); None when granted, else why not."""
        path = os.path.join(self.dir, f"respawn-{self.role}.json")
        raw = read_plain(path, 1 << 16)
        try:
            data = json.loads(raw) if raw is not None else {}
        except ValueError:
            data = {}
        now = time.time()
        times = data.get("times") if isinstance(data, dict) else None
        recent = [t for t in times or [] if isinstance(t, (int, float)) and now - t < WINDOW]
        if len(recent) >= MAX:
            return f"{len(recent)} respawns of the {self.name} in {WINDOW:.0f} s"
        try:
            write_json(path, {"times": [*recent, now], "gave_up": None})
        except OSError:
            pass
        return None

    def _give_up(self, dead: int, why: str) -> None:
        self.gave_up = why
        line = f"no more respawns: {why}; the {self.name} stays down"
        print(f"respawn: {line}", flush=True)
        journal(self.dir, "respawn-gave-up", self.node, who=self.name, pid_was=dead, why=why)
        path = os.path.join(self.dir, f"respawn-{self.role}.json")
        raw = read_plain(path, 1 << 16)
        try:
            data = json.loads(raw) if raw is not None else {}
            data = data if isinstance(data, dict) else {}
            write_json(path, {**data, "gave_up": line, "gave_up_at": time.time()})
        except (OSError, ValueError):
            pass
