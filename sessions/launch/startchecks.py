"""What a launch asks the nodes around a start: the preflight, and the main's readiness.

Both are one round trip of shell on a node, built here next to what reads the answer.
The preflight finds what would make a start fail or collide (an earlier run of this
job, a process holding a port, a missing tool) before anything starts; the readiness
check replaces the seed scripts' `sleep 10`: the workers start once the main's port
listens or its log says so, and a main that died is said at once, with its last lines.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass

from mntui.sessions.config import JobConfig, ReadyMode
from mntui.sessions.errors import LaunchError
from mntui.sessions.events import Event, Phase
from mntui.sessions.procs import (
    SHELL_LIB,
    PortHolder,
    ProcInfo,
    job_node_pattern,
    parse_listeners,
    parse_procs,
    run_dir_word,
)
from mntui.sessions.results import GroupResult
from mntui.sessions.ssh import Cluster, Node

from . import logs, tmux
from .nodeplan import NodePlan, job_environment
from .sentinelship import (
    parse_python,
    parse_sentinel_python,
    python_check_script,
    sentinel_python_check,
)

READY_POLL = 0.1  # seconds between readiness checks on the main (one round trip each)


@dataclass(frozen=True)
class Preflight:
    node: str
    procs: tuple[ProcInfo, ...]  # processes of an earlier run of this job on this node
    port_holders: tuple[PortHolder, ...]
    missing_tools: tuple[str, ...]
    # asked only when the cluster is to watch: the bare python3's version, and the
    # interpreter a sentinel runs on (sentinelship.sentinel_python: `python3`, the
    # absolute path of the one `setup` provides, or None: none fits)
    sentinel_python: tuple[int, int] | None = None
    sentinel_runs_on: str | None = None


def preflight_script(cfg: JobConfig, node: str, check_ports: bool) -> str:
    ports = " ".join(str(p) for p in cfg.all_ports) if check_ports else ""
    python = ""
    if cfg.watch_port is not None:  # the watch block asks the same, before it starts
        enter = job_environment(cfg.node(node), "exit 97")
        python = f"{python_check_script()}\n{sentinel_python_check(enter)}"
    return f"""{SHELL_LIB}
# shellcheck disable=SC2046 # PIDs, one a word
mntui_procinfo $(mntui_scan {shlex.quote(job_node_pattern(cfg.job, node))})
for t in tmux bash ss grep sed base64; do command -v "$t" >/dev/null 2>&1 || echo "MISSING $t"; done
{f"mntui_listeners {ports}" if ports else ""}
{python}
"""


def preflight(cfg: JobConfig, cluster: Cluster) -> GroupResult[Preflight]:
    watched = cfg.watch_port is not None

    def one(node: Node) -> Preflight:
        text = node.run(preflight_script(cfg, node.name, node.name == cfg.main)).stdout
        out = text.splitlines()
        return Preflight(
            node.name,
            parse_procs(out),
            parse_listeners(out),
            tuple(line.split()[1] for line in out if line.startswith("MISSING ")),
            parse_python(text) if watched else None,
            parse_sentinel_python(text) if watched else None,
        )

    # the job's own nodes: a doctor's pair runs on two of the cluster it was given
    return cluster.map(one, [n.name for n in cfg.nodes])


def ready_script(cfg: JobConfig, np: NodePlan) -> str:
    if cfg.launch.ready is ReadyMode.PORT:
        test = f"ss -Hltn {shlex.quote(f'sport = :{cfg.master_port}')} | grep -q ."
    elif cfg.launch.ready is ReadyMode.LOG:
        test = f'grep -qE -- {shlex.quote(cfg.launch.ready_pattern or "")} "$d/output.log"'
    else:
        test = "false"
    # The pane's state is read before the exit-code file: a pane already dead has written
    # its code, so a main that exits between the two reads is never "dead without a code".
    # The code is the job's file: anything but a number is said as "?". No pane: tmux
    # prints nothing, or (3.3, other sessions on the server) its fields empty.
    return f"""d={run_dir_word(np.run_dir)}
pane=$({tmux.pane_status(np.session)})
if [ -f "$d/exit_code" ]; then
  read -r rc <"$d/exit_code"
  case ${{rc#-}} in '' | *[!0-9]*) rc='?' ;; esac
  echo "EXITED $rc"
elif [ -z "${{pane%% *}}" ]; then echo GONE
elif [ "${{pane%% *}}" = 1 ]; then echo DEAD
elif {test}; then echo READY
else echo WAIT; fi
"""


def wait_ready(
    cfg: JobConfig, node: Node, np: NodePlan, on_event: Callable[[Event], None]
) -> float:
    policy = cfg.launch
    t0 = time.monotonic()
    deadline = t0 + policy.ready_timeout
    what = {
        ReadyMode.PORT: f"port {cfg.master_port} to listen",
        ReadyMode.LOG: f"output matching {policy.ready_pattern!r}",
        ReadyMode.DELAY: f"{policy.ready_delay:g}s",
    }[policy.ready]
    on_event(Event(np.node, np.rank, Phase.WAITING, f"waiting for {what}"))
    script = ready_script(cfg, np)
    while True:
        state = node.run(script, timeout=30).stdout.strip()
        now = time.monotonic()
        if state.startswith(("EXITED", "GONE", "DEAD")):
            code = state.split()[1] if state.startswith("EXITED") else None
            raise LaunchError(
                f"main {np.node} exited before it was ready"
                + (f" (exit code {code})" if code else ""),
                f"last lines of {np.node}'s output:\n{logs.log_tail(node, np.run_dir)}",
            )
        if state == "READY" or (policy.ready is ReadyMode.DELAY and now - t0 >= policy.ready_delay):
            on_event(Event(np.node, np.rank, Phase.READY, f"ready after {now - t0:.1f}s"))
            return time.time()
        if now >= deadline:
            raise LaunchError(
                f"main {np.node} not ready within {policy.ready_timeout:g}s (waited for {what})",
                f"last lines of {np.node}'s output:\n{logs.log_tail(node, np.run_dir)}",
            )
        time.sleep(min(READY_POLL, max(0.0, deadline - now)))
