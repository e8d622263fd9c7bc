"""The sentinel's process tree (node/proc/proctree.py) against real processes: a run's
processes are found by their exact tag from a seed, orphans and double forks are
followed, nothing foreign ever appears, and a sample stays cheap. A kernel without
`children` files and malformed stat lines are exercised on a /proc-shaped folder,
since this machine's kernel has the first and never writes the second."""

from __future__ import annotations

import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakecluster import wait_for

from mntui.sessions.node.proc.proctree import (
    NO_CHILDREN_EVERY,
    PF_FORKNOEXEC,
    YOUNG_S,
    Follower,
    Proc,
    StatLine,
    Tag,
    parse_stat,
)

PY = sys.executable
EXE = os.path.realpath(PY)
SLEEP = "import time; time.sleep(600)"
SPAWN_SLEEPER = (
    "import subprocess, sys, time\n"
    f"subprocess.Popen([sys.executable, '-c', {SLEEP!r}])\n"
    "time.sleep(600)"
)
THREADED = (
    "import threading, time\n"
    "for _ in range(63): threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
    "time.sleep(600)"
)
T = 30.0  # deadline for anything a loaded 2-core machine must do


def _environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def _start(pid: int) -> int | None:
    try:
        got = parse_stat(pid, Path(f"/proc/{pid}/stat").read_bytes())
    except OSError:
        return None
    return None if got is None else got.proc.start


def _tagged(entry: str) -> set[int]:
    """An independent look: every pid whose environ holds the entry."""
    want = entry.encode()
    return {int(n) for n in os.listdir("/proc") if n.isdigit() and want in _environ(int(n))}


def _settled(entry: str, count: int) -> bool:
    """`count` processes carry the entry, all exec'd (none still shows its parent's environ)."""
    lines = [parse_stat(pid, _read(f"/proc/{pid}/stat")) for pid in _tagged(entry)]
    return len(lines) == count and all(ln is not None and not ln.forked for ln in lines)


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""


def _ready(pid: int, entry: str | None) -> bool:
    """Exec'd into python with its own environment (before exec a child shows its parent's)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    env = _environ(pid)
    return exe == EXE and (entry is None or entry.encode() in env)


class Procs:
    """What a test started, killed at its end by tag and by (pid, start): never by name."""

    def __init__(self) -> None:
        self.entries: list[str] = []
        self.popens: list[subprocess.Popen[bytes]] = []
        self.others: list[tuple[int, int | None]] = []

    def tag(self, suffix: str = "") -> str:
        entry = f"MNTUI_RUN=test/{secrets.token_hex(8)}/node{suffix}"
        self.entries.append(entry)
        return entry

    def spawn(
        self, argv: list[str], env: dict[str, str], *, stdin: bool = False
    ) -> subprocess.Popen[bytes]:
        base = {k: v for k, v in os.environ.items() if k != "MNTUI_RUN"}
        p = subprocess.Popen(
            argv, env={**base, **env}, stdout=subprocess.PIPE,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self.popens.append(p)
        return p

    def tagged(
        self, argv: list[str], entry: str, *, stdin: bool = False
    ) -> subprocess.Popen[bytes]:
        name, value = entry.split("=", 1)
        return self.spawn(argv, {name: value}, stdin=stdin)

    def remember(self, pid: int) -> None:
        self.others.append((pid, _start(pid)))

    def cleanup(self) -> None:
        pids = {pid for e in self.entries for pid in _tagged(e)}
        pids |= {pid for pid, start in self.others if start is not None and _start(pid) == start}
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in self.popens:
            p.kill()
            p.wait(timeout=T)
            for pipe in (p.stdin, p.stdout):
                if pipe:
                    pipe.close()


@pytest.fixture
def procs() -> Iterator[Procs]:
    got = Procs()
    try:
        yield got
    finally:
        got.cleanup()


def _until(f: Follower, cond: Callable[[dict[int, Proc]], bool], what: str) -> dict[int, Proc]:
    seen: dict[int, Proc] = {}

    def step() -> bool:
        seen.clear()
        seen.update({p.pid: p for p in f.sample()})
        return cond(seen)

    wait_for(step, T, interval=0.02, what=what)
    return seen


def test_a_tagged_tree_is_found_from_its_seed(procs: Procs) -> None:
    """The tree starts after the first sample's scan: the children files find it."""
    entry = procs.tag()
    script = 'read go; "$0" -c "$1" & "$0" -c "$2" & wait'
    sh = procs.tagged(["sh", "-c", script, PY, SLEEP, SPAWN_SLEEPER], entry, stdin=True)
    wait_for(lambda: entry.encode() in _environ(sh.pid), T, what="sh's exec")
    f = Follower(entry, scan_every=1000)
    f.add(sh.pid)
    assert [p.pid for p in f.sample()] == [sh.pid]
    assert sh.stdin is not None
    sh.stdin.write(b"go\n")
    sh.stdin.flush()
    wait_for(lambda: _settled(entry, 4), T, what="sh, two pythons and a grandchild")
    seen = {p.pid: p for p in f.sample()}
    if not f.children_supported:  # no children files: the scan, every few samples
        seen = _until(f, lambda s: len(s) == 4, "the tree through scans")
    assert set(seen) == _tagged(entry) and not f.last_full
    kids = [p for p in seen.values() if p.ppid == sh.pid]
    grandchildren = [p for p in seen.values() if p.ppid in {k.pid for k in kids}]
    assert len(seen) == 4 and len(kids) == 2 and len(grandchildren) == 1
    assert all(p.state in "RSD" and p.start > 0 and p.rss_kb > 0 for p in seen.values())
    assert f.malformed == 0 and f.over_limit == 0


