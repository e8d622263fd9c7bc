"""Executing a plan: main first, wait until it is really ready, then the workers.

Replaces the seed scripts' `sleep 10` between nodes: the workers start when the
main's master port listens (checked on the main itself), so they neither race a
main that is not up yet nor wait longer than needed. Any failure before every node
runs stops what was started: nothing is left half-launched.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from . import logs, remote, tmux
from .config import JobConfig, ReadyMode
from .events import Event, Phase
from .kill import kill_job
from .plan import NodePlan, Plan, build_plan, new_run_id
from .procs import (
    SHELL_LIB,
    PortHolder,
    ProcInfo,
    job_node_pattern,
    parse_listeners,
    parse_procs,
    run_dir_word,
)
from .remote import Cluster, Node, NodeError
from .runs import RunRecord

EventSink = Callable[[Event], None]
log_tail = logs.log_tail  # one function, in logs.py; watch.py imports it from here
READY_POLL = 0.1  # seconds between readiness checks on the main (one round trip each)


class LaunchError(Exception):
    def __init__(self, message: str, details: str = "") -> None:
        self.message, self.details = message, details
        super().__init__(message + ("\n" + details if details else ""))


@dataclass(frozen=True)
class Preflight:
    node: str
    procs: tuple[ProcInfo, ...]  # processes of an earlier run of this job on this node
    session_exists: bool
    port_holders: tuple[PortHolder, ...]
    missing_tools: tuple[str, ...]


@dataclass(frozen=True)
class LaunchResult:
    plan: Plan
    record: RunRecord
    started_at: Mapping[str, float]  # node -> wall time its tmux session started
    ready_at: float  # wall time the main was seen ready


def master_addr(cfg: JobConfig) -> str:
    """What workers dial: the config's value, else the main's HostName as ssh resolves it."""
    if cfg.master_addr:
        return cfg.master_addr
    main = cfg.main_node
    if main.is_local:
        return "127.0.0.1"
    return remote.resolve(main.host, cfg.ssh.config).hostname


def local_env(cfg: JobConfig) -> dict[str, dict[str, str]]:
    """A local node runs with mntui's own PATH, its Python's directory first, so
    `.venv/bin/mntui demo` finds the venv's torchrun without an activated venv."""
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)])
    keep = {"PATH": path, **{k: os.environ[k] for k in ("VIRTUAL_ENV",) if k in os.environ}}
    return {n.name: keep for n in cfg.nodes if n.is_local}


def make_plan(cfg: JobConfig, run_id: str | None = None) -> Plan:
    return build_plan(cfg, run_id or new_run_id(), master_addr(cfg), local_env(cfg))


def preflight_script(cfg: JobConfig, node: str, check_ports: bool) -> str:
    ports = " ".join(str(p) for p in cfg.all_ports) if check_ports else ""
    return f"""{SHELL_LIB}
# shellcheck disable=SC2046 # PIDs, one a word
mntui_procinfo $(mntui_scan {shlex.quote(job_node_pattern(cfg.job, node))})
{tmux.has_session(tmux.session_name(cfg.job, node))} && echo SESSION
for t in tmux bash ss grep sed base64; do command -v "$t" >/dev/null 2>&1 || echo "MISSING $t"; done
{f"mntui_listeners {ports}" if ports else ""}
"""


def preflight(cfg: JobConfig, cluster: Cluster) -> dict[str, remote.Outcome[Preflight]]:
    def one(node: Node) -> Preflight:
        out = node.run(preflight_script(cfg, node.name, node.name == cfg.main)).stdout.splitlines()
        return Preflight(
            node.name,
            parse_procs(out),
            "SESSION" in out,
            parse_listeners(out),
            tuple(line.split()[1] for line in out if line.startswith("MISSING ")),
        )

    return cluster.map(one)


def _start(node: Node, np: NodePlan) -> float:
    res = node.run(np.start_script)
    if not res.ok:
        raise NodeError(
            node.name,
            f"could not start tmux session {np.session}: "
            f"{(res.stderr or res.stdout).strip()[-400:]}",
        )
    return time.time()


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


def wait_ready(cfg: JobConfig, node: Node, np: NodePlan, on_event: EventSink) -> float:
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
                f"last lines of {np.node}'s output:\n{log_tail(node, np.run_dir)}",
            )
        if state == "READY" or (policy.ready is ReadyMode.DELAY and now - t0 >= policy.ready_delay):
            on_event(Event(np.node, np.rank, Phase.READY, f"ready after {now - t0:.1f}s"))
            return time.time()
        if now >= deadline:
            raise LaunchError(
                f"main {np.node} not ready within {policy.ready_timeout:g}s (waited for {what})",
                f"last lines of {np.node}'s output:\n{log_tail(node, np.run_dir)}",
            )
        time.sleep(min(READY_POLL, max(0.0, deadline - now)))


def launch(
    cfg: JobConfig,
    *,
    on_event: EventSink = lambda e: None,
    restart: bool = False,
    cluster: Cluster | None = None,
    plan: Plan | None = None,
) -> LaunchResult:
    """Launch the job; raises LaunchError with nothing of this run left running."""
    own = cluster is None
    cluster = cluster or Cluster(cfg.nodes, cfg.ssh)
    try:
        return _launch(cfg, cluster, on_event, restart, plan or make_plan(cfg))
    finally:
        if own:
            cluster.close()


