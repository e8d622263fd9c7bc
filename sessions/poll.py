"""Snapshots of every node of a run: one round trip per node per poll, all in parallel.

The poll script runs on the node's persistent shell and uses shell builtins where it
can (`read` of /proc files): on a 64-node job every process spawned per poll is paid
64 times a second. It prints one record a line; `parse_answer` reads them into a typed
PollAnswer (strictly: what a node's processes chose, their command lines and the text
of nvidia-smi and of the log, arrives base64-encoded, and a line of any other shape is
skipped and counted), and `apply_answer` turns that into a frozen NodeSnapshot. The
Poller keeps what must persist between polls (log offsets, CPU ticks, the PIDs whose
command lines it already knows).
"""

from __future__ import annotations

import re
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import gpu as gpumod
from . import tmux
from .procs import B64, INT, SHELL_LIB, b64_bytes, b64_text, node_lines, run_dir_word, run_pattern
from .results import NodeError, Outcome
from .runs import NodeRecord, RunRecord
from .snapshot import JobProc, NodeSnapshot

if TYPE_CHECKING:  # remote's SSH machinery is not needed to read a snapshot (`status`)
    from .remote import Cluster, Node

LOG_CHUNK = 64 * 1024
ROUND_WAIT = 5.0  # seconds a poll round waits for a node before it counts as unreachable


PORTS_EVERY = 10  # polls between listening-port scans (`ss -p` walks every fd: 6 ms)
# Polls between full tag scans (grep of every /proc/*/environ). In between, the poll
# walks the tree of the PIDs it knows and of the pane's process: that sees a new child,
# an exit and a reparented worker (its ppid is re-read) on the very next poll; only a
# tagged process outside that tree (a daemon that double-forked between two polls)
# waits for the scan.
SCAN_EVERY = 10

# mntui_poll_tree PID... -> those PIDs and all their descendants, one a line, read from
# /proc/*/task/*/children with builtins only. A children file ends without a newline,
# so `read` returns EOF on it: the line it read counts all the same (a walk that
# reads `read -r x <f && ...` drops it, and never descends).
_TREE = """mntui_poll_tree() {
  _seen=" "
  _todo="$*"
  while [ -n "$_todo" ]; do
    _next=""
    for _p in $_todo; do
      case "$_seen" in *" $_p "*) continue ;; esac
      [ -d "/proc/$_p" ] || continue
      _seen="$_seen$_p "
      for _c in "/proc/$_p"/task/*/children; do
        _k=""
        read -r _k 2>/dev/null <"$_c" || :
        _next="$_next $_k"
      done
    done
    _todo=$_next
  done
  for _p in $_seen; do echo "$_p"; done
}"""


def _pane_lines(rec: NodeRecord, pane_pid: int | None) -> str:
    """Ask tmux only when the pane's process is gone; a live one is reported as tmux would."""
    ask_tmux = f"printf '@PANE %s\\n' \"$({tmux.pane_status(rec.session)})\""
    if not pane_pid:
        return ask_tmux
    alive = tmux.format_pane_status(tmux.PaneStatus(False, pane_pid, None))
    return f"if [ -d /proc/{pane_pid} ]; then echo '@PANE {alive}'; else {ask_tmux}; fi"


def _gpu_lines() -> str:
    return f"""if command -v nvidia-smi >/dev/null 2>&1; then
  printf '@GPU %s\\n' "$({gpumod.GPU_QUERY} 2>&1 | base64 -w0)"
  printf '@APPS %s\\n' "$({gpumod.APP_QUERY} 2>&1 | base64 -w0)"
else echo "@NOSMI"; fi"""