def test_a_child_that_drops_the_tag_is_followed_and_a_stranger_is_not(procs: Procs) -> None:
    """A member's child is the job's whatever its environment says (`env -u`, `env -i`:
    a launcher's clean environment); an untagged process that descends from no member
    is never taken."""
    entry = procs.tag()
    script = 'env -u MNTUI_RUN "$0" -c "$1" & echo $!; env -i "$0" -c "$1" & echo $!; wait'
    sh = procs.tagged(["sh", "-c", script, PY, SLEEP], entry)
    assert sh.stdout is not None
    kids = [int(sh.stdout.readline()), int(sh.stdout.readline())]
    for pid in kids:
        procs.remember(pid)
    stranger = procs.spawn([PY, "-c", SLEEP], {})
    wait_for(lambda: all(_ready(p, None) for p in [*kids, stranger.pid]), T, what="all three")
    assert all(entry.encode() not in _environ(p) for p in kids)
    f = Follower(entry, scan_every=2)
    f.add(sh.pid)
    seen = _until(f, lambda s: len(s) == 3, "sh and both children")
    for _ in range(4):  # two more scans
        assert stranger.pid not in {p.pid for p in f.sample()}
    assert set(seen) == {sh.pid, *kids}


def test_a_helper_that_renames_itself_in_a_session_of_its_own_stays_followed(
    procs: Procs,
) -> None:
    """setproctitle writes over the environment (/proc/PID/environ reads zeros): the
    helper is followed as the rank's child, and still once the rank died (an orphan of
    init, no tag, no parent of ours)."""
    pytest.importorskip("setproctitle")
    entry = procs.tag()
    helper = (
        "import setproctitle, sys, time; setproctitle.setproctitle('data-server'); "
        "print('up', flush=True); time.sleep(600)"
    )
    rank = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', {helper!r}], start_new_session=True,"
        " stdout=subprocess.PIPE)\n"
        "p.stdout.readline()\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(600)"
    )
    r = procs.tagged([PY, "-c", rank], entry)
    assert r.stdout is not None
    helper_pid = int(r.stdout.readline())
    procs.remember(helper_pid)
    assert not any(e.startswith(b"MNTUI_RUN=") for e in _environ(helper_pid))
    f = Follower(entry, scan_every=1000)
    f.add(r.pid)
    assert [p.pid for p in f.sample()] == sorted([r.pid, helper_pid])
    r.kill()
    r.wait(timeout=T)
    seen = _until(f, lambda s: r.pid not in s, "the rank gone")
    assert list(seen) == [helper_pid] and seen[helper_pid].ppid != r.pid


def test_a_stopped_member_shows_its_state_at_the_next_sample(procs: Procs) -> None:
    entry = procs.tag()
    p = procs.tagged([PY, "-c", SLEEP], entry)
    wait_for(lambda: _ready(p.pid, entry), T, what="python")
    f = Follower(entry)
    f.add(p.pid)
    assert [q.state for q in f.sample()] in (["R"], ["S"])
    os.kill(p.pid, signal.SIGSTOP)
    wait_for(lambda: Path(f"/proc/{p.pid}/stat").read_bytes().rsplit(b")", 1)[1][1:2] == b"T",
             T, what="the stop")  # fmt: skip
    assert [q.state for q in f.sample()] in (["T"], ["t"])


