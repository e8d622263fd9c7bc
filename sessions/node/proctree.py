"""The run's processes on this node, followed through /proc without scanning it all.

Membership is the tag in the environment, never the name: a process belongs to the run
iff it is ours (uid) and its environ holds the run's entry exactly. The environ is read
once per process (pid, start): the verdict holds until the pid is another process.

Why not a full /proc scan per sample: the fake nodes of the tests share one /proc, and
a real node may run thousands of processes; a scan every 0.5 s would eat the sentinel's
budget (≤ 5 ms per sample). So each sample re-reads only the known members' `stat` and
their main thread's `children`; all threads' `children` (a torch rank has 50-100) and an
incremental scan of /proc, which finds what the children files cannot (a double-forked
process reparented to init, a rank started another way), come every `scan_every`
samples. The scan costs a known entry nothing: its directory inode (free from readdir)
tells a reused pid from the process already judged. Without `children` files (a kernel
without CONFIG_PROC_CHILDREN) new processes are found by the scan alone, so it comes
more often.

A process caught between fork and exec (PF_FORKNOEXEC in its stat flags) still shows
its parent's environ: the pane's shell forked by the tmux server, torchrun forked by a
shell that exported the tag. Judged then, it would be misjudged for good, so while it is
young and shows no tag it is looked at again next sample instead. One that shows the
tag is a member at once: the parent it was forked from carried the exact entry (a
shell's subshell, launch.sh's `{ ...; } | tee`, forks and never execs, and the command it then
starts would look orphaned under a parent left out). A child that forks and never
execs (a DataLoader worker) keeps the flag and its parent's environ, which is then its
own: once older than YOUNG_S it is judged like any other.

A process that vanishes mid-read is skipped: a race, not an error. What /proc says is
data: a stat line of any other shape is counted in `malformed` and skipped.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from dataclasses import dataclass

ENVIRON_LIMIT = 256 * 1024
STAT_LIMIT = 4096
CHILDREN_LIMIT = 64 * 1024
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


class Follower:
    """Follows one run's processes on this node from seeds, children files and scans."""

    def __init__(
        self,
        entry: str,
        *,
        proc: str = "/proc",
        scan_every: int = 10,
        exclude: Collection[int] = (),
        since: int = 0,
    ) -> None:
        """`entry` is the whole environ entry (`MNTUI_RUN=job/run/node`), matched exactly;
        `since` (ticks since boot) leaves out processes older than the attempt."""
        if "=" not in entry or "\0" in entry or scan_every < 1:
            raise ValueError(f"bad follower arguments: entry={entry!r} scan_every={scan_every}")
        self._entry = os.fsencode(entry)
        self._proc = proc
        self._scan_every = scan_every
        self._exclude = frozenset(exclude) | {os.getpid()}
        self._since = since
        self._uid = os.getuid()
        self._seeds: set[int] = set()
        self._known: dict[int, int] = {}  # member pid -> start
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

    def add(self, pid: int) -> None:
        """A seed (the pane's pid): judged by its tag at the next sample like any other.
        Added again, it is judged again if it was not a member: the pane's process execs
        `env MNTUI_RUN=... bash`, and read a moment before that exec it is untagged."""
        if pid > 0 and len(self._seeds) < MAX_PROCS:
            self._seeds.add(pid)
            v = self._verdicts.get(pid)
            if v is not None and not v.member:
                del self._verdicts[pid]

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
        seeds, self._seeds = self._seeds, set()
        for pid in seeds:
            self._admit(pid, live, again=True)
        if full:
            self._scan(live)
        self._expand(live, all_tasks=full)
        self._known = {pid: line.proc.start for pid, line in live.items()}
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
                self._seeds.add(pid)
            elif line.proc.state != "Z":
                live[pid] = line
        return live

    def _admit(self, pid: int, live: dict[int, StatLine], *, again: bool) -> bool:
        """`again`: a process not judged yet (see YOUNG_S) is looked at next sample,
        else at the next scan."""
        if pid in live:
            return False
        if len(live) >= MAX_PROCS:
            self.over_limit += 1
            return False
        line = self._judge(pid, again)
        if line is None:
            return False
        live[pid] = line
        return True

    def _judge(self, pid: int, again: bool) -> StatLine | None:
        """The process if it is a live member not yet followed. A member judged before
        and not live is a zombie: it stays out."""
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
        young = line.forked and proc.start > self._young_after and proc.state != "Z"
        read_before = line.forked and self._untagged_fork.get(pid) == st.st_ino
        if young and read_before:  # not exec'd since: the same environ, no tag
            if again:
                self.add(pid)
            return None
        member = (
            not read_before
            and proc.start >= self._since
            and proc.state != "Z"
            and self._tagged(pid)
        )
        if young and not member:  # between fork and exec: its environ may be its parent's
            self._untagged_fork[pid] = st.st_ino
            if again:
                self.add(pid)
            return None
        self._untagged_fork.pop(pid, None)
        self._verdicts[pid] = _Verdict(st.st_ino, member)
        return line if member else None

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
        """Children of members, and theirs, in this same sample."""
        queue = list(live)
        while queue and self.children_supported:
            pid = queue.pop()
            for child in self._children(pid, all_tasks and live[pid].threads > 1):
                if self._admit(child, live, again=True):
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

    def _tagged(self, pid: int) -> bool:
        self.environ_reads += 1
        data = self._read(f"{self._proc}/{pid}/environ", ENVIRON_LIMIT)
        if not data:
            return False
        if len(data) >= ENVIRON_LIMIT:
            data = data[: data.rfind(b"\0") + 1]  # the cut entry is not the entry
        return self._entry in data.split(b"\0")

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