def poll_script(
    rec: NodeRecord,
    offset: int,
    known_pids: frozenset[int],
    first: bool,
    gpus: bool = True,
    pane_pid: int | None = None,
    ports: bool = True,
    full_scan: bool = True,
    keep: int | None = None,
) -> str:
    """Steady-state polls spawn few processes: node clock and sysconf come on the first
    poll only, tmux is asked only when the pane's process is gone, ports every few polls."""
    known = " ".join(str(p) for p in sorted(known_pids))
    seeds = " ".join(str(p) for p in sorted(known_pids | ({pane_pid} if pane_pid else set())))
    scan = (
        f"mntui_scan {shlex.quote(run_pattern(rec.tag))}"
        if full_scan or not seeds
        else f"mntui_poll_tree {seeds}"
    )
    once = (
        "printf '@NOW %s\\n' \"$(date +%s.%N)\"\n"
        'printf \'@SYS %s %s %s\\n\' "$(getconf CLK_TCK)" "$(getconf PAGESIZE)" "$(nproc)"'
        if first
        else ""
    )
    return f"""{SHELL_LIB}
{_TREE}
d={run_dir_word(rec.run_dir)}
{once}
read -r up _ </proc/uptime && printf '@UP %s\\n' "$up"
{_pane_lines(rec, pane_pid)}
[ -f "$d/exit_code" ] && {{ read -r rc <"$d/exit_code"; printf '@EXIT %s\\n' "$rc"; }}
known=" {known} "
# shellcheck disable=SC2046 # PIDs, one a word
for p in $({scan}); do
  mntui_stat "$p" || continue
  printf '@P %s %s\\n' "$p" "$_s"
  case "$known" in
    *" $p "*) ;;
    *) printf '@C %s %s\\n' "$p" "$(mntui_b64 "/proc/$p/cmdline")" ;;
  esac
done
read -r l </proc/loadavg && printf '@LOAD %s\\n' "$l"
while read -r k v _; do
  case "$k" in MemTotal: | MemAvailable:) printf '@MEM %s %s\\n' "$k" "$v" ;; esac
done </proc/meminfo
{"echo @PORTS; mntui_listening" if ports else ""}
{_gpu_lines() if gpus else ""}
# shellcheck disable=SC2046 # size and mtime, one a word
set -- $(stat -c '%s %Y' "$d/output.log" 2>/dev/null)
printf '@LOGSTAT %s\\n' "$*"
{_log_lines(offset, keep)}
echo "@END"
"""


def _log_lines(offset: int, keep: int | None) -> str:
    """Bytes of output.log from `offset`; with `keep`, its last `keep` bytes instead (a
    viewer that joins late), exactly those before the size just printed."""
    if keep is None:
        return f"""if [ "${{1:-0}}" -gt {offset} ]; then
  printf '@LOG '
  tail -c +{offset + 1} "$d/output.log" | head -c {LOG_CHUNK} | base64 -w0
  echo
fi"""
    keep = min(keep, LOG_CHUNK)
    return f"""if [ "${{1:-0}}" -gt 0 ]; then
  s=$(($1 > {keep} ? $1 - {keep} : 0))
  printf '@LOG '
  tail -c +$((s + 1)) "$d/output.log" | head -c $(($1 - s)) | base64 -w0
  echo
fi"""


# -- reading the answer: pure ------------------------------------------------------

FLOAT = r"[0-9]{1,12}\.[0-9]{1,9}"
# One exact shape per record; the groups are what parse_answer reads.
_SHAPES = {
    tag: re.compile(tag + body, re.ASCII)
    for tag, body in {
        "@NOW": f" ({FLOAT})",
        "@SYS": f" ({INT}) ({INT}) ({INT})",
        "@UP": f" ({FLOAT})",
        "@PANE": " (.*)",  # tmux.parse_pane_status reads it
        "@EXIT": f" (-?{INT})",
        # /proc/PID/stat after comm: state, then 40-odd numbers (proc(5): ppid is field 4,
        # utime 14, stime 15, rss 24)
        "@P": f" ({INT}) ([A-Za-z]) (-?{INT}(?: -?{INT}){{20,80}})",
        "@C": f" ({INT}) ({B64})",
        "@LOAD": f" ({FLOAT}) ({FLOAT}) ({FLOAT}) {INT}/{INT} {INT}",
        "@MEM": f" (MemTotal|MemAvailable): ({INT})",
        "@PORTS": "",
        "@L": f" ({INT}) ({INT})",
        "@GPU": f" ({B64})",
        "@APPS": f" ({B64})",
        "@NOSMI": "",
        "@LOGSTAT": f" (?:({INT}) ({INT}))?",
        "@LOG": f" ({B64})",
        "@END": "",
    }.items()
}


@dataclass(frozen=True)
class ProcStat:
    pid: int
    state: str
    ppid: int
    ticks: int  # utime + stime, in clock ticks
    rss_pages: int


@dataclass(frozen=True)
class PollAnswer:
    """One poll's answer as the node gave it: typed, nothing derived, nothing remembered."""

    node_now: float | None = None  # the node's wall clock (first poll)
    sysconf: tuple[int, int, int] | None = None  # CLK_TCK, PAGESIZE, nproc (first poll)
    uptime: float | None = None
    pane: tmux.PaneStatus | None = None  # None: no session
    exit_code: int | None = None
    stats: tuple[ProcStat, ...] = ()
    cmdlines: Mapping[int, str] = field(default_factory=dict)  # PIDs new to the poller
    load: tuple[float, float, float] | None = None
    mem_kib: Mapping[str, int] = field(default_factory=dict)
    listeners: tuple[tuple[int, int], ...] | None = None  # (port, pid); None: not scanned
    nvidia_smi: bool = False
    gpu_text: str = ""
    apps_text: str = ""
    log_size: int | None = None
    log_mtime: int | None = None
    log: bytes = b""
    malformed: int = 0


