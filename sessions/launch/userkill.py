"""A user's kill: every process the chain ever started, on every node it used, and
the user's intent written down before anything is killed.

Marking comes first so `status` says the user's word, a run that had already ended (its
chain in its backoff) included. A run the cluster watches is stopped by one request to
its coordinator, which takes the request as the user's word (no restart after it); the
nodes it does not answer for, and an unwatched run's, are killed directly by tag. The
nodes come from the chain's records (chains.run_config, synced from the coordinator's
answer), never from the config alone: after a spare was swapped in the config would
miss where the job runs. A run that appeared while the kill began is caught by looking
again after it. Only a chain's latest run is marked: its earlier attempts ended
before the kill, and their failures stay in the history.

A partial kill (`mntui kill g375`) is recorded on the run that uses the node, as the
user's doing: what follows from it (the other ranks losing their peer) is never
restarted nor blamed. In the backoff it is refused: the relaunch would put the node
back, and `mntui quarantine` is the word for keeping a node out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from functools import partial

from mntui.sessions.config import JobConfig
from mntui.sessions.errors import UsageError
from mntui.sessions.events import Event, Phase
from mntui.sessions.node.rules.restarts import attempt_label
from mntui.sessions.results import GroupResult, Outcome
from mntui.sessions.runs import MISSED_NOTE, RunRecord, RunStatus, live_runs
from mntui.sessions.ssh import Cluster, Node

from .chains import ChainView, chain_of, check_nodes, idle_spares, run_config
from .coordkill import Mirror, kill_via_coordinator
from .kill import KillReport, kill_job
from .mainmoved import via_successor

__all__ = ["stop_job"]

SWEEPS = 3  # looks for a run born while we killed (a relaunch mid-start)


def _killing(r: RunRecord) -> None:
    """The user's word on the run as it is now (under its lock): a live run is killed;
    one that ended but may yet be relaunched keeps its ending, and the note ends its
    chain (the supervisor's mark reads it)."""
    if r.status.is_live:
        r.status = RunStatus.KILLING
        r.note("kill", by="user")
    elif r.status.may_restart and not r.stopped_by_user:
        r.note("kill", by="user")


def _killed(r: RunRecord) -> None:
    if r.status.is_stopping:
        r.status = RunStatus.KILLED


def _partial(names: list[str]) -> Callable[[RunRecord], None]:
    """Only the nodes the run uses: a kill of another (a culprit a spare replaced,
    cleaned up) is not what this run's end will follow from."""

    def change(r: RunRecord) -> None:
        mine = sorted(set(names) & {n.node for n in r.nodes})
        if not mine:
            return
        if r.status is RunStatus.RESTARTING:
            raise UsageError(_relaunching(r, mine))
        if r.status.is_live:
            r.killed_nodes = sorted({*r.killed_nodes, *mine})
            r.note("kill", by="user", nodes=mine, at=time.time())

    return change


def _relaunching(r: RunRecord, nodes: list[str]) -> str:
    them, it = " ".join(nodes), "it" if len(nodes) == 1 else "them"
    return (
        f"not killing {them}: {r.job} waits out its restart backoff and "
        f"{attempt_label(r.attempt + 1)} starts on {it} again; `mntui quarantine {them}` "
        f"keeps {it} out of that attempt, `mntui kill` ends the chain"
    )


def _kill_on(
    full: JobConfig,
    cluster: Cluster,
    names: list[str],
    grace: float | None,
    on_event: Callable[[Event], None],
    early: Mapping[str, Node] | None = None,
) -> GroupResult[KillReport]:
    """`names` over `cluster` where it reaches them (first over an `early` connection
    where one was started for it), over connections of our own for the rest (a spare,
    a replaced culprit), both at once."""
    here = [n for n in names if n in cluster.nodes]
    there = [n for n in full.nodes if n.name in names and n.name not in cluster.nodes]
    extra: list[GroupResult[KillReport]] = []

    def kill_there() -> None:
        with Cluster(there, full.ssh) as side:
            extra.append(kill_job(full, side, grace=grace, on_event=on_event))

    thread = threading.Thread(target=kill_there, daemon=True) if there else None
    if thread is not None:
        thread.start()
    results = kill_job(full, cluster, names=here, grace=grace, on_event=on_event, first=early)
    if thread is not None:
        thread.join()
    merged: GroupResult[KillReport] = GroupResult()
    for group in (results, *extra):
        merged.update(group)
    return GroupResult((n, merged[n]) for n in names if n in merged)


def stop_job(
    cfg: JobConfig,
    cluster: Cluster,
    *,
    names: Iterable[str] | None = None,
    grace: float | None = None,
    on_event: Callable[[Event], None] = lambda e: None,
    mirror: Mirror | None = None,
) -> GroupResult[KillReport]:
    """A user's kill (CLI `kill`, the app's K, the agent's kill): mark, kill, mark.
    `mirror`: the records' sync from a coordinator's answer (coordkill.py)."""
    view = chain_of(cfg.job)
    if names is not None:
        full = run_config(cfg, view)
        picked = check_nodes(full, list(names))
        _refuse_partial_on_cluster(view, picked)
        if view is not None:
            view.latest.update(_partial(picked))
        return _kill_on(full, cluster, picked, grace, on_event)
    marked: dict[str, RunRecord] = {}
    results: GroupResult[KillReport] = GroupResult()
    for sweep in range(SWEEPS):
        fresh = [r for r in _to_stop(cfg.job) if r.run_id not in marked]
        if sweep and not fresh:
            break
        g = cfg.grace if grace is None else grace
        asking = _Asking(fresh, cluster, g, on_event, mirror) if not sweep else None
        for record in fresh:  # running, in its backoff, or just ended
            record.update(_killing)
            marked[record.run_id] = record
        done = asking.result() if asking is not None else None
        # after the coordinator's answer: its chain is in the records (a spare it swapped in)
        full = run_config(cfg, _with(chain_of(cfg.job), list(marked.values())))
        names = [n.name for n in full.nodes]
        if asking is not None and done is not None:  # the cluster's: one request, rest directly
            results.update(_swept(full, cluster, done, grace, on_event))
            names = [n for n in names if n not in done]
            if asking.all_answered(names):
                break  # its coordinator stopped the idle spares' sentinels too
            full, names = _with_idle_spares(cfg, full, names)
        results.update(_kill_on(full, cluster, names, grace, on_event))
    missed = {n: [p.pid for p in r.missed] for n, r in results.succeeded.items() if r.missed}
    for record in marked.values():
        record.update(_killed)
        if missed:  # `status` says so after the coordinator's account (watch/fromcluster.py)
            record.update(partial(_note_missed, missed=missed))
    return results


def _note_missed(r: RunRecord, missed: dict[str, list[int]]) -> None:
    r.note(MISSED_NOTE, nodes={n: pids[:64] for n, pids in missed.items()})


def _swept(
    full: JobConfig,
    cluster: Cluster,
    answered: GroupResult[KillReport],
    grace: float | None,
    on_event: Callable[[Event], None],
) -> GroupResult[KillReport]:
    """The final sweep: every node whose sentinel reported a clean kill is killed again
    from here, by the same rule, at once (a sentinel's report is its word: a bug or a
    lie would leave the job running under a `clean`). A node where the sweep finds
    nothing keeps its sentinel's report and says nothing more; one where it finds
    something says so, and is clean only if the sweep left nothing. A node the sweep
    cannot reach keeps its sentinel's report, and says that it was not checked."""
    reports = answered.succeeded
    names = list(reports)
    if not names:
        return answered
    early = _early_sweeps(cluster, names)  # started with the request (tui/cli/prestart.py)
    swept = _kill_on(full, cluster, names, grace, lambda e: None, early)  # said below
    ranks = {n.name: n.rank for n in full.nodes}
    out: GroupResult[KillReport] = GroupResult()
    for name in names:
        said = reports[name]
        got = swept.get(name)
        if got is None or got.value is None:
            why = got.error if got is not None else "not asked"
            on_event(Event(name, ranks.get(name), Phase.KILLED, f"not checked from here: {why}"))
        elif got.value.jobs or not got.value.clean:  # its watchers may still be leaving
            said = said.swept(got.value)
            phase = Phase.KILLED if said.clean else Phase.FAILED
            on_event(Event(name, ranks.get(name), phase, said.summary()))
        out[name] = Outcome(name, value=said)
    return out


def _early_sweeps(cluster: Cluster, names: list[str]) -> dict[str, Node]:
    """The sweep's connections a cold `mntui kill` started first thing, one per node,
    each exactly the one the sweep would make (ssh/early.py); the others' sweep goes
    over the cluster's own connections."""
    if cluster.policy.password is not None:
        return {}
    from mntui.sessions.ssh import early
    from mntui.sessions.ssh.openssh import oneshot_argv

    argv = oneshot_argv(cluster.policy)
    out: dict[str, Node] = {}
    for name in names:
        node = cluster.nodes.get(name)
        once = early.take(node.host, argv, early.SWEEP) if node is not None else None
        if once is not None:
            out[name] = once
    return out


def _with_idle_spares(
    cfg: JobConfig, full: JobConfig, names: list[str]
) -> tuple[JobConfig, list[str]]:
    """A direct kill of a chain the cluster watched also reaches its idle spares, whose
    sentinels only a coordinator would have stopped."""
    idle = [s for s in idle_spares(cfg, chain_of(cfg.job)) if s.name not in names]
    if not idle:
        return full, names
    return replace(full, nodes=(*full.nodes, *idle)), [*names, *(s.name for s in idle)]


def _refuse_partial_on_cluster(view: ChainView | None, nodes: list[str]) -> None:
    """A node's kill under the cluster's watch would look to its coordinator like a node
    that vanished: a failure to tear down and restart from, against the user's word."""
    run = view.latest if view is not None else None
    if run is not None and run.watch_port is not None and run.status.is_live:
        them = " ".join(nodes)
        raise UsageError(
            f"not killing {them} alone: the cluster watches {run.job} run {run.run_id} and "
            f"would take it for a failure; `mntui kill` stops the whole job"
        )


class _Asking:
    """The coordinators' kills, asked on a thread of their own while this one marks the
    runs: its coordinator takes the request itself as the user's word (the record's
    mark is for `status`), so the request need not wait for the marks: 0.1-0.3 s of a
    64-node kill were record reads and writes under load. Only a run whose coordinator
    answered for every node of the run ends the sweeps: its restarts are the
    coordinator's, which the request stopped."""

    def __init__(
        self,
        runs: list[RunRecord],
        cluster: Cluster,
        grace: float,
        on_event: Callable[[Event], None],
        mirror: Mirror | None = None,
    ) -> None:
        self.runs = [r for r in runs if r.watch_port is not None and r.nodes]
        self.done: GroupResult[KillReport] = GroupResult()
        self.thread: threading.Thread | None = None
        self.everyone = len(self.runs) == len(runs) and bool(runs)
        if self.runs:

            def ask() -> None:
                for r in self.runs:
                    got = kill_via_coordinator(r, cluster, grace, on_event, mirror)
                    if got is None and mirror is not None:  # its main lost: a successor's?
                        got = via_successor(r, cluster.policy, grace, on_event, mirror)
                    if got is not None:
                        self.done.update(got)
                    else:
                        self.everyone = False

            self.thread = threading.Thread(target=ask, daemon=True)
            self.thread.start()

    def result(self) -> GroupResult[KillReport]:
        if self.thread is not None:
            self.thread.join()
        return self.done

    def all_answered(self, left: list[str]) -> bool:
        """Every run to stop is the cluster's, each answered clean on all its nodes."""
        return self.everyone and not left


def _to_stop(job: str) -> list[RunRecord]:
    """Each chain's latest run while it is live, and the job's latest run if it ended
    but its supervisor may still relaunch it (between a teardown and its decision)."""
    runs = live_runs(job)
    view = chain_of(job)
    head = view.latest if view is not None else None
    if head is not None and head.status.may_restart and head.run_id not in {r.run_id for r in runs}:
        runs.append(head)
    return runs


def _with(view: ChainView | None, runs: list[RunRecord]) -> ChainView | None:
    """The chain, plus live runs of other chains of the job (their nodes too)."""
    if view is None and not runs:
        return None
    own = {r.run_id for r in view.runs} if view is not None else set()
    others = tuple(r for r in runs if r.run_id not in own)
    return ChainView(others + (view.runs if view is not None else ()))
