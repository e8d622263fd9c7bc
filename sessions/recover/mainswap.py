"""The chain goes on from this machine when the cluster's main is lost or given up:
the old attempt stopped where it can be reached, the next attempt launched with a spare
as its main, watched by the cluster again (a new coordinator on the new main).

Why here and not on the cluster: the coordinator runs on the main, so nothing on the
cluster can go on without it (placing.py ends the chain for this machine to replace
it). The decision is the chain's own: the restart policy over every end of the chain,
the cluster's attempts included (restarts.decide), and the same placement rule the
coordinator uses (placing.place, told that this machine may move the main and which
node is lost), with this machine's quarantines and the chain's. The new attempt is a
launch of the chain (`launch --restart` with an Attempt), so its record names its nodes
and links to the chain, and its coordinator gets the restarts that are left.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mntui.sessions.config import JobConfig, RestartPolicy
from mntui.sessions.errors import LaunchError
from mntui.sessions.events import Event, Phase
from mntui.sessions.history import active_quarantines
from mntui.sessions.launch import Attempt, ChainView, kill_job, launch, run_config
from mntui.sessions.launch.board import coord_run
from mntui.sessions.launch.sparenote import spares_of
from mntui.sessions.launch.startchecks import preflight
from mntui.sessions.node.placing import place
from mntui.sessions.poll import NodeState
from mntui.sessions.results import NodeError
from mntui.sessions.runs import NodeRecord, RunRecord, RunStatus, load_run
from mntui.sessions.ssh import Cluster
from mntui.sessions.watch.sparesync import sync_quarantines
from mntui.sessions.watch.standbyhint import LOST_NOTE

from .chainstate import mark, stopped, wait_backoff
from .mainlook import answering
from .restart import AttemptEnd, decide, ends_from, laid_out

EventSink = Callable[[Event], None]


@dataclass(frozen=True)
class Next:
    """The chain's next attempt: its nodes by rank (None: there is none, `why` says)."""

    layout: tuple[str, ...] | None
    why: str
    delay: float = 0.0
    said: tuple[str, ...] = ()  # each swap, one line each
    left: int = 0  # the restarts the new coordinator may still make


def plan_next(
    policy: RestartPolicy,
    history: Sequence[AttemptEnd],
    layout: Sequence[str],
    lost: Collection[str],
    out: Collection[str],
    spares: Sequence[str],
    ready: Collection[str],
    nprocs: Mapping[str, int],
) -> Next:
    """Pure: the policy over the whole chain, then the coordinator's placement rule, told
    that this machine may move the main."""
    d = decide(policy, history)
    if not d.restart:
        return Next(None, f"no restart: {d.why}")
    p = place(layout, history, out, spares, ready, nprocs, here=True, lost=lost)
    if p.stop is not None:
        return Next(None, f"no restart: {p.stop}", said=p.said)
    return Next(p.layout, d.why, d.delay, p.said, max(0, policy.max - d.counted))


def chain_history(first: RunRecord, chain: Mapping[str, Any] | None) -> list[AttemptEnd]:
    """Every end of the chain: those before its coordinator (the first record's), then
    the coordinator's (chain.json, as last read)."""
    items = chain.get("attempts") if chain is not None else None
    ends = [e.get("end") for e in items if isinstance(e, dict)] if isinstance(items, list) else []
    return [*ends_from(first.attempts), *ends_from([e for e in ends if isinstance(e, dict)])]


def take_over(
    cfg: JobConfig,
    latest: RunRecord,
    chain: Mapping[str, Any] | None,
    lost: str | None,
    reached: Collection[str],
    say: EventSink,
) -> RunRecord | None:
    """`lost`: the main, when it is gone (None: the coordinator gave it up); `reached`:
    the nodes of the attempt that answered this look. The new attempt's record, or None
    when the chain ends here (its record says why)."""
    first = load_run(latest.job, coord_run(latest)) or latest
    history = chain_history(first, chain)
    main = latest.main
    if lost is not None:
        why = f"the main {lost} was lost (this machine's look: {main.host} silent)"
        history.append(AttemptEnd(latest.attempt, latest.run_id, NodeState.UNREACHABLE, lost,
                                  (), 0.0, why))  # fmt: skip
    rcfg = run_config(cfg, ChainView((latest,)))
    spares = _spare_nodes(cfg, first)
    layout = tuple(n.node for n in _by_rank(latest.nodes))
    out = quarantined(first, chain)
    free = [s for s in spares if s.node not in layout and s.node not in out]
    ready = answering(free, _ssh(cfg), 10.0) if free else set()
    nprocs = {s.name: cfg.nproc(s) for s in (*rcfg.nodes, *cfg.spares)}
    names = [s.name for s in cfg.spares]
    nxt = plan_next(cfg.restart, history, layout, {lost} if lost else (), out, names, ready, nprocs)
    gone = lost if lost is not None and lost not in reached else None  # its sshd may answer
    nxt = keep_clean(nxt, stop_old(cfg, rcfg, latest, [*reached, *sorted(ready)], gone, say))
    if nxt.layout is None:
        _end(latest, nxt.why, history[-1].cause)
        _say(say, f"{history[-1].cause}; {nxt.why}")
        return None
    return _relaunch(cfg, rcfg, latest, history, nxt, say)


def keep_clean(nxt: Next, dirty: Collection[str]) -> Next:
    """Pure: no next attempt on a node where the old one was not stopped clean (two
    attempts on one node fight over its ports, GPUs and files)."""
    kept = [n for n in nxt.layout or () if n in dirty]
    if not kept:
        return nxt
    why = (f"no restart: the old attempt was not stopped clean on {', '.join(kept)}, "
           "which the next attempt would use")  # fmt: skip
    return replace(nxt, layout=None, why=why)


