"""Kill a node's part of a run: every process the one rule says is the job's
(proctree.py: its tag, the pane's and the members' descendants, the members seen
before, the run's cgroup), and nothing else. The one kill on a node: the sentinel's
teardown, the coordinator's kill of the main's ranks, and every kill from the manager
(`mntui kill`, a launch's cleanup, a teardown from there: the bundle's `kill` verb,
killverb.py, shipped like the sentinel) run this.

The steps: SIGCONT (a stopped process cannot act on SIGTERM) + SIGTERM to what the
caller already follows, then to every member a full sample finds, SIGKILL what is
left after the grace, sample again for anything forked meanwhile (a launcher
restarting workers) and stop it, close the tmux session, then wait a little for the
members to go and the job's ports to be free. `clean` only when nothing of the job is
left by any rule.

Each process is held by its start time (and a pidfd where the kernel has them), so a
PID that a dead process freed and another process took is never signalled nor
counted; a process found and signalled that still lives at the end is `left` even if
the rule would no longer see it (its environment unreadable, its parent gone).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import listens, members
from .listens import listening_ports  # the one reader of LISTEN rows
from .proctree import STAT_LIMIT, Follower, Tag, parse_stat, read_bounded

__all__ = ["KillResult", "Target", "kill", "listening_ports", "main"]

POLL = 0.05  # between two looks while waiting
SWEEPS = 5
SETTLE = 3.0  # how long the end waits for members to go and ports to be free
CMDLINE_MAX = 300  # bytes of a command line reported
TMUX_TIMEOUT = 2.0  # per tmux call: a stopped tmux server must not hold the teardown


@dataclass(frozen=True)
class Target:
    """What one kill stops on this node."""

    job: str  # a regex: the job's processes' tag entry, matched whole
    watchers: str | None = None  # a regex: its watchers' tag entry (members by it alone)
    session: str | None = None  # the tmux session to close; its pane's process is a root
    session_dir: str | None = None  # the session is the run's only if started there
    ports: tuple[int, ...] = ()  # checked free at the end
    # run dirs (globs, under $HOME when relative) whose `members` and `cgroup` files say
    # more of the job's processes; each dir's tag is its last three parts
    runs: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Holder:
    """A listener on one of the job's ports after the kill: its process where this user
    can see it (pid, its user's name, its command line), else the socket's owner uid."""

    port: int
    pid: int | None
    uid: int | None
    user: str
    cmdline: str


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
    holders: tuple[Holder, ...] = ()  # who holds `port_holders`
    watchers: tuple[int, ...] = ()  # of `found`, those found by the watchers' tag alone

    def as_dict(self) -> dict[str, Any]:
        return {
            "found": [list(f) for f in self.found],
            "sigkilled": list(self.sigkilled),
            "left": list(self.left),
            "session_killed": self.session_killed,
            "port_holders": list(self.port_holders),
            "holders": [[h.port, h.pid, h.uid, h.user, h.cmdline] for h in self.holders],
            "watchers": list(self.watchers),
            "seconds": self.seconds,
            "phases": {k: round(v, 3) for k, v in self.phases},
        }


@dataclass(frozen=True)
class _Stat:
    state: str  # "?" when the line cannot be read as a stat line: alive, unreadable
    start: int | None  # starttime in clock ticks since boot: a PID plus this is one process


@dataclass
class _Proc:
    pid: int
    start: int | None
    fd: int | None  # a pidfd, so a signal can only reach this very process


def _stat(proc: str, pid: int) -> _Stat | None:
    """None once the process is gone. A line of no known shape is "alive, unreadable":
    never taken for gone."""
    raw = read_bounded(f"{proc}/{pid}/stat", STAT_LIMIT)
    if raw is None:
        return None
    got = parse_stat(pid, raw)
    if got is None:
        return _Stat("?", None)
    return _Stat(got.proc.state, got.proc.start)


def _lineage(proc: str, pid: int) -> set[int]:
    """The caller and its ancestors: the caller may itself carry the tag."""
    seen: set[int] = set()
    while pid > 1 and pid not in seen and len(seen) < 256:
        seen.add(pid)
        raw = read_bounded(f"{proc}/{pid}/stat", STAT_LIMIT)
        got = parse_stat(pid, raw) if raw is not None else None
        if got is None:
            break
        pid = got.proc.ppid
    return seen


def _tmux_env() -> dict[str, str]:
    """A tmux server this starts must never carry a tag (a later kill would find it),
    nor attach to the tmux the caller runs in."""
    drop = ("TMUX", "TMUX_PANE")
    return {k: v for k, v in os.environ.items() if not k.startswith("MNTUI_") and k not in drop}


def _tmux(tmux: Sequence[str], *args: str) -> tuple[int | None, str]:
    """tmux's exit code and answer; None when it did not answer in TMUX_TIMEOUT (or
    could not start): then nothing is known of the session."""
    try:
        done = subprocess.run(
            [*tmux, *args],
            env=_tmux_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=TMUX_TIMEOUT,
        )
    except (OSError, subprocess.SubprocessError):
        return None, ""
    return done.returncode, done.stdout.decode(errors="replace")


def _pane(tmux: Sequence[str], session: str, session_dir: str | None) -> tuple[bool, int | None]:
    """(the session is there and the run's to close, its live pane's pid): with
    `session_dir`, a session started elsewhere (another run of the job) is neither closed
    nor followed. A tmux that did not answer leaves the close to try (and ask again)."""
    rc, out = _tmux(tmux, "list-panes", "-t", f"={session}:", "-F",
                    "#{pane_dead} #{pane_pid} #{session_path}")  # fmt: skip
    if rc is None:
        return session_dir is None, None
    if rc != 0:
        return False, None  # no such session (or no server): nothing to close
    dead, _, rest = out.split("\n", 1)[0].partition(" ")
    pid, _, path = rest.partition(" ")
    if session_dir is not None and os.path.normpath(path) != os.path.normpath(session_dir):
        return False, None
    live = dead == "0" and pid.isdigit() and len(pid) <= 10
    return True, int(pid) if live else None


def _wait_while(seconds: float, busy: Callable[[], bool]) -> None:
    """Check, then every POLL while busy, for at most `seconds`."""
    end = time.monotonic() + seconds
    while busy() and time.monotonic() < end:
        time.sleep(POLL)


class _Killer:
    """Holds what it signals (pid, start, pidfd) and what each was when first found."""

    def __init__(self, proc: str) -> None:
        self.proc = proc
        self.held: dict[int, _Proc] = {}
        self.found: dict[int, tuple[int, str, str]] = {}
        self.sigkilled: dict[int, None] = {}

    def close(self) -> None:
        for p in self.held.values():
            if p.fd is not None:
                os.close(p.fd)
                p.fd = None

    def hold(self, pid: int, start: int | None) -> _Proc | None:
        """The process at `pid` if it still is the one of `start` (None: whichever is
        there now), with a pidfd where the kernel has them."""
        first = _stat(self.proc, pid)
        if first is None or (start is not None and first.start != start):
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
        """Those that still exist and are no zombies."""
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
        """What each was when first found. A later sample finds it again while its
        SIGKILL lands, when its command line already reads empty: that reading is not
        what it was."""
        for p in procs:
            if p.pid in self.found:
                continue
            st = _stat(self.proc, p.pid)
            if st is None:
                continue
            raw = read_bounded(f"{self.proc}/{p.pid}/cmdline", CMDLINE_MAX) or b""
            text = raw.replace(b"\0", b" ").decode(errors="replace").strip()
            self.found[p.pid] = (p.pid, st.state[:1] or "?", text)

    def term(self, procs: Sequence[_Proc]) -> None:
        self.signal(procs, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
        self.signal(procs, signal.SIGTERM)

    def stop(self, grace: float, procs: Sequence[_Proc], termed: Sequence[_Proc] = ()) -> None:
        """CONT+TERM (but to `termed`, which had it), up to `grace` for them to go, KILL
        for the rest."""
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
        if _tmux(tmux, "kill-session", "-t", f"={session}")[0] == 0:
            return True
        if _tmux(tmux, "has-session", "-t", f"={session}")[0] not in (0, None):
            return False  # gone (a has-session that did not answer: asked again)
    return False


def _run_dirs(runs: Sequence[str]) -> list[str]:
    home = os.path.expanduser("~")
    out: list[str] = []
    for pattern in runs:
        out += sorted(glob.glob(pattern if os.path.isabs(pattern) else os.path.join(home, pattern)))
    return list(dict.fromkeys(out))[: members.MAX_MEMBERS]


def _follower(
    target: Target, proc: str, skip: Collection[int], tmux: Sequence[str]
) -> tuple[Follower, bool]:
    """The rule for this target: its tags, the pane's process, what the sentinel saw,
    the run's cgroup. Also: whether the session is the run's to close."""
    watchers = Tag(pattern=target.watchers) if target.watchers else None
    f = Follower(Tag(pattern=target.job), proc=proc, scan_every=1, exclude=skip, watchers=watchers)
    ours = False
    if target.session:
        ours, pane = _pane(tmux, target.session, target.session_dir)
        if pane is not None:
            f.root(pane)
    mounts = members.cgroup_mounts() if proc == "/proc" else []
    for d in _run_dirs(target.runs):
        for pid, start in members.read_members(d):
            f.root(pid, start)
        path = members.run_cgroup(d, "/".join(d.rstrip("/").split("/")[-3:]), mounts)
        if path is not None:
            f.cgroup(path)
    return f, ours


def holders(ports: Sequence[int], proc: str = "/proc") -> tuple[Holder, ...]:
    """Who listens on `ports`: a socket's process where this user can read its fds."""
    socks = [s for s in listens.listening(proc) if s.port in set(ports)]
    if not socks:
        return ()
    owner = listens.socket_owners({s.inode for s in socks if s.inode}, proc)
    out: dict[tuple[int, int | None, int | None], Holder] = {}
    for s in socks:
        pid = owner.get(s.inode) if s.inode else None
        uid = s.uid
        raw = read_bounded(f"{proc}/{pid}/cmdline", CMDLINE_MAX) if pid else None
        cmd = (raw or b"").replace(b"\0", b" ").decode(errors="replace").strip()
        try:
            user = pwd.getpwuid(uid).pw_name if uid is not None else ""
        except KeyError:
            user = ""
        out.setdefault((s.port, pid, uid), Holder(s.port, pid, uid, user, cmd))
    return tuple(out.values())