def test_an_orphan_is_still_followed_with_its_new_parent(procs: Procs) -> None:
    entry = procs.tag()
    sh = procs.tagged(["sh", "-c", '"$0" -c "$1" & wait', PY, SLEEP], entry)
    wait_for(lambda: len(_tagged(entry)) == 2, T, what="sh and its child")
    f = Follower(entry)
    f.add(sh.pid)
    seen = _until(f, lambda s: len(s) == 2, "both")
    (child,) = (p for p in seen.values() if p.pid != sh.pid)
    sh.kill()  # a zombie until reaped: gone for the follower at once
    seen = _until(f, lambda s: sh.pid not in s, "the parent gone")
    sh.wait(timeout=T)
    assert set(seen) == {child.pid}
    assert seen[child.pid].ppid != sh.pid and seen[child.pid].start == child.start


def test_a_double_forked_member_is_found_within_a_scan(procs: Procs) -> None:
    entry = procs.tag()
    p = procs.tagged([PY, "-c", SLEEP], entry)
    wait_for(lambda: _ready(p.pid, entry), T, what="python")
    f = Follower(entry, scan_every=5)
    f.add(p.pid)
    assert [q.pid for q in f.sample()] == [p.pid]
    outer = procs.tagged(["sh", "-c", 'setsid "$0" -c "$1" & exit 0', PY, SLEEP], entry)
    outer.wait(timeout=T)

    def forked() -> list[int]:
        return [d for d in _tagged(entry) - {p.pid} if _ready(d, entry)]

    wait_for(forked, T, what="the double fork")
    (daemon,) = forked()
    found = [daemon in {q.pid for q in f.sample()} for _ in range(5)]
    assert any(found), found
    stat = Path(f"/proc/{daemon}/stat").read_bytes()
    assert stat.rsplit(b")", 1)[1].split()[1] != b"%d" % outer.pid  # an orphan


def test_a_foreign_or_missing_tag_never_appears(procs: Procs) -> None:
    entry = procs.tag()
    member = procs.tagged([PY, "-c", SLEEP], entry)
    other = procs.tag()
    foreign = [
        procs.spawn([PY, "-c", SLEEP], {}),
        procs.tagged([PY, "-c", SLEEP], other),
        procs.tagged([PY, "-c", SLEEP], entry + "/sentinel"),
        procs.tagged([PY, "-c", SLEEP], entry + "2"),
        procs.spawn([PY, "-c", SLEEP], {"OTHER": entry}),
        procs.spawn([PY, "-c", SLEEP], {"X" + entry.split("=")[0]: entry.split("=", 1)[1]}),
    ]
    wait_for(lambda: all(_ready(q.pid, None) for q in [member, *foreign]), T, what="all")
    f = Follower(entry, scan_every=2)
    for q in foreign:
        f.add(q.pid)
    for _ in range(6):
        assert [q.pid for q in f.sample()] == [member.pid]


def _reuse(procs: Procs, pid: int, old: int, entry: str) -> subprocess.Popen[bytes]:
    """A process of `entry` at `pid` (free now), through the kernel's next-pid knob."""
    for _ in range(200):
        try:
            Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
        except OSError:
            pytest.skip("cannot set /proc/sys/kernel/ns_last_pid here (the folder test holds it)")
        p = procs.tagged([PY, "-c", SLEEP], entry)
        if p.pid == pid and _start(pid) not in (None, old):
            return p
        p.kill()
        p.wait(timeout=T)
    pytest.skip("the machine took the pid each time")


def test_a_reused_pid_is_judged_anew(procs: Procs) -> None:
    entry, other = procs.tag(), procs.tag()
    a = procs.tagged([PY, "-c", SLEEP], entry)
    wait_for(lambda: _ready(a.pid, entry), T, what="python")
    f = Follower(entry, scan_every=2)
    f.add(a.pid)
    (first,) = f.sample()
    a.kill()
    a.wait(timeout=T)
    b = _reuse(procs, a.pid, first.start, other)
    wait_for(lambda: _ready(b.pid, other), T, what="the foreign process at the same pid")
    reads = f.environ_reads
    assert f.sample() == ()  # the old verdict is not carried over
    assert f.environ_reads == reads + 1
    b.kill()
    b.wait(timeout=T)
    c = _reuse(procs, a.pid, first.start, entry)
    wait_for(lambda: _ready(c.pid, entry), T, what="the member at the same pid")
    seen = _until(f, lambda s: first.pid in s, "the member at the reused pid (next scan)")
    assert seen[first.pid].start != first.start


