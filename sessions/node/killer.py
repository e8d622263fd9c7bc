"""Kill a node's part of a run by tag, on the node itself: the sentinel's teardown.

The same steps as the shell kill (`launch/kill.py: kill_script` over `sh/lib.sh`), so
a teardown decided on the cluster leaves a node as clean as `mntui kill` does: find by
tag, SIGCONT (a stopped process cannot act on SIGTERM) + SIGTERM, SIGKILL what is left
after the grace, sweep for anything forked meanwhile, close the tmux session, then wait
a little for the tagged processes to go and the job's ports to be free. A tag is an
environment entry matched whole (`grep -zxE`), never a process name.

Where it goes further than the shell, it is only in what it can know: each process is
held by its start time (and a pidfd where the kernel has them), so a PID that a dead
process freed and another process took is never signalled nor counted; a process found
and signalled that still lives at the end is `left` even if its environment can no
longer be read.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from .listens import listening_ports  # the one reader of LISTEN rows
from .proctree import STAT_LIMIT, parse_stat, read_bounded

__all__ = ["KillResult", "kill_tagged", "listening_ports"]

POLL = 0.05  # the shell's `sleep 0.05`
SWEEPS = 5
SETTLE = 3.0  # how long the end waits for tagged processes to go and ports to be free
ENVIRON_MAX = 256 * 1024  # an environment read past this is cut, its last entry dropped
CMDLINE_MAX = 300  # as mntui_b64
TMUX_TIMEOUT = 2.0  # per tmux call: a stopped tmux server must not hold the teardown


@dataclass(frozen=True)
class KillResult:
    found: tuple[tuple[int, str, str], ...]  # (pid, state letter, command line)
    sigkilled: tuple[int, ...]
    left: tuple[int, ...]
    session_killed: bool
    port_holders: tuple[int, ...]  # ports of `ports` still listened on after the wait
    seconds: float
    # where the seconds went (scan, stop, settle, session): a slow teardown's
    # report says which step was slow
    phases: tuple[tuple[str, float], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "found": [list(f) for f in self.found],
            "sigkilled": list(self.sigkilled),
            "left": list(self.left),
            "session_killed": self.session_killed,
            "port_holders": list(self.port_holders),
            "seconds": self.seconds,
            "phases": {k: round(v, 3) for k, v in self.phases},
        }


@dataclass(frozen=True)
class _Stat:
    state: str  # "?" when the line cannot be read as a stat line: alive, unreadable
    ppid: int | None
    start: int | None  # starttime in clock ticks since boot: a PID plus this is one process


@dataclass
class _Proc:
    pid: int
    start: int | None
    fd: int | None  # a pidfd, so a signal can only reach this very process


def _stat(proc: str, pid: int) -> _Stat | None:
    """None once the process is gone. A line of no known shape is "alive, unreadable",
    as the shell reads it: never taken for gone."""
    raw = read_bounded(f"{proc}/{pid}/stat", STAT_LIMIT)
    if raw is None:
        return None
    got = parse_stat(pid, raw)
    if got is None:
        return _Stat("?", None, None)
    return _Stat(got.proc.state, got.proc.ppid, got.proc.start)


def _lineage(proc: str, pid: int) -> set[int]:
    """The caller and its ancestors: the caller may itself carry the tag."""
    seen: set[int] = set()
    while pid > 1 and pid not in seen and len(seen) < 256:
        seen.add(pid)
        st = _stat(proc, pid)
        if st is None or st.ppid is None:
            break
        pid = st.ppid
    return seen


def literal_head(pattern: str) -> bytes:
    """The text every whole match of `pattern` starts with (`MNTUI_RUN=job/` for the
    kill's patterns): a process whose environment holds no entry starting so cannot
    match, and a bytes search says that far faster than a regex over every entry —
    on a host of many processes (or 64 fake nodes on one /proc) the scan was most of a
    teardown's time."""
    if _top_level_bar(pattern):  # an alternative need not start so
        return b""
    head = []
    for c in pattern:
        if not (c.isascii() and (c.isalnum() or c in "_=/")):
            break
        head.append(c)
    if head and pattern[len(head) : len(head) + 1] in ("*", "?", "{"):
        head.pop()  # `ab*`: the b is optional
    return "".join(head).encode()


def _top_level_bar(pattern: str) -> bool:
    depth, i, klass = 0, 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if klass:
            klass = c != "]"
        elif c == "[":
            klass = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth <= 0:
            return True
        i += 1
    return False


def _tagged(proc: str, pid: int, pattern: re.Pattern[str], head: bytes = b"") -> bool:
    raw = read_bounded(f"{proc}/{pid}/environ", ENVIRON_MAX + 1)
    if not raw:
        return False
    if head and not raw.startswith(head) and b"\0" + head not in raw:
        return False
    entries = raw.split(b"\0")
    if len(raw) > ENVIRON_MAX:
        entries.pop()  # cut short: a piece of an entry must never match as a whole one
    return any(pattern.fullmatch(e.decode(errors="surrogateescape")) for e in entries)


def _tmux_env() -> dict[str, str]:
    """A tmux server this starts must never carry a tag (a later kill would find it),
    nor attach to the tmux the caller runs in."""
    drop = ("TMUX", "TMUX_PANE")
    return {k: v for k, v in os.environ.items() if not k.startswith("MNTUI_") and k not in drop}


def _tmux_ok(tmux: Sequence[str], *args: str) -> bool:
    try:
        done = subprocess.run(
            [*tmux, *args],
            env=_tmux_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=TMUX_TIMEOUT,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _wait_while(seconds: float, busy: Callable[[], bool]) -> None:
    """mntui_wait_while: check, then every POLL while busy, for at most `seconds`."""
    end = time.monotonic() + seconds
    while busy() and time.monotonic() < end:
        time.sleep(POLL)


class _Killer:
    def __init__(self, pattern: str, proc: str, exclude: Collection[int]) -> None:
        self.pattern = re.compile(pattern)
        self.head = literal_head(pattern)
        self.proc = proc
        self.uid = os.geteuid()
        self.skip = _lineage(proc, os.getpid()) | set(exclude)
        self.held: dict[int, _Proc] = {}
        self.found: dict[int, tuple[int, str, str]] = {}
        self.sigkilled: dict[int, None] = {}
        self.untagged: dict[int, int] = {}  # pid -> /proc inode, judged not of the job

    def close(self) -> None:
        for p in self.held.values():
            if p.fd is not None:
                os.close(p.fd)
                p.fd = None

    def scan(self) -> list[_Proc]:
        """mntui_scan: our processes whose environment holds a tag entry."""
        hits: list[_Proc] = []
        try:
            entries = list(os.scandir(self.proc))
        except OSError:
            return hits
        for entry in entries:
            if not (entry.name.isascii() and entry.name.isdigit()):
                continue
            pid = int(entry.name)
            try:
                ino = entry.inode()  # readdir's own d_ino: no system call
            except OSError:
                continue
            if pid in self.skip or self.untagged.get(pid) == ino:
                continue
            # the environment first: on a host of many processes nearly none is tagged,
            # and one bounded read says so (another user's is unreadable, so untagged)
            held = self._hold(pid) if self._ours(pid) else None
            if held is not None:
                hits.append(held)
            elif pid not in self.held:
                # judged once per process (its /proc inode: a reused PID is a new one):
                # the kill scans again every 50 ms while it waits, and on a host of many
                # processes re-reading every environment each time was most of its cost
                self.untagged[pid] = ino
        return hits

    def _ours(self, pid: int) -> bool:
        """Tagged, and of this user: a process of another user that carries a tag (root
        reads every environment) is never ours to kill."""
        if not _tagged(self.proc, pid, self.pattern, self.head):
            return False
        try:
            return os.stat(f"{self.proc}/{pid}").st_uid == self.uid
        except OSError:
            return False

    def _hold(self, pid: int) -> _Proc | None:
        first = _stat(self.proc, pid)
        if first is None:
            return None
        known = self.held.get(pid)
        if known is not None and known.start == first.start:
            return known
        fd: int | None
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            fd = None  # no pidfds here (kernel < 5.3) or no fds left: start times only
        again = _stat(self.proc, pid)
        if again is None or again.start != first.start:  # gone, or its PID taken meanwhile
            if fd is not None:
                os.close(fd)
            return None
        if known is not None and known.fd is not None:  # its PID is another process's now
            os.close(known.fd)
            known.fd = None  # a closed number may be reused: never signal through it again
        self.held[pid] = _Proc(pid, first.start, fd)
        return self.held[pid]

    def alive(self, procs: Sequence[_Proc]) -> list[_Proc]:
        """mntui_alive: those that still exist and are no zombies."""
        out = []
        for p in procs:
            st = _stat(self.proc, p.pid)
            if st is None or st.state in ("Z", "X"):
                continue
            if p.start is not None and st.start is not None and st.start != p.start:
                continue  # the PID is another process's now: ours is gone
            out.append(p)
        return out

    def signal(self, procs: Sequence[_Proc], sig: signal.Signals) -> None:
        for p in procs:
            try:
                if p.fd is not None:
                    signal.pidfd_send_signal(p.fd, sig)
                elif self.alive([p]):
                    os.kill(p.pid, sig)
            except OSError:
                continue

    def note(self, procs: Sequence[_Proc]) -> None:
        """mntui_procinfo: what each was when first found. A sweep finds it again while
        its SIGKILL lands, when its command line already reads empty: that reading is
        not what it was."""
        for p in procs:
            if p.pid in self.found:
                continue
            st = _stat(self.proc, p.pid)
            if st is None:
                continue
            raw = read_bounded(f"{self.proc}/{p.pid}/cmdline", CMDLINE_MAX) or b""
            text = raw.replace(b"\0", b" ").decode(errors="replace").strip()
            self.found[p.pid] = (p.pid, st.state[:1] or "?", text)

    def known(self, pids: Collection[int]) -> list[_Proc]:
        """The processes the caller already follows, held if they are tagged and ours:
        signalled before the scan of the whole host, so the job starts to go at once."""
        out = []
        for pid in dict.fromkeys(pids):
            held = self._hold(pid) if pid not in self.skip and self._ours(pid) else None
            if held is not None:
                out.append(held)
        return out

    def term(self, procs: Sequence[_Proc]) -> None:
        self.signal(procs, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
        self.signal(procs, signal.SIGTERM)

    def stop(self, grace: float, procs: Sequence[_Proc], termed: Sequence[_Proc] = ()) -> None:
        """mntui_stop: CONT+TERM (but to `termed`, which had it), up to `grace` for them
        to go, KILL for the rest."""
        if not procs:
            return
        sent = {p.pid for p in termed}
        self.term([p for p in procs if p.pid not in sent])
        _wait_while(grace, lambda: bool(self.alive(procs)))
        rest = self.alive(procs)
        self.signal(rest, signal.SIGKILL)
        self.sigkilled.update(dict.fromkeys(p.pid for p in rest))


class _Phases:
    def __init__(self) -> None:
        self.mark = time.monotonic()
        self.spent: list[tuple[str, float]] = []

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.spent.append((name, now - self.mark))
        self.mark = now


class _Closer:
    """The session's close, in a thread of its own (no session: nothing to do)."""

    def __init__(self, tmux: Sequence[str], session: str | None) -> None:
        self.closed = False
        self.thread: threading.Thread | None = None
        if session:
            self.thread = threading.Thread(target=self._run, args=(tmux, session), daemon=True)
            self.thread.start()

    def _run(self, tmux: Sequence[str], session: str) -> None:
        self.closed = _close_session(tmux, session)

    def result(self) -> bool:
        if self.thread is not None:
            self.thread.join()
        return self.closed


def _close_session(tmux: Sequence[str], session: str, tries: int = 3) -> bool:
    """Closes the session if it is there; a tmux slow to answer (a loaded node: each
    call has TMUX_TIMEOUT) is asked again rather than leaving a dead pane's session."""
    for _ in range(tries):  # the kill first: a session is there on almost every teardown
        if _tmux_ok(tmux, "kill-session", "-t", f"={session}"):
            return True
        if not _tmux_ok(tmux, "has-session", "-t", f"={session}"):
            return False
    return False


def kill_tagged(
    pattern: str,
    *,
    grace: float,
    session: str | None = None,
    ports: Sequence[int] = (),
    exclude: Collection[int] = (),
    proc: str = "/proc",
    tmux: Sequence[str] = ("tmux",),
    known: Collection[int] = (),
) -> KillResult:
    """Kill every process of ours whose environment holds an entry matching `pattern`
    (whole), never the caller, its ancestors or `exclude`; then close `session`.
    `known`: PIDs the caller follows as the job's (checked like any other), told first."""
    t0 = time.monotonic()
    k = _Killer(pattern, proc, exclude)
    clock = _Phases()
    try:
        early = k.known(known)
        k.note(early)
        k.term(early)
        first = [p for p in k.scan() if p.pid not in {e.pid for e in early}]
        k.note(first)
        clock.done("scan")
        k.stop(grace, [*early, *first], termed=early)
        clock.done("stop")
        closing = _Closer(tmux, session)  # beside the settling: a tmux call or two
        left: list[int] = []
        held: list[int] = []
        swept = 0

        def busy() -> bool:
            """One scan a check: what is tagged and alive now was forked while we killed
            (a launcher's restart) or outlived its signals; swept (TERM, then KILL at
            once) up to SWEEPS times, then only counted. On a loaded host each extra scan
            is a wait for a CPU: the sweeps and the settling share theirs."""
            nonlocal left, held, swept
            alive = k.alive(k.scan())
            if alive and swept < SWEEPS:
                swept += 1
                k.note(alive)
                k.stop(0, alive)
                alive = k.alive(alive)
            signalled = k.alive([p for p in k.held.values() if p.pid in k.found])
            left = sorted({p.pid for p in (*alive, *signalled)})
            listening = listening_ports(proc) if ports else set()
            held = [p for p in dict.fromkeys(ports) if p in listening]
            return bool(left or held)

        _wait_while(SETTLE, busy)
        clock.done("settle")
        session_killed = closing.result()
        clock.done("session")
        return KillResult(
            found=tuple(k.found.values()),
            sigkilled=tuple(k.sigkilled),
            left=tuple(left),
            session_killed=session_killed,
            port_holders=tuple(held),
            seconds=time.monotonic() - t0,
            phases=tuple(clock.spent),
        )
    finally:
        k.close()
