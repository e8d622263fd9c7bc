"""Executing a plan: main first, wait until it is really ready, then the workers.

Replaces the seed scripts' `sleep 10` between nodes: the workers start when the
main's master port listens (checked on the main itself), so they neither race a
main that is not up yet nor wait longer than needed. Any failure before every node
runs stops what was started: nothing is left half-launched. A node on which no
sentinel can run (the preflight's answer) refuses the launch before anything starts:
a run is watched by the cluster on every node or, with `--no-watch`, on none.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import NoReturn

from mntui.sessions.config import JobConfig, NodeSpec
from mntui.sessions.errors import LaunchError, LaunchRefused, MntuiError
from mntui.sessions.events import Event, Phase
from mntui.sessions.history import route_around
from mntui.sessions.node.rules.runid import new_run_id
from mntui.sessions.results import GroupResult, NodeError
from mntui.sessions.runs import RunRecord, RunStatus
from mntui.sessions.ssh import Cluster, Node, resolve
from mntui.sessions.termsafe import one_line

from . import clusterwatch, sparestart
from .kill import kill_job
from .nodeplan import NodePlan
from .plan import Plan, build_plan, run_record
from .startchecks import Preflight, preflight, wait_ready

EventSink = Callable[[Event], None]


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
    return node_addr(cfg, cfg.main_node)


def node_addr(cfg: JobConfig, spec: NodeSpec) -> str:
    """Where the other nodes reach `spec`: its HostName as ssh resolves it."""
    if spec.is_local:
        return "127.0.0.1"
    return resolve(spec.host, cfg.ssh.config).hostname


def spare_addrs(cfg: JobConfig) -> dict[str, str]:
    """Where each spare is reached, should it succeed a lost main on the cluster (its
    coordinator's host and the master address: node/chain/succession.py); none without
    restarts there."""
    if cfg.watch_port is None or cfg.restart.max <= 0:
        return {}
    return {s.name: node_addr(cfg, s) for s in cfg.spares}


def local_env(cfg: JobConfig) -> dict[str, dict[str, str]]:
    """A local node runs with mntui's own PATH, its Python's directory first, so
    `.venv/bin/mntui demo` finds the venv's torchrun without an activated venv."""
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)])
    keep = {"PATH": path, **{k: os.environ[k] for k in ("VIRTUAL_ENV",) if k in os.environ}}
    return {n.name: keep for n in cfg.nodes if n.is_local}


def make_plan(cfg: JobConfig, run_id: str | None = None) -> Plan:
    return build_plan(
        cfg, run_id or new_run_id(), master_addr(cfg), local_env(cfg), addrs=spare_addrs(cfg)
    )


def _start(node: Node, np: NodePlan) -> float:
    res = node.run(np.start_script)
    said = clusterwatch.failure(res.stdout)
    if said is not None:
        raise NodeError(node.name, f"the cluster's watch did not start: {said}")
    if not res.ok:
        raise NodeError(
            node.name,
            f"could not start tmux session {np.session}: "
            f"{(res.stderr or res.stdout).strip()[-400:]}",
        )
    return time.time()


def launch(
    cfg: JobConfig,
    *,
    on_event: EventSink = lambda e: None,
    restart: bool = False,
    cluster: Cluster | None = None,
    plan: Plan | None = None,
) -> LaunchResult:
    """Launch the job; raises LaunchError with nothing of this run left running. Its
    restarts are its coordinator's, on the cluster (node/chain/chain.py), never a launch's."""
    check_nodes_fresh(cfg)
    cfg, routed = route_around(cfg)  # a quarantined node: refused, or a spare
    for said in routed:
        on_event(Event(None, None, Phase.NOTICE, said))
    cluster = None if routed else cluster  # the caller's reaches the config's nodes
    own = cluster is None
    cluster = cluster or Cluster(cfg.nodes, cfg.ssh)
    try:
        plan = plan or make_plan(cfg)
        return _launch(cfg, cluster, on_event, restart, plan)
    finally:
        if own:
            cluster.close()


