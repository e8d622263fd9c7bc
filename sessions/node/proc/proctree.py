"""The run's processes on this node, followed through /proc without scanning it all:
the one rule of what is the job's, which the sentinel follows a run by and the kill
(killer.py) stops it by.

A process of this user is the job's when any of these holds:
- it carries the tag: an environment entry matched whole (`MNTUI_RUN=<job>/<run>/<node>`),
  never a process name;
- it descends from the job's pane (the tmux pane's process, a `root`) or from a process
  already known as a member;
- it was seen as a member before (a `root` with its start time: a pid that a dead member
  freed and another process took is never it); once a member, always, while it lives;
- it sits in the run's own cgroup (members.py: where launch.sh could make one).
Why more than the tag: the environment is the process's own memory. `setproctitle`
(used by many training stacks) writes the title over it, so /proc/PID/environ reads
zeros; a launcher that starts children with a clean environment (`env -i`, an allow
list) drops it. A helper a rank starts in a session of its own keeps the rank as its
parent until the rank dies, and then is a member already. Watchers (`<tag>/sentinel`,
`/coord`, `/guard`, a kill's `watchers` tag) are members by their own tag alone: what
they start (a capture's py-spy, a restart's tmux) is not the job's by descent.

Why not a full /proc scan per sample: the fake nodes of the tests share one /proc, and
a real node may run thousands of processes; a scan every 0.5 s would eat the sentinel's
budget (<= 5 ms per sample). So each sample re-reads only the known members' `stat` and
their main thread's `children` (and the run's cgroup.procs, one read); all threads'
`children` (a torch rank has 50-100) and an incremental scan of /proc, which finds what
the children files cannot (a tagged process started another way), come every
`scan_every` samples. The scan costs a known entry nothing: its directory inode (free
from readdir) tells a reused pid from the process already judged. Without `children`
files (a kernel without CONFIG_PROC_CHILDREN) new processes are found by the scan alone
(a parent that is a member says so from the stat line), so it comes more often.

A process caught between fork and exec (PF_FORKNOEXEC in its stat flags) still shows
its parent's environ: the pane's shell forked by the tmux server, torchrun forked by a
shell that exported the tag. Judged by its tag then, it would be misjudged for good, so
while it is young and shows no tag it is looked at again next sample instead. One that
shows the tag is a member at once. A child that forks and never execs (a DataLoader
worker) keeps the flag and its parent's environ, which is then its own: once older
than YOUNG_S it is judged like any other.

A process that vanishes mid-read is skipped: a race, not an error. What /proc says is
data: a stat line of any other shape is counted in `malformed` and skipped.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Collection
from dataclasses import dataclass

ENVIRON_LIMIT = 256 * 1024
STAT_LIMIT = 4096
CHILDREN_LIMIT = 64 * 1024
CGROUP_PROCS_LIMIT = 1 << 20  # bytes of the run's cgroup.procs read
READ_CHUNK = 64 * 1024  # one os.read: most /proc files and environments fit in one
MAX_PROCS = 4096  # members followed at once; more are counted in `over_limit`
MAX_TASKS = 4096  # threads whose `children` are read per process
NO_CHILDREN_EVERY = 4  # scan period without `children` files (2 s at 0.5 s a sample)
YOUNG_S = 1.0  # a forked, not yet exec'd one younger than this showing no tag: judged later
PF_FORKNOEXEC = 0x40
_PID_DIGITS = 10
_STAT_FIELDS = 22  # after the comm: state .. rss
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
_TICKS = os.sysconf("SC_CLK_TCK")


def read_bounded(path: str, limit: int) -> bytes | None:
    """At most `limit` bytes of a file, read to its end (a /proc seq file gives a page a
    read), or None when it cannot be read: a process gone mid-read is a race, not an
    error, and what is read is data for a strict parser, however long it was. Plain
    os.read calls of at most READ_CHUNK: a buffered `read(limit)` allocates `limit`
    bytes a call, and a kill's scan reads every environment on the host (256 KiB
    each: 4x the cost of the read itself, 64 sentinels at once on the fake nodes)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        parts, got = [], 0
        while got < limit:
            part = os.read(fd, min(READ_CHUNK, limit - got))
            if not part:
                break
            parts.append(part)
            got += len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)
    except OSError:
        return None
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str  # one letter from /proc/P/stat ("R", "S", "T", "t", "Z", ...)
    ticks: int  # utime + stime, clock ticks
    rss_kb: int
    start: int  # starttime, ticks since boot: (pid, start) is one process despite pid reuse


@dataclass(frozen=True)
class StatLine:
    proc: Proc
    threads: int
    forked: bool  # PF_FORKNOEXEC: forked and not exec'd (yet)