def _stat(groups: tuple[str, ...]) -> ProcStat:
    pid, state, rest = groups
    f = rest.split()  # after state: ppid(0) ... utime(10) stime(11) ... rss(20)
    return ProcStat(int(pid), state, int(f[0]), int(f[10]) + int(f[11]), int(f[20]))


_NUMBERS = {"@NOW": ("node_now", float), "@UP": ("uptime", float), "@EXIT": ("exit_code", int)}


def _record(tag: str, g: tuple[str, ...], out: dict[str, Any]) -> bool:
    """Store one single-valued record in `out`; False if it does not hold what its shape
    promises (base64 that does not decode, a pane status tmux would not print)."""
    if tag in ("@GPU", "@APPS", "@LOG"):
        raw = b64_bytes(g[0])
        if raw is None:
            return False
        if tag == "@LOG":
            out["log"] = raw
        else:
            out["gpu_text" if tag == "@GPU" else "apps_text"] = raw.decode(errors="replace")
            out["nvidia_smi"] = True
    elif tag == "@PANE":
        out["pane"] = tmux.parse_pane_status(g[0])
        return out["pane"] is not None or tmux.no_pane(g[0])
    elif tag == "@SYS":
        out["sysconf"] = (int(g[0]), int(g[1]), int(g[2]))
    elif tag == "@LOAD":
        out["load"] = (float(g[0]), float(g[1]), float(g[2]))
    elif tag == "@LOGSTAT":
        out["log_size"], out["log_mtime"] = (int(g[0]), int(g[1])) if g[0] else (None, None)
    elif tag in _NUMBERS:
        key, kind = _NUMBERS[tag]
        out[key] = kind(g[0])
    return True  # @NOSMI, @END: their presence is all they say


def parse_answer(text: str) -> PollAnswer:
    """Pure: the poll script's output as a PollAnswer; never raises."""
    out: dict[str, Any] = {}
    stats: list[ProcStat] = []
    cmdlines: dict[int, str] = {}
    mem: dict[str, int] = {}
    listeners: list[tuple[int, int]] | None = None
    bad = 0
    for line in node_lines(text):
        tag = line.partition(" ")[0]
        shape = _SHAPES.get(tag)
        m = shape.fullmatch(line) if shape else None
        if m is None:
            bad += 1
        elif tag == "@P":
            stats.append(_stat(m.groups()))
        elif tag == "@C":
            cmd = b64_text(m[2])
            bad += cmd is None
            if cmd is not None:
                cmdlines[int(m[1])] = cmd
        elif tag == "@MEM":
            mem[m[1]] = int(m[2])
        elif tag == "@PORTS":
            listeners = []
        elif tag == "@L":
            if listeners is None:  # a listener before the scan's header: not ours
                bad += 1
            else:
                listeners.append((int(m[1]), int(m[2])))
        elif not _record(tag, m.groups(), out):
            bad += 1
    listened = tuple(listeners) if listeners is not None else None
    return PollAnswer(
        **out,
        stats=tuple(stats),
        cmdlines=cmdlines,
        mem_kib=mem,
        listeners=listened,
        malformed=bad,
    )


# -- what persists between polls, and the snapshot -----------------------------------


@dataclass
class _NodeState:
    offset: int = 0
    cmdlines: dict[int, str] = field(default_factory=dict)
    ticks: dict[int, tuple[float, int]] = field(default_factory=dict)  # pid -> (node uptime, ticks)
    clk_tck: int = 100
    page: int = 4096
    ncpu: int | None = None
    first: bool = True
    polls: int = 0
    pane_pid: int | None = None
    ports: tuple[int, ...] = ()
    size: int | None = None
    changed_at: float | None = None  # local time output.log last grew
    keep: int = 0  # with offset -1: start this many bytes before the end