def _launch(
    cfg: JobConfig,
    cluster: Cluster,
    on_event: EventSink,
    restart: bool,
    plan: Plan,
) -> LaunchResult:
    _connect(cluster, plan, on_event)
    checks = _check_nodes(cfg, cluster, plan, restart, on_event)
    _check_ports(cfg, plan, checks, on_event)
    if cfg.sync is not None:
        _sync(cfg, on_event)
    record = run_record(plan, cfg.path)
    record.node_source = cfg.nodes_from.to_record() if cfg.nodes_from is not None else None
    record.chain = plan.run_id
    record.watch_port = cfg.watch_port
    record.create()
    started: dict[str, float] = {}
    attempted: list[str] = []  # an interrupted start may have started the node: abort kills it too
    try:
        main = plan.main
        on_event(Event(main.node, main.rank, Phase.STARTING, f"tmux session {main.session}"))
        attempted.append(main.node)
        started[main.node] = _start(cluster.nodes[main.node], main)
        on_event(Event(main.node, main.rank, Phase.STARTED, f"tmux session {main.session}"))
        ready_at = wait_ready(cfg, cluster.nodes[main.node], main, on_event)
        record.update(lambda r: setattr(r, "ready_at", ready_at))
        _start_workers(cfg, cluster, plan, started, attempted, on_event)
        if cfg.watch_port is not None:
            _confirm_watch(cfg, cluster, plan, on_event)
            sparestart.start_spares(cfg, plan, on_event)  # the cluster's restarts may use them
    except (LaunchError, NodeError, KeyboardInterrupt) as exc:
        _abort(cfg, cluster, record, attempted, exc, on_event)

    def running(r: RunRecord) -> None:
        r.nodes = [replace(n, started_at=started.get(n.node)) for n in r.nodes]
        r.finished_launch_at = time.time()
        if r.status is RunStatus.LAUNCHING:  # a user's kill during the launch wins
            r.status = RunStatus.RUNNING

    record.update(running)
    on_event(
        Event(None, None, Phase.RUNNING, f"all {plan.nnodes} node(s) started, run {plan.run_id}")
    )
    return LaunchResult(plan, record, started, ready_at)


def _check_watch(cfg: JobConfig, checks: GroupResult[Preflight], on_event: EventSink) -> None:
    """The cluster watches the run only if a sentinel can run on every node (its bare
    python3, or the one `setup` provides: said per node); else the launch is refused,
    nothing started, in one line naming the nodes and the fix (LaunchRefused: exit 2)."""
    if cfg.watch_port is None:
        return
    unfit: dict[str, str] = {}
    for n, c in checks.succeeded.items():
        why = clusterwatch.python_unfit(c.sentinel_python, c.sentinel_runs_on is not None)
        if why is not None:
            unfit[n] = why
        elif c.sentinel_runs_on not in (None, "python3"):
            said = f"{n}: the cluster's watch runs on {c.sentinel_runs_on} (after `setup`)"
            on_event(Event(None, None, Phase.NOTICE, one_line(said, 300)))
    if unfit:
        raise LaunchRefused(clusterwatch.refusal(unfit))


def _confirm_watch(cfg: JobConfig, cluster: Cluster, plan: Plan, on_event: EventSink) -> None:
    main = plan.main
    view = clusterwatch.confirm(cluster.nodes[main.node], main.run_dir, plan.nnodes)
    where = f"the coordinator on {main.node}:{cfg.watch_port}"
    decided = view.decision
    if decided is not None:  # node text: one bounded line
        what = one_line(f"{decided.get('node')} {decided.get('state')}: {decided.get('why')}")
        said = f"watched by the cluster: {where} has already decided: {what[:200]}"
    else:
        said = (
            f"watched by the cluster: {view.connected()} of {plan.nnodes} sentinel(s) "
            f"connected to {where}; this machine may sleep"
        )
    on_event(Event(None, None, Phase.NOTICE, said))


def check_nodes_fresh(cfg: JobConfig) -> None:
    """A new run goes to the nodes its source gives now; the nodes an earlier run
    recorded serve that run's commands, and its restarts, only."""
    source = cfg.nodes_from
    if source is not None and source.run is not None:
        raise LaunchError(
            f"nodes: not launching on the nodes run {source.run} recorded: {source.why}"
        )


def _sync(cfg: JobConfig, on_event: EventSink) -> None:
    from mntui.sessions.sync import SyncError, sync_nodes

    try:
        sync_nodes(cfg, on_event=on_event)
    except SyncError as exc:
        what = f"code sync failed on {len(exc.failures)} node(s); nothing was started"
        raise LaunchError(what, exc.details) from None
    except MntuiError as exc:  # the source is no directory: one line, for the app too
        raise LaunchError(f"{exc}; nothing was started") from None


