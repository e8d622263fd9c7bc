"""Cluster-wide kill: every process the job started, on every node, and nothing else.

Per node, in one round trip: the node package's `kill` verb (sessions/node/proc/killer.py,
the one kill on a node: the sentinels and the coordinator run it too), shipped as the
sentinel's zipapp (~/.mntui/sentinel/<sha>.pyz; a node without this version gets it in
a second round trip) and run by the rule of what is the job's (node/proc/proctree.py: its
tag, the pane's and the members' descendants, the members a sentinel saw, the run's
cgroup): SIGCONT + SIGTERM, SIGKILL whatever is left after the grace, again for
anything forked meanwhile, close the tmux session, then check that nothing of the job
is left and nothing listens on its ports. All nodes in parallel; an unreachable node
is reported and never stops the others. A node where nothing of the job was found and
whose ports are free says nothing of its own: the summary names all such nodes once.
Freeing the ports from whatever else holds them is a step of its own (ports.py).

The interpreter: the node's `python3` if it is 3.9 or later (the bundle's own first
lines refuse an older one, exit 3), else a `python3.N` on its PATH, else a python3 this
user runs now, the job's own (a conda env a `setup` activates, on a node whose bare
python3 is 3.6: `launch --no-watch` starts such a run, and it must be killable). A node
where none runs says so, not clean: the kill never pretends.
"""

from __future__ import annotations

import glob
import json
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from mntui.sessions.config import JobConfig
from mntui.sessions.events import Event, Phase
from mntui.sessions.node.proc.killer import RESULT
from mntui.sessions.node.proc.members import run_dir
from mntui.sessions.procs import (
    RUNS_DIR,
    PortHolder,
    ProcInfo,
    b64_text,
    kill_tags,
    node_lines,
    unique_holders,
)
from mntui.sessions.results import GroupResult, NodeError
from mntui.sessions.ssh import Cluster, Node
from mntui.sessions.ssh.nodeshell import Result
from mntui.sessions.termsafe import one_line

from . import tmux
from .ports import free_ports, free_script, holders_script, parse_free, port_holders, still_held
from .sentinelship import SHIP_LINE, Bundle, bundle, remote_path, ship_script

__all__ = [
    "KillReport",
    "free_ports",
    "free_script",
    "holders_script",
    "kill_job",
    "kill_script",
    "kill_spec",
    "not_clean",
    "parse_free",
    "parse_kill",
    "port_holders",
    "ports_free",
    "report_of",
    "still_held",
    "summarize",
]

REPORT_MAX = 4 << 20  # bytes of a node's kill report read (a line per process found)
SHIP_SLACK = 60.0  # seconds more for a kill that ships the bundle first
NO_BUNDLE = "KILL_NO_BUNDLE"
NO_PYTHON = "KILL_NO_PYTHON"
_NO_PYTHON = re.compile(f"{NO_PYTHON} ([A-Za-z0-9+/]*={{0,2}}) ([A-Za-z0-9+/]*={{0,2}})")
# the candidates after the node's `python3`, newest first
PYTHONS = ("python3.14", "python3.13", "python3.12", "python3.11", "python3.10", "python3.9")


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
    # what the final sweep from here found after the node's sentinel reported it clean
    # (userkill.py): its report was wrong, and these were left running
    missed: tuple[ProcInfo, ...] = ()
    watchers: tuple[int, ...] = ()  # of `found`, the run's watchers (found by their tag)

    @property
    def jobs(self) -> tuple[ProcInfo, ...]:
        """What was found of the job itself, its watchers left out."""
        return tuple(p for p in self.found if p.pid not in self.watchers)

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
        if self.missed:
            pids = " ".join(str(p.pid) for p in self.missed[:8])
            parts.append(
                f"its sentinel reported it clean, yet {len(self.missed)} process(es) of the "
                f"job were left ({pids}): stopped by the sweep from here"
            )
        return ", ".join(p for p in parts if p) + f" ({self.seconds:.1f}s)"

    def swept(self, sweep: KillReport) -> KillReport:
        """This report (a sentinel's) after the final sweep from here found `sweep.found`."""
        return replace(
            self,
            found=self.found + sweep.found,
            sigkilled=tuple(dict.fromkeys(self.sigkilled + sweep.sigkilled)),
            left=sweep.left,
            session_killed=self.session_killed or sweep.session_killed,
            port_holders=sweep.port_holders,
            seconds=self.seconds + sweep.seconds,
            ports=sweep.ports,
            missed=sweep.jobs,
            watchers=self.watchers + sweep.watchers,
        )


