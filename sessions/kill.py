"""Cluster-wide kill: every process the job started, on every node, and nothing else.

Per node, in one round trip: find the job's processes by tag, SIGCONT (a frozen
process cannot act on SIGTERM) + SIGTERM, SIGKILL whatever is left after the grace,
sweep again for anything forked meanwhile, kill the tmux session, then check that
nothing listens on the job's ports. All nodes in parallel; an unreachable node is
reported and never stops the others.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from . import tmux
from .config import JobConfig
from .events import Event, Phase
from .procs import SHELL_LIB, PortHolder, ProcInfo, job_node_pattern, parse_listeners, parse_procs
from .remote import Cluster, GroupResult

q = shlex.quote


@dataclass(frozen=True)
class KillReport:
    node: str
    found: tuple[ProcInfo, ...]
    sigkilled: tuple[int, ...]
    left: tuple[int, ...]
    session_killed: bool
    port_holders: tuple[PortHolder, ...]
    seconds: float

    @property
    def clean(self) -> bool:
        return not self.left and not self.port_holders

    def summary(self) -> str:
        if not self.found and not self.session_killed and self.clean:
            return "nothing to kill"
        parts = [f"{len(self.found)} process(es) stopped"]
        if self.sigkilled:
            parts.append(f"{len(self.sigkilled)} needed SIGKILL")
        if self.session_killed:
            parts.append("session closed")
        if self.left:
            parts.append(f"STILL ALIVE: {' '.join(map(str, self.left))}")
        parts += [h.describe() for h in self.port_holders]
        return ", ".join(parts) + f" ({self.seconds:.1f}s)"


def kill_script(pattern: str, session: str, ports: Iterable[int], grace: float) -> str:
    grace_ms = int(grace * 1000)
    ports_s = " ".join(str(p) for p in ports)
    return f"""{SHELL_LIB}
t0=$(mntui_now_ms)
pat={q(pattern)}
pids=$(mntui_scan "$pat" | tr '\\n' ' ')
mntui_procinfo $pids
if [ -n "$pids" ]; then
  kill -CONT $pids 2>/dev/null
  kill -TERM $pids 2>/dev/null
  end=$(( $(mntui_now_ms) + {grace_ms} ))
  while [ -n "$(mntui_alive $pids)" ] && [ "$(mntui_now_ms)" -lt "$end" ]; do sleep 0.05; done
  left=$(mntui_alive $pids | tr '\\n' ' ')
  if [ -n "$left" ]; then kill -KILL $left 2>/dev/null; echo "SIGKILL $left"; fi
fi
# Sweep for anything forked while we were killing (a launcher restarting workers).
for _round in 1 2 3 4 5; do
  more=$(mntui_scan "$pat" | tr '\\n' ' ')
  more=$(mntui_alive $more | tr '\\n' ' ')
  [ -z "$more" ] && break
  mntui_procinfo $more
  kill -CONT $more 2>/dev/null; kill -KILL $more 2>/dev/null; echo "SIGKILL $more"
  sleep 0.05
done
if {tmux.has_session(session)}; then {tmux.kill_session(session)} && echo SESSION_KILLED; fi
end=$(( $(mntui_now_ms) + 3000 ))
while :; do
  left=$(mntui_alive $(mntui_scan "$pat") | tr '\\n' ' ')
  holders=$(mntui_listeners {ports_s})
  [ -z "$left" ] && [ -z "$holders" ] && break
  [ "$(mntui_now_ms)" -ge "$end" ] && break
  sleep 0.05