def _connect(cluster: Cluster, plan: Plan, on_event: EventSink) -> None:
    for np in plan.nodes:
        on_event(Event(np.node, np.rank, Phase.CONNECTING, np.host))
    connected = cluster.connect()
    for np in plan.nodes:
        if connected[np.node].ok:
            on_event(Event(np.node, np.rank, Phase.CONNECTED, ""))
    if connected.failed:
        raise LaunchError(
            f"{len(connected.failed)} of {plan.nnodes} node(s) unreachable; nothing was started",
            "\n".join(f"  {n}: {e}" for n, e in connected.errors.items()),
        )


def _check_nodes(
    cfg: JobConfig, cluster: Cluster, plan: Plan, restart: bool, on_event: EventSink
) -> GroupResult[Preflight]:
    """Refuse to start over an earlier run (unless --restart, which stops it first), on
    a node without the tools, or on one no sentinel can run on (before --restart stops
    anything); the nodes' answers, for the ports."""
    checks = preflight(cfg, cluster)
    problems = [f"  {n}: {e}" for n, e in checks.errors.items()]
    running = {n: c.procs for n, c in checks.succeeded.items() if c.procs}
    for n, c in checks.succeeded.items():
        if c.missing_tools:
            problems.append(f"  {n}: missing {', '.join(c.missing_tools)} on the node")
    if running and not restart:
        problems.append(
            f"job {cfg.job} is already running (use `mntui launch --restart` or `mntui kill`):"
        )
        problems += [
            f"  {n}: pids {' '.join(str(p.pid) for p in procs)}" for n, procs in running.items()
        ]
    if problems:
        raise LaunchError("preflight failed; nothing was started", "\n".join(problems))
    _check_watch(cfg, checks, on_event)
    if running:
        _stop_earlier_run(cfg, cluster, list(running), on_event)
        checks = preflight(cfg, cluster)
    return checks


def _check_ports(
    cfg: JobConfig, plan: Plan, checks: GroupResult[Preflight], on_event: EventSink
) -> None:
    """Refuse a port of the job already taken on the main: the ports of the way the run
    is watched (a run watched from here needs no `watch.port`)."""
    main_check = checks.succeeded.get(cfg.main)
    busy = [h for h in main_check.port_holders if h.port in cfg.all_ports] if main_check else []
    if busy:
        raise LaunchError(
            f"a port of the job is busy on the main {cfg.main}; nothing was started "
            "(`mntui cleanup` frees it)",
            "\n".join(f"  {h.describe()}" for h in busy),
        )
    for np in plan.nodes:
        detail = "no earlier run, ports free" if np.is_main else ""
        on_event(Event(np.node, np.rank, Phase.CHECKED, detail))


def _stop_earlier_run(
    cfg: JobConfig, cluster: Cluster, nodes: list[str], on_event: EventSink
) -> None:
    what = f"--restart: stopping the running job on {', '.join(nodes)}"
    on_event(Event(None, None, Phase.KILLING, what))
    results = kill_job(cfg, cluster, on_event=on_event)
    dirty = [f"  {n}: {e}" for n, e in results.errors.items()]
    dirty += [f"  {n}: {r.summary()}" for n, r in results.succeeded.items() if not r.clean]
    if dirty:
        raise LaunchError(
            "could not stop the running job; nothing new was started", "\n".join(dirty)
        )


def _abort(
    cfg: JobConfig,
    cluster: Cluster,
    record: RunRecord,
    attempted: list[str],
    exc: BaseException,
    on_event: EventSink,
) -> NoReturn:
    """Stop whatever this launch started, record why, and re-raise as a LaunchError (or
    as the KeyboardInterrupt it was, after the cleanup)."""
    reason = exc.message if isinstance(exc, (LaunchError, NodeError)) else "interrupted"
    details = exc.details if isinstance(exc, LaunchError) else ""
    stopping = ", ".join(attempted) or "nothing"
    on_event(Event(None, None, Phase.ABORTED, f"{reason}; stopping {stopping}"))
    if attempted:
        kill_job(cfg, cluster, names=list(dict.fromkeys(attempted)), on_event=on_event)

    def aborted(r: RunRecord) -> None:
        r.status, r.error = RunStatus.ABORTED, reason

    record.update(aborted)
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    raise LaunchError(reason if isinstance(exc, LaunchError) else f"{exc}", details) from None


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
        if results.failed:
            raise LaunchError(
                f"{len(results.failed)} worker(s) failed to start",
                "\n".join(f"  {n}: {e}" for n, e in results.errors.items()),
            )
        return
    for i, np in enumerate(plan.workers):
        if i:
            time.sleep(stagger)  # the user's configured stagger between workers
        one(np)