def _relaunch(
    cfg: JobConfig,
    rcfg: JobConfig,
    latest: RunRecord,
    history: list[AttemptEnd],
    nxt: Next,
    say: EventSink,
) -> RunRecord | None:
    assert nxt.layout is not None
    n = latest.attempt + 1
    ends = [e.plain() for e in history]
    swapped = "; ".join(nxt.said)
    if not mark(latest, RunStatus.RESTARTING, "restart", attempt=n, why=nxt.why,
                delay=nxt.delay, swapped=swapped, ends=ends):  # fmt: skip
        _say(say, "no restart: the user killed the chain")
        return None
    _say(say, f"attempt {n}/{cfg.restart.max} in {nxt.delay:g}s ({nxt.why}); {swapped}")
    if not wait_backoff(latest, nxt.delay):
        _say(say, "restart cancelled: the run was killed during the backoff")
        return None
    new = _new_config(cfg, rcfg, nxt)
    attempt = Attempt(n, latest.chain or latest.run_id, tuple(ends), cluster=True)
    try:
        result = launch(new, on_event=say, restart=True, attempt=attempt)
    except (LaunchError, NodeError) as exc:
        why = f"attempt {n} did not start: {(str(exc).splitlines() or ['?'])[0][:300]}"
        _end(latest, why, history[-1].cause)  # else "restarting" stays, with nobody acting
        _say(say, why)
        return None
    if stopped(latest) or stopped(result.record):  # a kill while it started: the user's word
        with Cluster(new.nodes, new.ssh) as cluster:
            kill_job(new, cluster, on_event=say)
        return None
    return result.record


def _new_config(cfg: JobConfig, rcfg: JobConfig, nxt: Next) -> JobConfig:
    """The next attempt's config: its nodes by rank (hosts as recorded), the main first,
    the master following a moved main, and the restarts that are left."""
    assert nxt.layout is not None
    return replace(laid_out(rcfg, nxt.layout), restart=replace(cfg.restart, max=nxt.left))


def quarantined(first: RunRecord, chain: Mapping[str, Any] | None) -> set[str]:
    """The nodes kept out: this machine's quarantines, the chain's written into them
    first (sparesync checks their shape and expiry; node output is data)."""
    if isinstance(chain, dict):
        sync_quarantines(first, chain)
    return set(active_quarantines())


def stop_old(
    cfg: JobConfig,
    rcfg: JobConfig,
    old: RunRecord,
    names: Sequence[str],
    gone: str | None,
    say: EventSink,
) -> list[str]:
    """The old attempt's processes by its own run's tag (its watchers by their run's), on
    every node this machine reaches: never a later run's, should this stop be misjudged
    (kill.kill_job `only`). A main that does not answer is said, not tried. The nodes not
    stopped clean, and those where any other run of the job still runs: the relaunch's
    own preflight would stop every run of the job there, so such a node takes no new
    attempt (keep_clean) and the run is left alone. (The chain's attempts on the cluster
    share their watchers' tag: a misjudged stop would take those.)"""
    specs = {s.name: s for s in (*cfg.spares, *rcfg.nodes)}
    targets = tuple(dict.fromkeys(n for n in names if n in specs and n != gone))
    if gone is not None:
        _say(say, f"{gone} cannot be reached: whatever of the job is left on it stays there")
    if not targets:
        return []
    kcfg = replace(rcfg, nodes=tuple(specs[n] for n in targets))
    with Cluster(kcfg.nodes, kcfg.ssh) as cluster:
        done = kill_job(kcfg, cluster, on_event=say, only=(old.run_id, coord_run(old)))
        left = preflight(kcfg, cluster)
    dirty = [f"{n}: {e}" for n, e in done.errors.items()]
    dirty += [f"{n}: {r.summary()}" for n, r in done.succeeded.items() if not r.clean]
    others = [n for n, p in left.succeeded.items() if p.procs and n not in done.errors]
    dirty += [f"{n}: another run of {cfg.job} runs there, left alone" for n in others]
    _say(say, f"stopped the old attempt on {', '.join(targets)}" if not dirty
         else f"the old attempt may be left: {'; '.join(dirty)[:300]}")  # fmt: skip
    bad = [*done.errors, *(n for n, r in done.succeeded.items() if not r.clean), *others]
    return list(dict.fromkeys(bad))


def _spare_nodes(cfg: JobConfig, first: RunRecord) -> list[NodeRecord]:
    """The config's spares, at the hosts the launch noted (else the config's)."""
    noted = spares_of(first)
    return [noted.get(s.name) or NodeRecord(s.name, s.host, -1, "", "", "") for s in cfg.spares]


def _by_rank(nodes: Sequence[NodeRecord]) -> list[NodeRecord]:
    return sorted(nodes, key=lambda n: n.rank)


def _end(latest: RunRecord, why: str, cause: str) -> None:
    def change(r: RunRecord) -> None:
        if r.status.is_live:
            r.status, r.cause = RunStatus.TORN_DOWN, r.cause or cause
        r.note(LOST_NOTE, why=why)

    latest.update(change)


def _ssh(cfg: JobConfig) -> list[str]:
    from mntui.sessions.ssh.openssh import oneshot_argv

    return oneshot_argv(cfg.ssh)


def _say(say: EventSink, text: str) -> None:
    say(Event(None, None, Phase.NOTICE, text))