def test_a_sample_is_cheap_with_many_threads(procs: Procs) -> None:
    entry = procs.tag()
    ranks = [procs.tagged([PY, "-c", THREADED], entry) for _ in range(12)]
    threads = f"Threads:\t{64}\n"
    wait_for(lambda: all(threads in _status(p.pid) for p in ranks), T, what="12 × 64 threads")
    f = Follower(entry)
    for p in ranks:
        f.add(p.pid)
    _until(f, lambda s: len(s) == 12, "all ranks")
    costs: list[float] = []
    reads: list[int] = []
    while len(costs) < 50:
        assert len(f.sample()) == 12
        if not f.last_full:
            costs.append(f.last_cost_ms)
            reads.append(f.last_reads)
    assert max(reads) <= 2 * 12  # each rank's stat and its main thread's children
    assert statistics.median(costs) <= 5.0, sorted(costs)


def _status(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return ""


class _Counting(Follower):
    """Counts environ reads per process (pid and its entry's inode)."""

    def __init__(self, entry: str, *, scan_every: int) -> None:
        super().__init__(entry, scan_every=scan_every)
        self.per_process: Counter[tuple[int, int]] = Counter()

    def _tagged(self, pid: int) -> str | None:
        try:
            self.per_process[pid, os.stat(f"/proc/{pid}").st_ino] += 1
        except OSError:
            pass
        return super()._tagged(pid)


def test_a_full_scan_judges_each_process_once(procs: Procs) -> None:
    entry = procs.tag()
    foreign = [procs.tagged([PY, "-c", SLEEP], procs.tag()) for _ in range(3)]
    wait_for(lambda: all(_ready(p.pid, None) for p in foreign), T, what="foreign processes")
    f = _Counting(entry, scan_every=1)
    f.sample()
    first = f.scanned
    f.sample()
    f.sample()
    assert f.last_full and first >= len(foreign)
    assert f.scanned - first <= first // 2  # only what is new since the first scan
    assert set(f.per_process.values()) <= {1}
    if os.getuid() == 0:  # every process is ours: each environ was read, once
        assert all(any(pid == p.pid for pid, _ in f.per_process) for p in foreign)


# A /proc-shaped folder: the kernel's children files, and lines it never writes.


def _fake(root: Path, pid: int, ppid: int, *, env: str = "", start: int = 1000, flags: int = 0,
          threads: dict[int, list[int]] | None = None, state: str = "S") -> None:  # fmt: skip
    """A process folder; `threads` None means a kernel without children files."""
    d = root / str(pid)
    (d / "task" / str(pid)).mkdir(parents=True, exist_ok=True)
    fields = [
        state,
        ppid,
        *[0] * 4,
        flags,
        *[0] * 4,
        7,
        5,
        0,
        0,
        20,
        0,
        len(threads or {pid: []}),
        0,
        start,
        0,
        3,
    ]
    fields += [0] * 28
    (d / "stat").write_text(f"{pid} (a) b) c) " + " ".join(map(str, fields)) + "\n")
    (d / "environ").write_bytes(env.encode() + b"\0PATH=/bin\0" if env else b"PATH=/bin\0")
    for tid, kids in (threads or {}).items():
        (d / "task" / str(tid)).mkdir(exist_ok=True)
        (d / "task" / str(tid) / "children").write_text("".join(f"{k} " for k in kids))


def test_parse_stat_cuts_the_comm_at_the_last_paren(tmp_path: Path) -> None:
    _fake(tmp_path, 42, 7, start=99)
    got = parse_stat(42, (tmp_path / "42" / "stat").read_bytes())
    page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
    assert got == StatLine(Proc(42, 7, "S", 12, 3 * page_kb, 99), threads=1, forked=False)
    for bad in (b"", b"42 (a) S 1\n", b"43 (a) S" + b" 1" * 40 + b"\n", b"42 (a) 1 1" + b" 1" * 40 + b"\n"):  # fmt: skip
        assert parse_stat(42, bad) is None


def test_children_files_find_new_members_between_scans(tmp_path: Path) -> None:
    e = "MNTUI_RUN=j/r/n"
    _fake(tmp_path, 100, 1, env=e, threads={100: [101, 102]})
    _fake(tmp_path, 101, 100, env=e, threads={101: [], 150: []})
    _fake(tmp_path, 102, 100, threads={102: []})  # untagged
    f = Follower(e, proc=str(tmp_path))
    f.add(100)
    assert [p.pid for p in f.sample()] == [100, 101, 102]  # 102: a member's child
    assert f.environ_reads == 1  # the seed's: its children are members by descent
    _fake(tmp_path, 103, 100, threads={103: []})
    _fake(tmp_path, 104, 101, threads={104: []})
    _fake(tmp_path, 100, 1, env=e, threads={100: [101, 102, 103]})
    _fake(tmp_path, 101, 100, env=e, threads={101: [], 150: [104]})
    assert [p.pid for p in f.sample()] == [100, 101, 102, 103]  # main thread's children only
    # stat and children of 100, 101 and 102; 103's stat and children, no environ
    assert f.last_reads == 3 * 2 + 2 and f.environ_reads == 1
    for _ in range(8):
        assert 104 not in {p.pid for p in f.sample()}
    assert [p.pid for p in f.sample()] == [100, 101, 102, 103, 104]  # all threads, 10th
    assert f.children_supported and f.malformed == 0


def test_without_children_files_the_scan_comes_more_often(tmp_path: Path) -> None:
    e = "MNTUI_RUN=j/r/n"
    _fake(tmp_path, 100, 1, env=e)
    f = Follower(e, proc=str(tmp_path))
    f.add(100)
    assert [p.pid for p in f.sample()] == [100]
    assert not f.children_supported
    _fake(tmp_path, 101, 100, env=e)
    found = [101 in {p.pid for p in f.sample()} for _ in range(NO_CHILDREN_EVERY)]
    assert found == [False] * (NO_CHILDREN_EVERY - 1) + [True]


def test_a_malformed_or_foreign_entry_is_skipped(tmp_path: Path) -> None:
    e = "MNTUI_RUN=j/r/n"
    _fake(tmp_path, 100, 1, env=e)
    _fake(tmp_path, 101, 1, env=e)
    (tmp_path / "101" / "stat").write_bytes(b"101 (x) Q\n")
    _fake(tmp_path, 102, 1, env=e)
    if os.getuid() == 0:
        os.chown(tmp_path / "102", 4242, 4242)
    (tmp_path / "self").mkdir()
    f = Follower(e, proc=str(tmp_path), exclude=[102] if os.getuid() else ())
    assert [p.pid for p in f.sample()] == [100]
    assert f.malformed == 1 and f.environ_reads == 1


def test_a_changed_start_is_a_new_process(tmp_path: Path) -> None:
    e = "MNTUI_RUN=j/r/n"
    _fake(tmp_path, 100, 1, env=e, start=5)
    _fake(tmp_path, 101, 1, env=e, start=4)  # older than the attempt
    f = Follower(e, proc=str(tmp_path), since=5)
    f.add(100)
    f.add(101)
    assert [p.start for p in f.sample()] == [5]
    _fake(tmp_path, 100, 1, env=e, start=7)
    assert [p.start for p in f.sample()] == [7]
    assert f.environ_reads == 2  # judged anew
    _fake(tmp_path, 100, 1, env="MNTUI_RUN=j/other/n", start=8)
    assert f.sample() == ()
    assert f.environ_reads == 3


def test_a_process_between_fork_and_exec_is_judged_after_its_exec(tmp_path: Path) -> None:
    """Before exec a child shows its parent's environ: not judged while young, and judged
    on it once old (a child that forks and never execs has no other)."""
    e = "MNTUI_RUN=j/r/n"
    now = int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))
    _fake(tmp_path, 100, 1, start=now, flags=PF_FORKNOEXEC)  # the tmux server's environ
    _fake(tmp_path, 101, 1, env=e, start=now - int(2 * YOUNG_S * 100), flags=PF_FORKNOEXEC)
    f = Follower(e, proc=str(tmp_path), scan_every=1000)
    f.add(100)
    assert [p.pid for p in f.sample()] == [101]  # the old one, through the first scan
    assert f.environ_reads == 2  # each once: the young one is read again after its exec
    assert [p.pid for p in f.sample()] == [101] and f.environ_reads == 2  # not exec'd yet
    _fake(tmp_path, 100, 1, env=e, start=now)  # exec'd with the tag
    assert [p.pid for p in f.sample()] == [100, 101]


