"""Snapshots of every node of a run: one round trip per node per poll, all in parallel.

The poll script runs on the node's persistent shell and uses shell builtins where it
can (`read` of /proc files): on a 64-node job every process spawned per poll is paid
64 times a second. It prints marked sections that `parse_poll` turns into a frozen
NodeSnapshot; the Poller keeps what must persist between polls (log offsets, CPU
ticks, the PIDs whose command lines it already knows).
"""

from __future__ import annotations

import base64
import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from . import gpu as gpumod
from . import tmux
from .procs import SHELL_LIB, run_pattern
from .remote import Cluster, Node, NodeError, Outcome
from .runs import NodeRecord, RunRecord

q = shlex.quote
LOG_CHUNK = 64 * 1024


@dataclass(frozen=True)
class JobProc:
    pid: int
    ppid: int
    state: str  # R S D T t Z ...
    cpu_percent: float | None  # None on the first sight of a PID
    rss_mib: float
    cmdline: str


@dataclass(frozen=True)
class NodeSnapshot:
    node: str
    rank: int
    at: float  # local wall time the answer arrived
    reachable: bool
    error: str | None = None
    rtt: float | None = None  # seconds for this poll's round trip
    session: bool | None = None  # the node's tmux session exists
    pane_dead: bool | None = None
    pane_pid: int | None = None
    exit_code: int | None = None  # written by launch.sh when the command ended
    procs: tuple[JobProc, ...] = ()
    ports: tuple[int, ...] = ()  # ports the job's processes listen on
    gpu: gpumod.GpuReading | None = None  # None: no nvidia-smi on the node
    load: tuple[float, float, float] | None = None
    ncpu: int | None = None
    mem_total_mib: float | None = None
    mem_available_mib: float | None = None
    log_size: int | None = None
    output_age: float | None = None  # seconds since output.log last grew (node clock)
    new_output: bytes = b""  # bytes of output.log since the previous poll
    node_time: float | None = None  # the node's wall clock, first poll only

    @property
    def live_procs(self) -> tuple[JobProc, ...]:
        return tuple(p for p in self.procs if p.state not in ("Z", "X"))


PORTS_EVERY = 10  # polls between listening-port scans (`ss -p` walks every fd: 6 ms)
SCAN_EVERY = 10  # polls between full tag scans; in between, the known processes' tree


def poll_script(
    rec: NodeRecord,
    offset: int,
    known_pids: frozenset[int],
    first: bool,
    gpus: bool = True,
    pane_pid: int | None = None,
    ports: bool = True,
    full_scan: bool = True,
) -> str:
    """Steady-state polls spawn few processes: node clock and sysconf come on the first
    poll only, tmux is asked only when the pane's process is gone, ports every few polls."""
    d = f'"$HOME"/{q(rec.run_dir)}'
    known = " ".join(str(p) for p in sorted(known_pids))
    scan = (
        f"mntui_scan {q(run_pattern(rec.tag))}"
        if full_scan or not known_pids
        else f"mntui_tree {known}"
    )
    once = (
        'echo "@NOW $(date +%s.%N)"; echo "@SYS $(getconf CLK_TCK) $(getconf PAGESIZE) $(nproc)"'
        if first
        else ""
    )
    pane = (
        f'if [ -d /proc/{pane_pid} ]; then echo "@PANE 0 {pane_pid}"; '
        f'else echo "@PANE $({tmux.pane_status(rec.session)})"; fi'
        if pane_pid
        else f'echo "@PANE $({tmux.pane_status(rec.session)})"'
    )
    gpu = (
        f"""if command -v nvidia-smi >/dev/null 2>&1; then
  echo "@GPU"; {gpumod.GPU_QUERY} 2>&1
  echo "@APPS"; {gpumod.APP_QUERY} 2>&1
else echo "@NOSMI"; fi"""
        if gpus
        else ""
    )
    return f"""{SHELL_LIB}
d={d}
{once}
read -r _up _ </proc/uptime && echo "@UP $_up"
{pane}
[ -f "$d/exit_code" ] && {{ read -r _rc <"$d/exit_code"; echo "@EXIT $_rc"; }}
known=" {known} "
for _p in $({scan}); do
  read -r _s <"/proc/$_p/stat" 2>/dev/null || continue
  echo "@P $_p ${{_s#*) }}"
  case "$known" in
    *" $_p "*) ;;
    *) echo "@C $_p $(tr '\0' ' ' <"/proc/$_p/cmdline" 2>/dev/null | cut -c1-300)" ;;
  esac
done
read -r _l <"/proc/loadavg" && echo "@LOAD $_l"
while read -r _k _v _u; do
  case "$_k" in MemTotal:|MemAvailable:) echo "@MEM $_k $_v" ;; esac
done </proc/meminfo
{'echo "@LISTEN"; ss -Hltnp 2>/dev/null' if ports else ""}
{gpu}
set -- $(stat -c '%s %Y' "$d/output.log" 2>/dev/null)
echo "@LOGSTAT $*"
if [ "${{1:-0}}" -gt {offset} ]; then
  echo "@LOG"; tail -c +{offset + 1} "$d/output.log" | head -c {LOG_CHUNK} | base64 -w0; echo
fi
echo "@END"
"""


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


