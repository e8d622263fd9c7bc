"""Cluster-wide kill: every process the job started, on every node, and nothing else.

Per node, in one round trip: find the job's processes by tag, SIGCONT (a frozen
process cannot act on SIGTERM) + SIGTERM, SIGKILL whatever is left after the grace,
sweep again for anything forked meanwhile, kill the tmux session, then check that
nothing listens on the job's ports. All nodes in parallel; an unreachable node is
reported and never stops the others. A node where nothing of the job was found and
whose ports are free says nothing of its own: the summary names all such nodes once.
Freeing the ports from whatever else holds them is a step of its own (ports.py).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mntui.sessions.config import JobConfig
from mntui.sessions.events import Event, Phase
from mntui.sessions.procs import (
    INT,
    RUNS_DIR,
    SHELL_LIB,
    PortHolder,
    ProcInfo,
    attempt_pattern,
    ints,
    job_node_pattern,
    node_lines,
    parse_listener,
    parse_proc,
    run_dir_word,
    unique_holders,
)
from mntui.sessions.results import GroupResult
from mntui.sessions.ssh import Cluster

from . import tmux
from .ports import free_ports, free_script, holders_script, parse_free, port_holders, still_held

__all__ = [
    "KillReport",
    "free_ports",
    "free_script",
    "holders_script",
    "kill_job",
    "kill_script",
    "not_clean",
    "parse_free",
    "parse_kill",
    "port_holders",
    "ports_free",
    "still_held",
    "summarize",
]

# The kill script's own records; PROC and LISTEN records are procs.py's.
_PIDS = f"((?: {INT})*)"
_SIGKILL = re.compile(f"SIGKILL{_PIDS}", re.ASCII)
_LEFT = re.compile(f"LEFT{_PIDS}", re.ASCII)
_ELAPSED = re.compile(f"ELAPSED_MS ({INT})", re.ASCII)


@dataclass(frozen=True)
class KillReport:
    node: str
    found: tuple[ProcInfo, ...]
    sigkilled: tuple[int, ...]
    left: tuple[int, ...]
    session_killed: bool
    port_holders: tuple[PortHolder, ...]
    seconds: float
    malformed: int = 0  # lines of the node's answer that were no record of ours: skipped
    ports: tuple[int, ...] = ()  # the ports checked free

    @property
    def clean(self) -> bool:
        return not self.left and not self.port_holders

    @property
    def idle(self) -> bool:
        """Nothing of the job was here and its ports are free: nothing to say per node."""
        return not self.found and not self.session_killed and self.clean and not self.malformed

    def summary(self) -> str:
        parts = [
            f"{len(self.found)} process(es) stopped" if self.found else "nothing of the job here"
        ]
        if self.sigkilled:
            parts.append(f"{len(self.sigkilled)} needed SIGKILL")
        if self.session_killed:
            parts.append("session closed")
        if self.left:
            parts.append(f"STILL ALIVE: {' '.join(map(str, self.left))}")
        parts += [h.describe() for h in self.port_holders] or [ports_free(self.ports)]
        if self.malformed:
            parts.append(f"{self.malformed} unreadable line(s) of the node's answer skipped")
        return ", ".join(p for p in parts if p) + f" ({self.seconds:.1f}s)"


def ports_free(ports: Iterable[int]) -> str:
    """What the port check found when nobody holds the ports ("" when none were checked)."""
    listed = ", ".join(map(str, ports))
    return f"port{'s' if ',' in listed else ''} {listed} free" if listed else ""


def kill_script(
    pattern: str, session: str, ports: Iterable[int], grace: float, session_cwd: str | None = None
) -> str:
    """`session_cwd` (a shell word): the tmux session is closed only if it was started
    there, in the run dir of the run being stopped (None: whatever run it holds)."""
    grace_ms = int(grace * 1000)
    ours = (
        tmux.has_session(session) if session_cwd is None else tmux.session_in(session, session_cwd)
    )
    ports_s = " ".join(str(p) for p in ports)
    return f"""{SHELL_LIB}
t0=$(mntui_now_ms)
pat={shlex.quote(pattern)}
pids=$(mntui_scan "$pat")
# shellcheck disable=SC2086 # PIDs, one a word
mntui_procinfo $pids
# shellcheck disable=SC2086 # PIDs, one a word
mntui_stop {grace_ms} $pids
# Sweep for anything forked while we were killing (a launcher restarting workers).
for _ in 1 2 3 4 5; do
  # shellcheck disable=SC2046 # PIDs, one a word
  more=$(mntui_alive $(mntui_scan "$pat"))
  [ -z "$more" ] && break
  # shellcheck disable=SC2086 # PIDs, one a word
  mntui_procinfo $more
  # shellcheck disable=SC2086 # PIDs, one a word
  mntui_stop 0 $more
  sleep 0.05