def _update_procs(a: PollAnswer, st: _NodeState) -> tuple[JobProc, ...]:
    """The job's processes with CPU rates from the ticks of the previous poll."""
    if a.sysconf is not None:
        st.clk_tck, st.page, ncpu = a.sysconf
        st.ncpu, st.first = ncpu, False
    st.cmdlines.update(a.cmdlines)
    now = a.uptime or 0.0  # node uptime: a monotonic clock for CPU rates
    procs = []
    seen: dict[int, tuple[float, int]] = {}
    for s in a.stats:
        prev = st.ticks.get(s.pid)
        cpu = (
            100.0 * (s.ticks - prev[1]) / max(st.clk_tck, 1) / (now - prev[0])
            if prev and now > prev[0]
            else None
        )
        seen[s.pid] = (now, s.ticks)
        rss = s.rss_pages * st.page / 2**20
        procs.append(JobProc(s.pid, s.ppid, s.state, cpu, rss, st.cmdlines.get(s.pid, "")))
    st.ticks = seen
    st.cmdlines = {p: c for p, c in st.cmdlines.items() if p in seen}
    if a.listeners is not None:
        st.ports = tuple(sorted({port for port, pid in a.listeners if pid in seen}))
    st.pane_pid = a.pane.pid if a.pane is not None and not a.pane.dead else None
    return tuple(procs)


def _update_log(a: PollAnswer, st: _NodeState) -> float | None:
    """Advance the log offset; the output's age, from the node's clock on the first
    poll, then from our own observations of the size."""
    if a.log_size is not None and a.log_size < st.offset:  # truncated or replaced
        st.offset = 0
    st.offset += len(a.log)
    local = time.time()
    if a.node_now is not None and a.log_mtime is not None:
        st.changed_at = local - max(0.0, a.node_now - a.log_mtime)
    elif a.log_size is not None and a.log_size != st.size:
        st.changed_at = local
    st.size = a.log_size
    return (local - st.changed_at) if st.changed_at is not None else None


def apply_answer(
    rec: NodeRecord, a: PollAnswer, st: _NodeState, rtt: float, gpus: bool = True
) -> NodeSnapshot:
    """The state update: what this answer means given what earlier polls left in `st`."""
    procs = _update_procs(a, st)
    reading = None
    if gpus and a.nvidia_smi:
        pids = frozenset(p.pid for p in procs)
        reading = gpumod.parse_reading(a.gpu_text, a.apps_text, pids)
    return NodeSnapshot(
        node=rec.node,
        rank=rec.rank,
        at=time.time(),
        reachable=True,
        rtt=rtt,
        session=a.pane is not None,
        pane_dead=a.pane.dead if a.pane is not None else None,
        pane_pid=a.pane.pid if a.pane is not None else None,
        exit_code=a.exit_code,
        procs=procs,
        ports=st.ports,
        gpu=reading,
        load=a.load,
        ncpu=st.ncpu,
        mem_total_mib=a.mem_kib["MemTotal"] / 1024 if "MemTotal" in a.mem_kib else None,
        mem_available_mib=(
            a.mem_kib["MemAvailable"] / 1024 if "MemAvailable" in a.mem_kib else None
        ),
        log_size=a.log_size,
        output_age=_update_log(a, st),
        new_output=a.log,
        node_time=a.node_now,
        malformed=a.malformed,
    )


def parse_poll(
    rec: NodeRecord, out: str, st: _NodeState, rtt: float, gpus: bool = True
) -> NodeSnapshot:
    return apply_answer(rec, parse_answer(out), st, rtt, gpus)