def ports_free(ports: Iterable[int]) -> str:
    """What the port check found when nobody holds the ports ("" when none were checked)."""
    listed = ", ".join(map(str, ports))
    return f"port{'s' if ',' in listed else ''} {listed} free" if listed else ""


def kill_spec(
    job: str, node: str, ports: Iterable[int], grace: float, only: tuple[str, str] | None = None
) -> dict[str, Any]:
    """The node kill's spec (killer.main): any run of the job on `node` and its
    watchers, or with `only` = (run, the run its watchers are tagged with) that attempt
    alone, its processes and its tmux session, never another run's."""
    runs = f"{RUNS_DIR}/{glob.escape(job)}/*/{glob.escape(node)}"
    session_dir = None
    if only is not None:
        runs = run_dir(job, only[0], node)
        session_dir = f"{RUNS_DIR}/{job}/{only[0]}/{node}"
    procs, watchers = kill_tags(job, node, only)
    return {
        "job": procs,
        "watchers": watchers,
        "session": tmux.session_name(job, node),
        "session_dir": session_dir,
        "ports": list(ports),
        "runs": [runs],
        "grace": grace,
    }


def kill_script(spec: dict[str, Any], b: Bundle, *, ship: bool = False) -> str:
    """The node's kill: the bundle's `kill` verb with `spec`, on the first interpreter
    that runs it (see the module's doc); with `ship`, the bundle is written first.
    Prints the verb's one result line, or why it could not run."""
    pythons = " ".join(PYTHONS)
    return f"""{ship_script(b) if ship else ""}
f="$HOME/{remote_path(b.sha)}"
if [ ! -f "$f" ]; then echo {NO_BUNDLE}; exit 0; fi
spec={shlex.quote(json.dumps(spec, separators=(",", ":")))}
tried='' last=''
mntui_try() {{
  case " $tried " in *" $1 "*) return 1 ;; esac
  tried="$tried $1"
  command -v "$1" >/dev/null 2>&1 || return 1
  out=$("$1" -I -S "$f" kill "$spec" 2>&1)
  case $out in *{RESULT}*) printf '%s\n' "$out" | grep '^{RESULT} '; return 0 ;; esac
  last=$out
  return 1
}}
for py in python3 {pythons}; do mntui_try "$py" && exit 0; done
for e in /proc/[0-9]*/exe; do
  # only a python this user runs already: never another user's binary run as this one
  # shellcheck disable=SC3067 # dash's, bash's and busybox's test all have -O
  [ -O "${{e%/exe}}" ] || continue
  x=$(readlink "$e" 2>/dev/null) || continue
  case ${{x##*/}} in python3 | python3.[0-9]*) mntui_try "$x" && exit 0 ;; esac
done
tried=$(printf '%s' "$tried" | base64 -w0)
echo "{NO_PYTHON} $tried $(printf '%s' "$last" | tail -c 300 | base64 -w0)"
"""


def parse_kill(node: str, stdout: str, ports: Iterable[int] = ()) -> KillReport:
    """The node's answer: its one result line, strictly; NodeError when the kill could
    not run there (no interpreter) or gave no readable result (never taken for clean)."""
    result: list[str] = []
    bad = 0
    for line in node_lines(stdout):
        if line.startswith(f"{RESULT} "):
            result.append(line[len(RESULT) + 1 :])
        elif m := _NO_PYTHON.fullmatch(line):
            raise NodeError(node, _no_python(m[1], m[2]))
        elif not SHIP_LINE.fullmatch(line):
            bad += 1
    if len(result) != 1 or len(result[0]) > REPORT_MAX:
        raise NodeError(node, f"the kill gave {len(result)} result(s) of its own: "
                        f"{one_line(stdout[-200:])}")  # fmt: skip
    try:
        report = report_of(node, json.loads(result[0]), ports)
    except ValueError:
        report = None
    if report is None:
        raise NodeError(node, "the kill's result does not read")
    return replace(report, malformed=bad)