def _launch(
    cfg: JobConfig, cluster: Cluster, on_event: EventSink, restart: bool, plan: Plan
) -> LaunchResult:
    for np in plan.nodes:
        on_event(Event(np.node, np.rank, Phase.CONNECTING, np.host))
    errors = {n: o.error for n, o in cluster.connect().items() if not o.ok}
    for np in plan.nodes:
        if np.node not in errors:
            on_event(Event(np.node, np.rank, Phase.CONNECTED, ""))
    if errors:
        raise LaunchError(
            f"{len(errors)} of {plan.nnodes} node(s) unreachable; nothing was started",
            "\n".join(f"  {n}: {e}" for n, e in errors.items()),
        )

    checks = preflight(cfg, cluster)
    problems = [f"  {n}: {o.error}" for n, o in checks.items() if not o.ok]
    running = {n: o.value.procs for n, o in checks.items() if o.value and o.value.procs}
    for n, o in checks.items():
        if o.value and o.value.missing_tools:
            problems.append(f"  {n}: missing {', '.join(o.value.missing_tools)} on the node")
    if running and not restart:
        problems.append(
            f"job {cfg.job} is already running (use `mntui launch --restart` or `mntui kill`):"
        )
        problems += [
            f"  {n}: pids {' '.join(str(p.pid) for p in procs)}" for n, procs in running.items()
        ]
    if problems:
        raise LaunchError("preflight failed; nothing was started", "\n".join(problems))
    if running:
        on_event(
            Event(
                None,
                None,
                Phase.KILLING,
                f"--restart: stopping the running job on {', '.join(running)}",
            )
        )
        dirty = [
            f"  {n}: {o.error or (o.value.summary() if o.value else '')}"
            for n, o in kill_job(cfg, cluster, on_event=on_event).items()
            if not o.ok or (o.value is not None and not o.value.clean)
        ]
        if dirty:
            raise LaunchError(
                "could not stop the running job; nothing new was started", "\n".join(dirty)
            )
        checks = preflight(cfg, cluster)
    main_check = checks[cfg.main].value
    if main_check is not None and main_check.port_holders:
        raise LaunchError(
            f"a port of the job is busy on the main {cfg.main}; nothing was started "
            "(`mntui cleanup` frees it)",
            "\n".join(f"  {h.describe()}" for h in main_check.port_holders),
        )
    for np in plan.nodes:
        on_event(
            Event(
                np.node, np.rank, Phase.CHECKED, "no earlier run, ports free" if np.is_main else ""
            )
        )

    record = RunRecord.from_plan(plan, cfg.path)
    record.save()
    started: dict[str, float] = {}
    attempted: list[str] = []  # an interrupted start may have started the node: abort kills it too
    try:
        main = plan.main
        on_event(Event(main.node, main.rank, Phase.STARTING, f"tmux session {main.session}"))
        attempted.append(main.node)
        started[main.node] = _start(cluster.nodes[main.node], main)
        on_event(Event(main.node, main.rank, Phase.STARTED, f"tmux session {main.session}"))
        ready_at = wait_ready(cfg, cluster.nodes[main.node], main, on_event)
        record.ready_at = ready_at
        _start_workers(cfg, cluster, plan, started, attempted, on_event)
    except (LaunchError, NodeError, KeyboardInterrupt) as exc:
        reason = exc.message if isinstance(exc, (LaunchError, NodeError)) else "interrupted"
        details = exc.details if isinstance(exc, LaunchError) else ""
        on_event(
            Event(
                None, None, Phase.ABORTED, f"{reason}; stopping {', '.join(attempted) or 'nothing'}"
            )
        )
        if attempted:
            kill_job(cfg, cluster, names=list(dict.fromkeys(attempted)), on_event=on_event)
        record.status, record.error = "aborted", reason
        record.save()
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise LaunchError(reason if isinstance(exc, LaunchError) else f"{exc}", details) from None
    record.nodes = [
        type(n)(**{**n.__dict__, "started_at": started.get(n.node)}) for n in record.nodes
    ]
    record.status, record.finished_launch_at = "running", time.time()
    record.save()
    on_event(
        Event(None, None, Phase.RUNNING, f"all {plan.nnodes} node(s) started, run {plan.run_id}")
    )
    return LaunchResult(plan, record, started, ready_at)


def _start_workers(
    cfg: JobConfig,
    cluster: Cluster,
    plan: Plan,
    started: dict[str, float],
    attempted: list[str],
    on_event: EventSink,
) -> None:
    def one(np: NodePlan) -> None:
        on_event(Event(np.node, np.rank, Phase.STARTING, f"tmux session {np.session}"))
        attempted.append(np.node)
        started[np.node] = _start(cluster.nodes[np.node], np)
        on_event(Event(np.node, np.rank, Phase.STARTED, f"tmux session {np.session}"))

    stagger = cfg.launch.stagger
    if stagger <= 0:
        results = cluster.map(
            lambda node: one(plan.node(node.name)), [w.node for w in plan.workers]
        )
        failed = {n: o.error for n, o in results.items() if not o.ok}
        if failed:
            raise LaunchError(
                f"{len(failed)} worker(s) failed to start",
                "\n".join(f"  {n}: {e}" for n, e in failed.items()),
            )
        return
    for i, np in enumerate(plan.workers):
        if i:
            time.sleep(stagger)  # the user's configured stagger between workers
        one(np)