def parse_poll(
    rec: NodeRecord, out: str, st: _NodeState, rtt: float, gpus: bool = True
) -> NodeSnapshot:
    sections: dict[str, list[str]] = {}
    current = ""
    values: dict[str, str] = {}
    procs_raw: list[tuple[int, list[str]]] = []
    mem: dict[str, float] = {}
    for line in out.splitlines():
        if line.startswith("@P "):
            pid_s, _, rest = line[3:].partition(" ")
            procs_raw.append((int(pid_s), rest.split()))
        elif line.startswith("@C "):
            pid_s, _, cmd = line[3:].partition(" ")
            st.cmdlines[int(pid_s)] = cmd.strip()
        elif line.startswith("@MEM "):
            _, key, val = line.split()
            mem[key.rstrip(":")] = int(val) / 1024
        elif line.startswith("@") and line[1:].split(" ", 1)[0] in (
            "NOW",
            "UP",
            "SYS",
            "PANE",
            "EXIT",
            "LOAD",
            "LOGSTAT",
            "NOSMI",
        ):
            key, _, val = line[1:].partition(" ")
            values[key] = val.strip()
        elif line.startswith("@") and line[1:] in ("LISTEN", "GPU", "APPS", "LOG", "END"):
            current = line[1:]
            sections[current] = []
        elif current:
            sections[current].append(line)

    if "SYS" in values:
        tck, page, ncpu = values["SYS"].split()
        st.clk_tck, st.page, st.ncpu, st.first = int(tck), int(page), int(ncpu), False
    now = float(values.get("UP", "0") or 0)  # node uptime: a monotonic clock for CPU rates
    procs = []
    seen: dict[int, tuple[float, int]] = {}
    for pid, f in procs_raw:  # fields after "comm)": state ppid ... utime(11) stime(12) ... rss(21)
        if len(f) < 22:
            continue
        ticks = int(f[11]) + int(f[12])
        prev = st.ticks.get(pid)
        cpu = (
            100.0 * (ticks - prev[1]) / st.clk_tck / (now - prev[0])
            if prev and now > prev[0]
            else None
        )
        seen[pid] = (now, ticks)
        procs.append(
            JobProc(
                pid, int(f[1]), f[0], cpu, int(f[21]) * st.page / 2**20, st.cmdlines.get(pid, "")
            )
        )
    st.ticks = seen
    st.cmdlines = {p: c for p, c in st.cmdlines.items() if p in seen}

    pane = values.get("PANE", "").split()
    exit_code = values.get("EXIT")
    job_pids = {p.pid for p in procs}
    if "LISTEN" in sections:
        st.ports = tuple(
            sorted(
                {
                    int(line.split()[3].rsplit(":", 1)[1])
                    for line in sections["LISTEN"]
                    if len(line.split()) > 3 and any(f"pid={p}," in line for p in job_pids)
                }
            )
        )
    st.pane_pid = int(pane[1]) if len(pane) > 1 and pane[1].isdigit() and pane[0] == "0" else None
    reading = None
    if gpus and "NOSMI" not in values and "GPU" in sections:
        reading = gpumod.parse_reading(
            "\n".join(sections["GPU"]), "\n".join(sections.get("APPS", [])), frozenset(job_pids)
        )
    load = values.get("LOAD", "").split()
    logstat = values.get("LOGSTAT", "").split()
    data = b""
    if sections.get("LOG"):
        data = base64.b64decode("".join(sections["LOG"]).strip() or b"")
    size = int(logstat[0]) if logstat else None
    if size is not None and size < st.offset:  # truncated or replaced: start over
        st.offset = 0
    st.offset += len(data)
    # Output age: from the node's clock on the first poll, then from our own observations.
    local = time.time()
    if "NOW" in values and len(logstat) > 1:
        st.changed_at = local - max(0.0, float(values["NOW"]) - int(logstat[1]))
    elif size is not None and size != st.size:
        st.changed_at = local
    st.size = size
    return NodeSnapshot(
        node=rec.node,
        rank=rec.rank,
        at=time.time(),
        reachable=True,
        rtt=rtt,
        session=bool(pane),
        pane_dead=(pane[0] == "1") if pane else None,
        pane_pid=int(pane[1]) if len(pane) > 1 and pane[1].isdigit() else None,
        exit_code=int(exit_code) if exit_code and exit_code.lstrip("-").isdigit() else None,
        procs=tuple(procs),
        ports=st.ports,
        gpu=reading,
        load=(float(load[0]), float(load[1]), float(load[2])) if len(load) >= 3 else None,
        ncpu=st.ncpu,
        mem_total_mib=mem.get("MemTotal"),
        mem_available_mib=mem.get("MemAvailable"),
        log_size=size,
        output_age=(local - st.changed_at) if st.changed_at is not None else None,
        new_output=data,
        node_time=float(values["NOW"]) if "NOW" in values else None,
    )


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
        skip = st.offset < 0  # "from the end": this poll reads no log, only its size
        t0 = time.monotonic()
        try:
            script = poll_script(
                rec,
                1 << 62 if skip else st.offset,
                frozenset(st.cmdlines),
                st.first,
                self.gpus,
                st.pane_pid,
                ports=st.polls % PORTS_EVERY == 0,
                full_scan=st.polls % SCAN_EVERY == 0,
            )
            st.polls += 1
            res = node.run(script, timeout=20)
        except NodeError as exc:
            return NodeSnapshot(rec.node, rec.rank, time.time(), reachable=False, error=exc.message)
        if skip:
            st.offset = 0
        snap = parse_poll(rec, res.stdout, st, time.monotonic() - t0, self.gpus)
        if skip:
            st.offset = max(0, (snap.log_size or 0) - st.keep)
        return snap

    def poll(
        self, on_node: Callable[[NodeSnapshot], object] | None = None
    ) -> dict[str, NodeSnapshot]:
        """Poll every node at once; `on_node` gets each snapshot the moment it arrives."""

        def snapshot(o: Outcome[NodeSnapshot]) -> NodeSnapshot:
            if o.value is not None:
                return o.value
            rec = self.record.node(o.node)
            return NodeSnapshot(rec.node, rec.rank, time.time(), reachable=False, error=o.error)

        results = self.cluster.map(
            self.poll_node,
            [n.node for n in self.record.nodes],
            on_result=(lambda o: on_node(snapshot(o))) if on_node else None,
        )
        return {name: snapshot(o) for name, o in results.items()}


def snapshot_dict(
    s: NodeSnapshot, state: str | None = None, why: str | None = None
) -> dict[str, object]:
    """The JSON form of a snapshot (`mntui status --json`): bytes as text, None as null."""
    from dataclasses import asdict

    d = asdict(s)
    d["new_output"] = s.new_output.decode(errors="replace")
    if state is not None:
        d["state"], d["why"] = state, why
    return d