def kill(
    target: Target,
    *,
    grace: float,
    exclude: Collection[int] = (),
    known: Collection[tuple[int, int]] = (),
    proc: str = "/proc",
    tmux: Sequence[str] = ("tmux",),
) -> KillResult:
    """Kill every member of `target` (never the caller, its ancestors or `exclude`), then
    close its session. `known`: (pid, start) of the members the caller follows (the
    sentinel's), told first and members for good."""
    t0 = time.monotonic()
    k = _Killer(proc)
    clock = _Phases()
    try:
        early = [p for pid, start in dict(known).items() if (p := k.hold(pid, start)) is not None]
        k.note(early)
        k.term(early)
        f, ours = _follower(target, proc, _lineage(proc, os.getpid()) | set(exclude), tmux)
        for p in early:
            f.root(p.pid, p.start)
        sampled = [k.hold(p.pid, p.start) for p in f.sample()]
        watchers = set(f.watchers)
        first = [p for p in sampled if p is not None and p.pid not in {e.pid for e in early}]
        k.note(first)
        clock.done("scan")
        k.stop(grace, [*early, *first], termed=early)
        clock.done("stop")
        closing = _Closer(tmux, target.session if ours else None)  # beside the settling
        left: list[int] = []
        held: list[int] = []
        swept = 0

        def busy() -> bool:
            """One sample a check: a member alive now was forked while we killed (a
            launcher's restart) or outlived its signals; swept (TERM, then KILL at once)
            up to SWEEPS times, then only counted. On a loaded host each extra sample is a
            wait for a CPU: the sweeps and the settling share theirs."""
            nonlocal left, held, swept
            now = [h for p in f.sample() if (h := k.hold(p.pid, p.start)) is not None]
            watchers.update(f.watchers)
            alive = k.alive(now)
            if alive and swept < SWEEPS:
                swept += 1
                k.note(alive)
                k.stop(0, alive)
                alive = k.alive(alive)
            signalled = k.alive([p for p in k.held.values() if p.pid in k.found])
            left = sorted({p.pid for p in (*alive, *signalled)})
            listening = listening_ports(proc) if target.ports else set()
            held = [p for p in dict.fromkeys(target.ports) if p in listening]
            return bool(left or held)

        _wait_while(SETTLE, busy)
        for path in f.cgroups:  # the run's own, made by its launch.sh: gone once empty
            with contextlib.suppress(OSError):
                os.rmdir(path)
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
            holders=holders(held, proc) if held else (),
            watchers=tuple(sorted(p for p in watchers if p in k.found)),
        )
    finally:
        k.close()