@dataclass(frozen=True)
class _Verdict:
    """What a /proc entry was judged; `ino` (the entry's inode) changes when its pid is
    reused, so a scan can skip an entry it has judged without reading anything."""

    ino: int
    member: bool


def parse_stat(pid: int, data: bytes) -> StatLine | None:
    """None for a line of any other shape. The comm may hold spaces and ')': the fields
    start after the LAST ')'."""
    head, sep, tail = data.rpartition(b")")
    if not sep or not head.startswith(b"%d (" % pid) or not tail.endswith(b"\n"):
        return None
    fields = tail.split()
    if len(fields) < _STAT_FIELDS or len(fields[0]) != 1 or not fields[0].isalpha():
        return None
    nums = (fields[1], fields[6], fields[11], fields[12], fields[17], fields[19], fields[21])
    if not all(n.isdigit() and len(n) <= 20 for n in nums):
        return None
    ppid, flags, utime, stime, threads, start, rss = (int(n) for n in nums)
    proc = Proc(pid, ppid, fields[0].decode(), utime + stime, rss * _PAGE_KB, start)
    return StatLine(proc, threads, bool(flags & PF_FORKNOEXEC))


class Tag:
    """An environment entry, matched whole: exactly (`entry`) or by a regex (`pattern`)."""

    def __init__(self, *, entry: str | None = None, pattern: str | None = None) -> None:
        if (entry is None) == (pattern is None) or (entry is not None and "=" not in entry):
            raise ValueError(f"a tag is an entry or a pattern: {entry!r} {pattern!r}")
        if entry is not None and "\0" in entry:
            raise ValueError(f"a tag entry holds no NUL: {entry!r}")
        self._entry = os.fsencode(entry) if entry is not None else None
        self._rx = re.compile(os.fsencode(pattern)) if pattern is not None else None
        self._head = os.fsencode(entry) if entry is not None else literal_head(pattern or "")

    def carried_by(self, environ: bytes | None) -> bool:
        """`environ` as /proc gives it, read up to ENVIRON_LIMIT + 1 bytes: one read past
        the limit was cut, and its last, partial entry never matches as a whole one."""
        if not environ:
            return False
        if self._head and not environ.startswith(self._head) and b"\0" + self._head not in environ:
            return False  # no entry starts so: far faster than a regex over each entry
        entries = environ[:ENVIRON_LIMIT].split(b"\0")
        entries.pop()  # "" after the last NUL, or an entry cut short
        if self._entry is not None:
            return self._entry in entries
        assert self._rx is not None
        return any(self._rx.fullmatch(e) for e in entries)


