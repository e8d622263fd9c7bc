"""Finding a job's processes by the tag in their environment.

torchrun puts every worker in its own session and process group, so tmux
kill-session, `kill -- -PGID` and `fuser -k` all miss workers in some states (orphaned
after torchrun died, node frozen), and killing by name kills other people's jobs. The
environment a process was started with is inherited by everything it starts and is
readable in /proc/PID/environ: that is what we match, exactly, and only for the
user's own processes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TAG_VAR = "MNTUI_RUN"


def run_tag(job: str, run_id: str, node: str) -> str:
    return f"{job}/{run_id}/{node}"


def job_node_pattern(job: str, node: str) -> str:
    """Any run of this job on this node: a leftover from last night's run is ours too."""
    return f"{TAG_VAR}={re.escape(job)}/[^/]+/{re.escape(node)}"


def run_pattern(tag: str) -> str:
    return f"{TAG_VAR}={re.escape(tag)}"


# Shell functions shared by every script that looks for a job's processes. They use
# `read` builtins, not `cat`: on a 64-node kill every spawned process counts.
# mntui_scan PATTERN  -> one PID a line: the user's processes whose environment holds a
#                        NUL-separated entry matching PATTERN (grep -E, whole entry),
#                        never this script or its ancestors.
# mntui_alive PIDS    -> those PIDs that still exist and are not zombies.
# mntui_now_ms        -> monotonic-enough wall time in milliseconds.
# The stat line is cut with `${s#*) }` (shortest match): comm is at most 15 characters,
# and dash's longest match (`##`) is quadratic in the line, 1 ms a process.
SHELL_LIB = r"""
mntui_self=" "
_p=$$
while [ "${_p:-0}" -gt 1 ] 2>/dev/null; do
  mntui_self="$mntui_self$_p "
  read -r _s </proc/$_p/stat 2>/dev/null || break
  _s=${_s#*) }
  set -- $_s
  _p=$2
done
mntui_scan() {
  grep -lzxE -- "$1" /proc/[0-9]*/environ 2>/dev/null | while IFS= read -r _f; do
    _p=${_f#/proc/}; _p=${_p%/environ}
    [ -O "/proc/$_p" ] || continue
    case "$mntui_self" in *" $_p "*) continue ;; esac
    echo "$_p"
  done
}
mntui_tree() {
  # PIDs of the given processes and all their descendants, by /proc/*/task/*/children:
  # builtins only, no process spawned. A job's processes all descend from its pane.
  _seen=" "; _todo="$*"
  while [ -n "$_todo" ]; do
    _next=""
    for _p in $_todo; do
      case "$_seen" in *" $_p "*) continue ;; esac
      [ -d "/proc/$_p" ] || continue
      _seen="$_seen$_p "
      for _c in /proc/$_p/task/*/children; do
        read -r _k <"$_c" 2>/dev/null && _next="$_next $_k"
      done
    done
    _todo=$_next
  done
  for _p in $_seen; do echo "$_p"; done
}
mntui_alive() {
  for _p in "$@"; do
    read -r _s </proc/$_p/stat 2>/dev/null || continue
    _s=${_s#*) }
    case "$_s" in Z*|X*) continue ;; esac
    echo "$_p"
  done
}
mntui_now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
mntui_procinfo() {
  for _p in "$@"; do
    read -r _s </proc/$_p/stat 2>/dev/null || continue
    _c=$(tr '\0' ' ' </proc/$_p/cmdline 2>/dev/null | cut -c1-300)
    _s=${_s#*) }
    echo "PROC $_p ${_s%% *} $_c"
  done
}
mntui_listeners() {
  # PORT PID USER COMMAND for each listener on the given ports.
  for _port in "$@"; do
    ss -Hltnp "sport = :$_port" 2>/dev/null | while IFS= read -r _l; do
      _pid=$(printf '%s' "$_l" | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n 1)
      if [ -n "$_pid" ]; then
        _u=$(stat -c %U /proc/$_pid 2>/dev/null || echo '?')
        _c=$(tr '\0' ' ' </proc/$_pid/cmdline 2>/dev/null | cut -c1-300)
        echo "LISTEN $_port $_pid $_u $_c"
      else
        echo "LISTEN $_port - ? (owned by another user)"
      fi
    done
  done
}
"""


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    state: str
    cmdline: str


@dataclass(frozen=True)
class PortHolder:
    port: int
    pid: int | None
    user: str | None
    cmdline: str

    def describe(self) -> str:
        who = (
            f"pid {self.pid} ({self.user})" if self.pid is not None else "a process of another user"
        )
        return f"port {self.port} held by {who}: {self.cmdline or '?'}"


def parse_procs(lines: list[str]) -> tuple[ProcInfo, ...]:
    out = []
    for line in lines:
        parts = line.split(" ", 3)
        if len(parts) >= 3 and parts[0] == "PROC" and parts[1].isdigit():
            out.append(
                ProcInfo(int(parts[1]), parts[2], parts[3].strip() if len(parts) > 3 else "")
            )
    return tuple(out)


def parse_listeners(lines: list[str]) -> tuple[PortHolder, ...]:
    out = []
    seen = set()
    for line in lines:
        parts = line.split(" ", 4)
        if len(parts) < 4 or parts[0] != "LISTEN" or not parts[1].isdigit():
            continue
        pid = int(parts[2]) if parts[2].isdigit() else None
        key = (int(parts[1]), pid)
        if key in seen:  # one process listening on v4 and v6 shows twice
            continue
        seen.add(key)
        user = None if parts[3] == "?" else parts[3]
        out.append(PortHolder(int(parts[1]), pid, user, parts[4].strip() if len(parts) > 4 else ""))
    return tuple(out)