RESULT = "KILL_RESULT"  # the line the `kill` verb answers with, then its JSON


def main(argv: list[str]) -> int:
    """`kill SPEC`: the manager's kill on this node (the bundle's verb, run over SSH).
    SPEC is JSON: job, watchers, session, session_dir (under $HOME), ports, runs, grace.
    Prints one `KILL_RESULT {...}` line; a spec of any other shape is refused (exit 2)."""
    try:
        spec = json.loads(argv[0]) if len(argv) == 1 else None
        target, grace = _spec(spec)
    except (ValueError, TypeError) as exc:
        print(f"kill: a bad spec: {exc}", file=sys.stderr)
        return 2
    res = kill(target, grace=grace)
    print(f"{RESULT} {json.dumps(res.as_dict(), separators=(',', ':'))}", flush=True)
    return 0


def _spec(d: object) -> tuple[Target, float]:
    if not isinstance(d, dict):
        raise ValueError("not an object")
    text = (str, type(None))
    ok = (
        isinstance(d.get("job"), str)
        and all(isinstance(d.get(k), text) for k in ("watchers", "session", "session_dir"))
        and isinstance(d.get("ports"), list)
        and all(type(p) is int and 0 < p < 65536 for p in d["ports"])
        and isinstance(d.get("runs"), list)
        and all(isinstance(r, str) for r in d["runs"])
        and type(d.get("grace")) in (int, float)
        and 0 <= d["grace"] <= 3600
    )
    if not ok:
        raise ValueError("a field is missing or of another type")
    where = d.get("session_dir")
    home = os.path.expanduser("~")
    target = Target(
        job=d["job"],
        watchers=d.get("watchers"),
        session=d.get("session"),
        session_dir=os.path.join(home, where) if where is not None else None,
        ports=tuple(d["ports"]),
        runs=tuple(d["runs"]),
    )
    re.compile(target.job)  # re.error is a ValueError
    if target.watchers is not None:
        re.compile(target.watchers)
    return target, float(d["grace"])