def literal_head(pattern: str) -> bytes:
    """The text every whole match of `pattern` starts with (`MNTUI_RUN=job/` for the
    kill's patterns): a process whose environment holds no entry starting so cannot
    match, and a bytes search says that far faster than a regex over every entry; on a
    host of many processes (or 64 fake nodes on one /proc) the scan was most of a
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


class Follower:
    """Follows one run's processes on this node from roots, seeds, children files, the
    run's cgroup and scans."""

    def __init__(
        self,
        tag: Tag | str,
        *,
        proc: str = "/proc",
        scan_every: int = 10,
        exclude: Collection[int] = (),
        since: int = 0,
        watchers: Tag | None = None,
    ) -> None:
        """`tag`: the run's processes' (an exact entry, `MNTUI_RUN=job/run/node`, or a
        Tag); `watchers`: carriers of this tag are members by it alone; `since` (ticks
        since boot) leaves out processes older than the attempt."""
        if scan_every < 1 or (isinstance(tag, str) and ("=" not in tag or "\0" in tag)):
            raise ValueError(f"bad follower arguments: tag={tag!r} scan_every={scan_every}")
        self._tag = Tag(entry=tag) if isinstance(tag, str) else tag
        self._watch_tag = watchers
        self._proc = proc
        self._scan_every = scan_every
        self._exclude = frozenset(exclude) | {os.getpid()}
        self._since = since
        self._uid = os.getuid()
        self._seeds: set[int] = set()
        self._roots: dict[int, int] = {}  # pid -> its start
        self._cgroups: tuple[str, ...] = ()
        self._known: dict[int, int] = {}  # member pid -> start
        self._watchers: set[int] = set()  # members by a watchers' tag alone
        self._verdicts: dict[int, _Verdict] = {}
        # young forks whose environ showed no tag, by the entry's inode: read again only
        # once they exec'd (its stat flags say), judged untagged if they never do
        self._untagged_fork: dict[int, int] = {}
        self._samples = 0
        self._young_after = 0  # ticks since boot: started later = young
        self.children_supported = True
        self.last_cost_ms = 0.0
        self.last_full = False  # the last sample read all threads' children and scanned
        self.last_reads = 0  # files read by the last sample
        self.scanned = 0  # /proc entries judged by full scans (a skipped one is not)
        self.environ_reads = 0
        self.malformed = 0
        self.over_limit = 0

    @property
    def members(self) -> tuple[int, ...]:
        """The run's processes at the last sample: a kill signals them before it scans
        the host for the rest (the dict is replaced whole, so a reader in another thread
        sees one sample's)."""
        return tuple(self._known)

    @property
    def identities(self) -> tuple[tuple[int, int], ...]:
        """The members at the last sample as (pid, start): one process each, for good."""
        return tuple(self._known.items())

    def add(self, pid: int) -> None:
        """A seed, judged by its tag at the next sample like any other. Added again, it is
        judged again if it was not a member."""
        if pid > 0 and len(self._seeds) < MAX_PROCS:
            self._seeds.add(pid)
            v = self._verdicts.get(pid)
            if v is not None and not v.member:
                del self._verdicts[pid]

    def root(self, pid: int, start: int | None = None) -> None:
        """A process that is the job's whatever its environment, from the next sample:
        the pane's process, or one seen as a member before. Only that very process:
        the one of `start`, else the one at `pid` now, never another that takes its pid
        before the sample."""
        if pid <= 0 or len(self._roots) >= MAX_PROCS:
            return
        if start is None:
            line = self._stat(pid)
            if line is None:
                return
            start = line.proc.start
        self._roots[pid] = start

    @property
    def watchers(self) -> frozenset[int]:
        """The members at the last sample that are so by a watchers' tag alone."""
        return frozenset(self._watchers)

    @property
    def cgroups(self) -> tuple[str, ...]:
        return self._cgroups

    def cgroup(self, path: str) -> None:
        """The run's own cgroup (members.run_cgroup): whatever is in it is the job's."""
        if path not in self._cgroups:
            self._cgroups = (*self._cgroups, path)

    def sample(self) -> tuple[Proc, ...]:
        """The run's live processes now, sorted by pid; a zombie is gone."""
        t0 = time.process_time()
        self.last_reads = 0
        every = self._scan_every
        if not self.children_supported:
            every = min(every, NO_CHILDREN_EVERY)
        full = self._samples % every == 0
        self._samples += 1
        boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        self._young_after = int((boot - YOUNG_S) * _TICKS)
        live = self._refresh()
        roots, self._roots = self._roots, {}
        for pid, start in roots.items():
            self._admit_member(pid, start, live)
        for pid in self._in_cgroups():
            self._admit_member(pid, None, live)
        seeds, self._seeds = self._seeds, set()
        for pid in seeds:
            self._admit(pid, live, again=True)
        if full:
            self._scan(live)
        self._expand(live, all_tasks=full)
        self._known = {pid: line.proc.start for pid, line in live.items()}
        self._watchers &= set(live)
        self.last_full = full
        self.last_cost_ms = (time.process_time() - t0) * 1000
        return tuple(live[pid].proc for pid in sorted(live))

    def _refresh(self) -> dict[int, StatLine]:
        live: dict[int, StatLine] = {}
        for pid, start in self._known.items():
            line = self._stat(pid)
            if line is None:
                continue
            if line.proc.start != start:  # the pid was reused: a new process, judged anew
                self._verdicts.pop(pid, None)
                self._watchers.discard(pid)
                self._seeds.add(pid)
            elif line.proc.state != "Z":
                live[pid] = line
        return live

    def _in_cgroups(self) -> list[int]:
        out: list[int] = []
        for path in self._cgroups:
            data = self._read(f"{path}/cgroup.procs", CGROUP_PROCS_LIMIT) or b""
            out.extend(int(w) for w in data.split() if w.isdigit() and len(w) <= _PID_DIGITS)
        return out

    def _admit(self, pid: int, live: dict[int, StatLine], *, again: bool) -> bool:
        """By its tag (or its parent): `again`, a process not judged yet (see YOUNG_S) is
        looked at next sample, else at the next scan."""
        if pid in live:
            return False
        if len(live) >= MAX_PROCS:
            self.over_limit += 1
            return False
        line = self._judge(pid, again, live)
        if line is None:
            return False
        live[pid] = line
        return True

    def _admit_member(self, pid: int, start: int | None, live: dict[int, StatLine]) -> bool:
        """A member by a rule other than its tag (a root, a child of a member, the run's
        cgroup): ours, alive, not left out, and (`start`) that very process."""
        if pid in live or pid in self._exclude:
            return False
        if len(live) >= MAX_PROCS:
            self.over_limit += 1
            return False
        try:
            st = os.stat(f"{self._proc}/{pid}")
        except OSError:
            return False
        line = self._stat(pid) if st.st_uid == self._uid else None
        if line is None or line.proc.state == "Z":
            return False
        if line.proc.start < self._since or start not in (None, line.proc.start):
            return False
        self._verdicts[pid] = _Verdict(st.st_ino, True)
        self._untagged_fork.pop(pid, None)
        live[pid] = line
        return True

    def _judge(self, pid: int, again: bool, live: dict[int, StatLine]) -> StatLine | None:
        """The process if it is a live member not yet followed, by its tag or its parent.
        A member judged before and not live is a zombie: it stays out."""
        try:
            st = os.stat(f"{self._proc}/{pid}")
        except OSError:
            return None
        verdict = self._verdicts.get(pid)
        if verdict is not None and verdict.ino == st.st_ino:
            return None
        if st.st_uid != self._uid or pid in self._exclude:
            self._verdicts[pid] = _Verdict(st.st_ino, False)
            return None
        line = self._stat(pid)
        if line is None:
            return None
        proc = line.proc
        child = proc.ppid in live and proc.ppid not in self._watchers
        if child and proc.state != "Z" and proc.start >= self._since:
            self._untagged_fork.pop(pid, None)  # a member's child: the job's, whatever it carries
            self._verdicts[pid] = _Verdict(st.st_ino, True)
            return line
        young = line.forked and proc.start > self._young_after and proc.state != "Z"
        read_before = line.forked and self._untagged_fork.get(pid) == st.st_ino
        if young and read_before:  # not exec'd since: the same environ, no tag
            if again:
                self.add(pid)
            return None
        carries = None
        if not read_before and proc.start >= self._since and proc.state != "Z":
            carries = self._tagged(pid)
        if young and carries is None:  # between fork and exec: its environ may be its parent's
            self._untagged_fork[pid] = st.st_ino
            if again:
                self.add(pid)
            return None
        self._untagged_fork.pop(pid, None)
        self._verdicts[pid] = _Verdict(st.st_ino, carries is not None)
        if carries == "watcher":
            self._watchers.add(pid)
        return line if carries is not None else None

    def _scan(self, live: dict[int, StatLine]) -> None:
        present: set[int] = set()
        try:
            entries = os.scandir(self._proc)
        except OSError:
            return
        with entries:
            for entry in entries:
                name = entry.name
                if not (name.isascii() and name.isdigit() and len(name) <= _PID_DIGITS):
                    continue
                pid = int(name)
                present.add(pid)
                verdict = self._verdicts.get(pid)
                if pid in live or (verdict is not None and verdict.ino == entry.inode()):
                    continue
                self.scanned += 1
                self._admit(pid, live, again=False)
        for pid in [p for p in self._verdicts if p not in present]:
            del self._verdicts[pid]
        for pid in [p for p in self._untagged_fork if p not in present]:
            del self._untagged_fork[pid]

    def _expand(self, live: dict[int, StatLine], *, all_tasks: bool) -> None:
        """Children of members (a watcher's are not the job's by descent), and theirs,
        in this same sample: members whatever their environment says."""
        queue = [pid for pid in live if pid not in self._watchers]
        while queue and self.children_supported:
            pid = queue.pop()
            for child in self._children(pid, all_tasks and live[pid].threads > 1):
                if self._admit_member(child, None, live):
                    queue.append(child)

    def _children(self, pid: int, all_tasks: bool) -> list[int]:
        base = f"{self._proc}/{pid}/task"
        tids = [str(pid)]
        if all_tasks:
            try:
                tids = os.listdir(base)[:MAX_TASKS]
            except OSError:
                return []
        out: list[int] = []
        for tid in tids:
            data = self._read(f"{base}/{tid}/children", CHILDREN_LIMIT)
            if data is None:
                if tid == str(pid) and os.path.isdir(f"{base}/{tid}"):
                    self.children_supported = False  # the thread is there, its file is not
                    return []
                continue
            if len(data) >= CHILDREN_LIMIT:
                data = data[: data.rfind(b" ") + 1]  # the cut pid is not a pid
            out.extend(int(w) for w in data.split() if w.isdigit() and len(w) <= _PID_DIGITS)
        return out

    def _stat(self, pid: int) -> StatLine | None:
        data = self._read(f"{self._proc}/{pid}/stat", STAT_LIMIT)
        if data is None:
            return None
        line = parse_stat(pid, data)
        if line is None:
            self.malformed += 1
        return line

    def _tagged(self, pid: int) -> str | None:
        """ "job" or "watcher" by the tag its environment carries; None: neither."""
        self.environ_reads += 1
        data = self._read(f"{self._proc}/{pid}/environ", ENVIRON_LIMIT + 1)
        if self._tag.carried_by(data):
            return "job"
        if self._watch_tag is not None and self._watch_tag.carried_by(data):
            return "watcher"
        return None

    def _read(self, path: str, limit: int) -> bytes | None:
        """One bounded read (a /proc file gives all it has up to `limit` in one); None
        when the process is gone or the file unreadable."""
        self.last_reads += 1
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            return os.read(fd, limit)
        except OSError:
            return None
        finally:
            os.close(fd)