done
echo "LEFT $left"
[ -n "$holders" ] && printf '%s\\n' "$holders"
echo "ELAPSED_MS $(( $(mntui_now_ms) - t0 ))"
"""


def parse_kill(node: str, stdout: str) -> KillReport:
    lines = stdout.splitlines()
    sigkilled: list[int] = []
    left: tuple[int, ...] = ()
    ms = 0
    for line in lines:
        word, _, rest = line.partition(" ")
        if word == "SIGKILL":
            sigkilled += [int(p) for p in rest.split() if p.isdigit()]
        elif word == "LEFT":
            left = tuple(int(p) for p in rest.split() if p.isdigit())
        elif word == "ELAPSED_MS" and rest.strip().isdigit():
            ms = int(rest)
    found = {p.pid: p for p in parse_procs(lines)}  # a sweep may list a PID twice
    return KillReport(
        node,
        tuple(found.values()),
        tuple(dict.fromkeys(sigkilled)),
        left,
        "SESSION_KILLED" in lines,
        parse_listeners(lines),
        ms / 1000,
    )


def not_clean(results: GroupResult[KillReport]) -> list[str]:
    """Nodes where the kill failed or left something behind, in node order."""
    dirty = set(results.failed) | set(results.where(lambda r: not r.clean))
    return [n for n in results if n in dirty]


def summarize(job: str, results: GroupResult[KillReport]) -> tuple[bool, str]:
    """(clean on every node, one line for a person): the CLI and the app say the same."""
    dirty = not_clean(results)
    if dirty:
        return False, f"NOT CLEAN on {', '.join(dirty)}"
    total = sum(len(r.found) for r in results.succeeded.values())
    if not total:
        return True, "nothing to kill: the job is not running"
    return True, f"clean: {total} process(es) of {job} stopped on {len(results)} node(s)"


def kill_job(
    cfg: JobConfig,
    cluster: Cluster,
    *,
    names: Iterable[str] | None = None,
    grace: float | None = None,
    on_event: Callable[[Event], None] = lambda e: None,
) -> GroupResult[KillReport]:
    """Kill the job on the given nodes (all by default), in parallel; one report per node."""
    grace = cfg.grace if grace is None else grace
    ranks = {n.name: n.rank for n in cfg.nodes}

    def one(node) -> KillReport:  # type: ignore[no-untyped-def]
        on_event(Event(node.name, ranks[node.name], Phase.KILLING, ""))
        script = kill_script(
            job_node_pattern(cfg.job, node.name),
            tmux.session_name(cfg.job, node.name),
            cfg.all_ports,
            grace,
        )
        res = node.run(script, timeout=grace + 30)
        report = parse_kill(node.name, res.stdout)
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


# -- cleanup: free the job's ports, whoever holds them ------------------------------


def holders_script(ports: Iterable[int]) -> str:
    return f"{SHELL_LIB}\nmntui_listeners {' '.join(str(p) for p in ports)}\n"


def port_holders(cfg: JobConfig, cluster: Cluster) -> GroupResult[tuple[PortHolder, ...]]:
    script = holders_script(cfg.all_ports)
    return cluster.map(lambda node: parse_listeners(node.run(script).stdout.splitlines()))


def free_script(holders: Iterable[PortHolder], grace: float) -> str:
    """Kill the listed holders, but only those still ours and still on that port:
    between listing and confirming, a PID may have exited and been reused."""
    grace_ms = int(grace * 1000)
    holders = [h for h in holders if h.pid is not None]
    ports = " ".join(sorted({str(h.port) for h in holders}))
    checks = "\n".join(
        f"[ -O /proc/{h.pid} ] && mntui_listeners {h.port} | grep -q '^LISTEN {h.port} {h.pid} ' "
        f'&& pids="$pids {h.pid}"'
        for h in holders
    )
    return f"""{SHELL_LIB}
pids=""
{checks}
echo "FREEING $pids"
if [ -n "$pids" ]; then
  kill -CONT $pids 2>/dev/null; kill -TERM $pids 2>/dev/null
  end=$(( $(mntui_now_ms) + {grace_ms} ))
  while [ -n "$(mntui_alive $pids)" ] && [ "$(mntui_now_ms)" -lt "$end" ]; do sleep 0.05; done
  left=$(mntui_alive $pids); [ -n "$left" ] && kill -KILL $left 2>/dev/null
  end=$(( $(mntui_now_ms) + 2000 ))
  while [ -n "$(mntui_listeners {ports})" ] && [ "$(mntui_now_ms)" -lt "$end" ]; do sleep 0.05; done
fi
mntui_listeners {ports}
"""


def free_ports(
    cluster: Cluster, holders: dict[str, tuple[PortHolder, ...]], grace: float
) -> GroupResult[tuple[tuple[int, ...], tuple[PortHolder, ...]]]:
    """Per node: (PIDs killed, holders still there). One round trip per node."""

    def one(node) -> tuple[tuple[int, ...], tuple[PortHolder, ...]]:  # type: ignore[no-untyped-def]
        res = node.run(free_script(holders[node.name], grace), timeout=grace + 30)
        lines = res.stdout.splitlines()
        freeing: list[str] = next(
            (line.split()[1:] for line in lines if line.startswith("FREEING")), []
        )
        return tuple(int(p) for p in freeing), parse_listeners(lines)

    return cluster.map(one, [n for n, h in holders.items() if any(x.pid is not None for x in h)])


def stop_job(
    cfg: JobConfig,
    cluster: Cluster,
    *,
    names: Iterable[str] | None = None,
    grace: float | None = None,
    on_event: Callable[[Event], None] = lambda e: None,
) -> GroupResult[KillReport]:
    """A user's kill (CLI `kill`, the app's K): mark the run first, so its watchdog stands
    down instead of reporting the kill as a failure, then kill."""
    from .runs import RunRecord, RunStatus, live_runs

    def killing(r: RunRecord) -> None:
        if r.status.is_live:
            r.status = RunStatus.KILLING
            r.note("kill", by="user")

    def killed(r: RunRecord) -> None:
        if r.status.is_stopping:
            r.status = RunStatus.KILLED

    marked = live_runs(cfg.job) if names is None else []
    for record in marked:  # the latest, and a restart chain waiting in its backoff
        record.update(killing)
    results = kill_job(cfg, cluster, names=names, grace=grace, on_event=on_event)
    for record in marked:
        record.update(killed)
    return results