def _no_python(tried64: str, said64: str) -> str:
    tried, said = (b64_text(x) or "" for x in (tried64, said64))
    return (
        f"the kill needs a python3 3.9 or later on the node, and none runs there "
        f"(tried:{tried or ' none'}; {said[-120:]})"
    )


def report_of(node: str, d: object, ports: Iterable[int] = ()) -> KillReport | None:
    """A node kill's result (killer.KillResult.as_dict: the `kill` verb's, a sentinel's
    answer to its coordinator) as a KillReport, or None when it is not of that shape.
    What a process chose (its command line) is made one safe line."""
    if not isinstance(d, dict):
        return None
    found, holders = d.get("found"), d.get("holders", [])
    nums = [d.get(k) for k in ("sigkilled", "left", "port_holders")] + [d.get("watchers", [])]
    secs = d.get("seconds")
    ok = (
        isinstance(found, list)
        and all(_is_found(f) for f in found)
        and all(isinstance(v, list) and all(_int(x) for x in v) for v in nums)
        and isinstance(d.get("session_killed"), bool)
        and isinstance(secs, (int, float))
        and isinstance(holders, list)
    )
    if not ok:
        return None
    assert isinstance(found, list) and isinstance(holders, list) and isinstance(secs, (int, float))
    sigkilled, left, held, watchers = (tuple(v) for v in nums)  # type: ignore[arg-type]
    said = [h for h in map(_holder, holders) if h is not None]
    said += [PortHolder(p, None, None, "") for p in held if all(h.port != p for h in said)]
    return KillReport(
        node,
        tuple(ProcInfo(f[0], one_line(f[1])[:1] or "?", one_line(f[2])[:300]) for f in found),
        tuple(dict.fromkeys(sigkilled)),
        left,
        d["session_killed"],
        unique_holders(said),
        float(secs),
        ports=tuple(ports),
        watchers=watchers,
    )


def _int(x: object) -> bool:
    return type(x) is int and 0 <= x < 1 << 32


def _is_found(f: object) -> bool:
    return (
        isinstance(f, list) and len(f) == 3 and _int(f[0])
        and isinstance(f[1], str) and isinstance(f[2], str)
    )  # fmt: skip


def _holder(h: object) -> PortHolder | None:
    if not (isinstance(h, list) and len(h) == 5 and _int(h[0])):
        return None
    port, pid, uid, user, cmd = h
    if not (pid is None or _int(pid)) or not (uid is None or _int(uid)):
        return None
    if not isinstance(user, str) or not isinstance(cmd, str):
        return None
    return PortHolder(port, pid, one_line(user)[:64] or None, one_line(cmd)[:300], uid)


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


def _over(once: Node, script: str, timeout: float) -> Result | None:
    """`script` over a connection started for it; None when that did not answer (the
    node's own connection is tried then: a kill is safe to repeat)."""
    try:
        res = once.run(script, timeout=timeout)
    except NodeError:
        return None
    finally:
        once.close()
    return res if res.ok else None


def kill_job(
    cfg: JobConfig,
    cluster: Cluster,
    *,
    names: Iterable[str] | None = None,
    grace: float | None = None,
    on_event: Callable[[Event], None] = lambda e: None,
    only: tuple[str, str] | None = None,
    first: Mapping[str, Node] | None = None,
) -> GroupResult[KillReport]:
    """Kill the job on the given nodes (all by default), in parallel; one report per node.
    `only` = (run, the run its watchers are tagged with): that attempt alone, its
    processes and its tmux session, never another run's. `first`: a connection already
    started for a node (ssh/early.py), tried before the node's own."""
    grace = cfg.grace if grace is None else grace
    ranks = {n.name: n.rank for n in cfg.nodes}
    b = bundle()

    def one(node) -> KillReport:  # type: ignore[no-untyped-def]
        on_event(Event(node.name, ranks[node.name], Phase.KILLING, ""))
        spec = kill_spec(cfg.job, node.name, cfg.all_ports, grace, only)
        script, once = kill_script(spec, b), (first or {}).get(node.name)
        res = _over(once, script, grace + 30 + cfg.ssh.connect_timeout) if once else None
        res = res or node.run(script, timeout=grace + 30)
        if NO_BUNDLE in res.stdout:  # this version's bundle is not there yet
            script = kill_script(spec, b, ship=True)
            res = node.run(script, timeout=grace + 30 + SHIP_SLACK)
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