class Poller:
    """Polls one run's nodes; keeps per-node offsets and CPU counters between polls."""

    def __init__(
        self,
        record: RunRecord,
        cluster: Cluster,
        *,
        gpus: bool = True,
        from_offsets: Mapping[str, int] | None = None,
    ) -> None:
        self.record, self.cluster, self.gpus = record, cluster, gpus
        self._state = {
            n.node: _NodeState(offset=(from_offsets or {}).get(n.node, 0)) for n in record.nodes
        }
        self.polls = 0  # rounds polled: one poll stream per run is checked by counting
        self.round_wait = ROUND_WAIT
        self._inflight: dict[str, Future[NodeSnapshot]] = {}
        self._sent: dict[str, float] = {}

    def offsets(self) -> dict[str, int]:
        """Where each log's next read starts: between two polls, the end of what the
        snapshots so far carried (an agent's subscriber gets the bytes before it)."""
        return {n: max(0, st.offset) for n, st in self._state.items()}

    def tail_from_end(self) -> None:
        """Skip what the log already holds (a viewer that joins late starts at the end)."""
        self.start_near_end(0)

    def start_near_end(self, keep: int) -> None:
        """Start `keep` bytes before the end of each log: a late viewer sees some context."""
        for st in self._state.values():
            st.offset, st.keep = -1, keep

    def poll_node(self, node: Node) -> NodeSnapshot:
        rec = self.record.node(node.name)
        st = self._state[node.name]
        # "From the end": this poll reads the log's last `keep` bytes, and follows from its size.
        tail = st.keep if st.offset < 0 else None
        t0 = time.monotonic()
        try:
            script = poll_script(
                rec,
                max(0, st.offset),
                frozenset(st.cmdlines),
                st.first,
                self.gpus,
                st.pane_pid,
                ports=st.polls % PORTS_EVERY == 0,
                full_scan=st.polls % SCAN_EVERY == 0,
                keep=tail,
            )
            st.polls += 1
            res = node.run(script, timeout=20)
        except NodeError as exc:
            return NodeSnapshot(rec.node, rec.rank, time.time(), reachable=False, error=exc.message)
        if tail is not None:
            st.offset = 0
        snap = parse_poll(rec, res.stdout, st, time.monotonic() - t0, self.gpus)
        if tail is not None:
            st.offset = snap.log_size or 0
        return snap

    def poll(
        self,
        on_node: Callable[[NodeSnapshot], object] | None = None,
        *,
        late_until: Mapping[str, float] | None = None,
    ) -> dict[str, NodeSnapshot]:
        """Poll every node at once; `on_node` gets each snapshot the moment it arrives.

        A node that has not answered within `round_wait` holds back no one: it is
        unreachable for this round, and its poll, still running, is not sent again;
        its answer (log bytes included) comes with the first round after it returns.
        A hung sshd once held every round, and so the watchdog, for the 20 s timeout.
        `late_until` (time.monotonic()) waits less for such a node whose poll is still
        out: the watchdog decides an unreachable node at its deadline, not 5 s later."""
        self.polls += 1
        pending: dict[Future[NodeSnapshot], str] = {}
        cut: dict[Future[NodeSnapshot], float] = {}
        start = time.monotonic()
        for n in self.record.nodes:
            fut = self._inflight.get(n.node)
            limit = start + self.round_wait
            if fut is None:
                fut = self._inflight[n.node] = self._submit(n.node)
            elif late_until is not None and n.node in late_until:
                limit = min(limit, late_until[n.node])
            pending[fut], cut[fut] = n.node, limit
        out = self._gather(pending, cut, on_node)
        return {n.node: out[n.node] for n in self.record.nodes}

    def _gather(
        self,
        pending: Mapping[Future[NodeSnapshot], str],
        cut: Mapping[Future[NodeSnapshot], float],
        on_node: Callable[[NodeSnapshot], object] | None,
    ) -> dict[str, NodeSnapshot]:
        """Every answer that comes before its node's cut; the others are unreachable."""
        out: dict[str, NodeSnapshot] = {}
        waiting = set(pending)
        while waiting:
            now = time.monotonic()
            open_cuts = [cut[f] for f in waiting if cut[f] > now]
            left = min(open_cuts) - now if open_cuts else 0.0  # 0: only what is done by now
            done, waiting = wait(waiting, timeout=left, return_when=FIRST_COMPLETED)
            for fut in done:
                name = pending[fut]
                del self._inflight[name]
                out[name] = self._answer(name, fut)
                if on_node:
                    on_node(out[name])
            if not done and not open_cuts:
                break
        for fut in waiting:
            name = pending[fut]
            late = time.monotonic() - self._sent[name]
            out[name] = self._unreachable(name, f"no answer for {late:.1f}s (poll still running)")
            if on_node:
                on_node(out[name])
        return out

    def asked(self) -> dict[str, float]:
        """When each node's latest poll was sent (time.monotonic()): after a round, for a
        node that answered, the earliest moment its answer can describe."""
        return dict(self._sent)

    def _submit(self, name: str) -> Future[NodeSnapshot]:
        """One node's poll on a daemon thread: a hung node never keeps a command from
        exiting (a pool's threads are joined at exit)."""
        fut: Future[NodeSnapshot] = Future()
        self._sent[name] = time.monotonic()

        def run() -> None:
            try:
                fut.set_result(self.poll_node(self.cluster.nodes[name]))
            except BaseException as exc:  # a bug on one node must not hide the others
                fut.set_exception(exc)

        threading.Thread(target=run, name=f"mntui-poll-{name}", daemon=True).start()
        return fut

    def _answer(self, name: str, fut: Future[NodeSnapshot]) -> NodeSnapshot:
        exc = fut.exception()
        if exc is None:
            return fut.result()
        error = Outcome[NodeSnapshot].failure(name, exc).error
        return self._unreachable(name, error or type(exc).__name__)

    def _unreachable(self, name: str, error: str) -> NodeSnapshot:
        rec = self.record.node(name)
        return NodeSnapshot(rec.node, rec.rank, time.time(), reachable=False, error=error)