def test_a_young_forked_process_that_shows_the_tag_is_a_member_at_once(tmp_path: Path) -> None:
    """A shell's subshell (launch.sh's `{ ...; } | tee`) forks and never execs, and starts the command
    at once: left out while young, the command under it looked orphaned to the judge
    (a `command: sleep 300` job torn down 0.3 s after its start, as `launcher gone`)."""
    e = "MNTUI_RUN=j/r/n"
    now = int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))
    _fake(tmp_path, 100, 1, env=e, start=now - 50)  # the launcher
    _fake(tmp_path, 101, 100, env=e, start=now, flags=PF_FORKNOEXEC)  # its subshell
    _fake(tmp_path, 102, 101, env=e, start=now)  # the command the subshell started
    f = Follower(e, proc=str(tmp_path), scan_every=1)
    f.add(100)
    seen = {p.pid: p.ppid for p in f.sample()}
    assert seen == {100: 1, 101: 100, 102: 101}


def test_a_root_is_a_member_whatever_it_carries_and_only_that_very_process(
    tmp_path: Path,
) -> None:
    """The pane's process, or one seen before (its start given): members with no tag at
    all, and their children with them; a pid whose start is not the one seen is another
    process, never taken."""
    e = "MNTUI_RUN=j/r/n"
    _fake(tmp_path, 100, 1, start=50, threads={100: [101]})  # the pane: no tag (zeroed)
    _fake(tmp_path, 101, 100, threads={101: []})
    _fake(tmp_path, 200, 1, start=70, threads={200: []})  # seen at start 60: not this one
    _fake(tmp_path, 300, 1, start=80, threads={300: []})  # seen at 80: this one
    f = Follower(e, proc=str(tmp_path), scan_every=1000)
    f.root(100)
    f.root(200, 60)
    f.root(300, 80)
    assert [p.pid for p in f.sample()] == [100, 101, 300]
    assert f.environ_reads == 1  # 200's, by the first sample's scan: judged by its tag
    assert sorted(f.identities) == [(100, 50), (101, 1000), (300, 80)]
    _fake(tmp_path, 100, 1, start=51, threads={100: []})  # its pid taken by another process
    assert [p.pid for p in f.sample()] == [101, 300]


