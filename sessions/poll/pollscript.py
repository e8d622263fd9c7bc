"""The node's half of a poll: the script it runs, and the strict reader of its answer.

The poll script runs on the node's persistent shell and uses shell builtins where it
can (`read` of /proc files): on a 64-node job every process spawned per poll is paid
64 times a second. It prints one record a line; `parse_answer` reads them into a typed
PollAnswer (strictly: what a node's processes chose, their command lines and the text
of nvidia-smi and of the log, arrives base64-encoded, and a line of any other shape is
skipped and counted). Script and parser live together because each record's shape is
promised by the one and checked by the other.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mntui.sessions.launch import (
    PaneStatus,
    format_pane_status,
    no_pane,
    pane_status,
    parse_pane_status,
)
from mntui.sessions.procs import (
    B64,
    INT,
    SHELL_LIB,
    b64_bytes,
    b64_text,
    node_lines,
    run_dir_word,
    run_pattern,
)
from mntui.sessions.runs import NodeRecord

from . import gpu as gpumod

LOG_CHUNK = 64 * 1024  # bytes of output.log one poll carries at most
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
TREE = """mntui_poll_tree() {
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
    ask_tmux = f"printf '@PANE %s\\n' \"$({pane_status(rec.session)})\""
    if not pane_pid:
        return ask_tmux
    alive = format_pane_status(PaneStatus(False, pane_pid, None))
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
{TREE}
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
        "@PANE": " (.*)",  # parse_pane_status reads it
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
    pane: PaneStatus | None = None  # None: no session
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
        out["pane"] = parse_pane_status(g[0])
        return out["pane"] is not None or no_pane(g[0])
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