done
if {ours}; then {tmux.kill_session(session)} && echo SESSION_KILLED; fi
busy() {{
  # shellcheck disable=SC2046 # PIDs, one a word
  left=$(mntui_alive $(mntui_scan "$pat"))
  holders={f"$(mntui_listeners {ports_s})" if ports_s else '""'}
  [ -n "$left" ] || [ -n "$holders" ]
}}
mntui_wait_while 3000 busy
# shellcheck disable=SC2086 # PIDs, one a word
echo LEFT $left
[ -n "$holders" ] && printf '%s\\n' "$holders"
echo "ELAPSED_MS $(($(mntui_now_ms) - t0))"
"""


def parse_kill(node: str, stdout: str, ports: Iterable[int] = ()) -> KillReport:
    found: dict[int, ProcInfo] = {}
    sigkilled: list[int] = []
    left: tuple[int, ...] = ()
    holders: list[PortHolder] = []
    session = False
    ms, bad = 0, 0
    for line in node_lines(stdout):
        if (proc := parse_proc(line)) is not None:
            found.setdefault(proc.pid, proc)  # a sweep lists it again as it dies: keep the first
        elif (holder := parse_listener(line)) is not None:
            holders.append(holder)
        elif m := _SIGKILL.fullmatch(line):
            sigkilled += ints(m[1])
        elif m := _LEFT.fullmatch(line):
            left = ints(m[1])
        elif m := _ELAPSED.fullmatch(line):
            ms = int(m[1])
        elif line == "SESSION_KILLED":
            session = True
        else:
            bad += 1
    return KillReport(
        node,
        tuple(found.values()),
        tuple(dict.fromkeys(sigkilled)),
        left,
        session,
        unique_holders(holders),
        ms / 1000,
        malformed=bad,
        ports=tuple(ports),
    )


def not_clean(results: GroupResult[KillReport]) -> list[str]:
    """Nodes where the kill failed or left something behind, in node order."""
    dirty = set(results.failed) | set(results.where(lambda r: not r.clean))
    return [n for n in results if n in dirty]


def summarize(job: str, results: GroupResult[KillReport]) -> tuple[bool, str]:
    """(clean on every node, one line for a person): the CLI and the app say the same.
    The nodes that had nothing of the job (and no event of their own) are named here."""
    dirty = not_clean(results)
    idle = ", ".join(results.where(lambda r: r.idle))
    if dirty:
        return False, f"NOT CLEAN on {', '.join(dirty)}" + (
            f"; nothing of {job} runs on {idle}" if idle else ""
        )
    total = sum(len(r.found) for r in results.succeeded.values())
    if not total:
        ports = sorted({p for r in results.succeeded.values() for p in r.ports})
        free = f"; {ports_free(ports)} on {'each' if len(results) > 1 else 'it'}" if ports else ""
        return True, f"nothing to kill: nothing of {job} runs on {', '.join(results)}{free}"
    return True, f"clean: {total} process(es) of {job} stopped on {len(results)} node(s)"


def kill_job(
    cfg: JobConfig,
    cluster: Cluster,
    *,
    names: Iterable[str] | None = None,
    grace: float | None = None,
    on_event: Callable[[Event], None] = lambda e: None,
    only: tuple[str, str] | None = None,
) -> GroupResult[KillReport]:
    """Kill the job on the given nodes (all by default), in parallel; one report per node.
    `only` = (run, the run its watchers are tagged with): that attempt alone, its
    processes and its tmux session (procs.attempt_pattern), never another run's."""
    grace = cfg.grace if grace is None else grace
    ranks = {n.name: n.rank for n in cfg.nodes}

    def one(node) -> KillReport:  # type: ignore[no-untyped-def]
        on_event(Event(node.name, ranks[node.name], Phase.KILLING, ""))
        pattern, cwd = job_node_pattern(cfg.job, node.name), None
        if only is not None:
            pattern = attempt_pattern(cfg.job, only[0], only[1], node.name)
            cwd = run_dir_word(f"{RUNS_DIR}/{cfg.job}/{only[0]}/{node.name}")
        script = kill_script(
            pattern, tmux.session_name(cfg.job, node.name), cfg.all_ports, grace, cwd
        )
        res = node.run(script, timeout=grace + 30)
        report = parse_kill(node.name, res.stdout, cfg.all_ports)
        if report.idle:
            return report  # the summary says it, once for all such nodes
        on_event(
            Event(
                node.name,
                ranks[node.name],
                Phase.KILLED if report.clean else Phase.FAILED,
                report.summary(),
            )
        )
        return report

    results = cluster.map(one, names)
    for name, error in results.errors.items():
        on_event(Event(name, ranks[name], Phase.FAILED, error))
    return results