def test_a_watchers_children_are_not_the_jobs(tmp_path: Path) -> None:
    """A sentinel is found by its own tag; what it starts (a capture's py-spy, a
    restart's tmux client) is not the job's for descending from it."""
    e, w = "MNTUI_RUN=j/r/n", "MNTUI_RUN=j/r/n/sentinel"
    _fake(tmp_path, 100, 1, env=w, threads={100: [101]})
    _fake(tmp_path, 101, 100, threads={101: []})  # untagged child of the watcher
    _fake(tmp_path, 102, 100, env=e, threads={102: []})  # a tagged one is the job's
    f = Follower(Tag(entry=e), proc=str(tmp_path), watchers=Tag(pattern=r"MNTUI_RUN=j/r/n/\w+"))
    assert [p.pid for p in f.sample()] == [100, 102]
    assert [p.pid for p in f.sample()] == [100, 102]


def test_the_runs_cgroup_holds_members_whatever_else(tmp_path: Path) -> None:
    e = "MNTUI_RUN=j/r/n"
    _fake(tmp_path, 100, 1, threads={100: []})  # reparented to init, renamed: only its cgroup
    _fake(tmp_path, 101, 1, threads={101: []})
    cg = tmp_path / "cg"
    cg.mkdir()
    (cg / "cgroup.procs").write_text("100\n")
    f = Follower(e, proc=str(tmp_path), scan_every=1000)
    f.cgroup(str(cg))
    assert [p.pid for p in f.sample()] == [100] and f.environ_reads == 1  # 101's, by a scan
    (cg / "cgroup.procs").write_text("100\n101\n")
    assert [p.pid for p in f.sample()] == [100, 101]


def test_without_children_files_a_scan_takes_a_members_child_by_its_parent(
    tmp_path: Path,
) -> None:
    e = "MNTUI_RUN=j/r/n"
    _fake(tmp_path, 100, 1, env=e)
    _fake(tmp_path, 101, 100)  # untagged, its parent a member
    _fake(tmp_path, 102, 1)  # untagged, a stranger
    f = Follower(e, proc=str(tmp_path), scan_every=1)
    f.add(100)
    first = [p.pid for p in f.sample()]
    assert not f.children_supported and first in ([100], [100, 101])  # as the scan meets them
    assert [p.pid for p in f.sample()] == [100, 101]
