"""The spares' sentinels, started at launch so the cluster can restart onto them.

Why at launch and not at the swap: the coordinator swaps a spare in while this machine
may be away, and it can only ask a sentinel that is there. So a run the cluster watches
(with restarts) starts a sentinel on each spare too, idle: it follows no attempt until
the coordinator asks it to start one, with the rank of the node it replaces, from the
template this launch left there (watchplan.py renders one; node/proc/attemptscript.py puts
the rank in). A spare that cannot be prepared (unreachable, no interpreter 3.9, quarantined
now) takes no rank: the launch goes on and says so in one line; the coordinator only
swaps in spares whose sentinels are connected. An idle spare's sentinel leaves when the
coordinator tells the sentinels to stop (the chain ended, a kill), or on its own once
the coordinator is gone for `unreachable_after`: it has nothing to kill.
"""

from __future__ import annotations

from collections.abc import Callable

from mntui.sessions.config import JobConfig
from mntui.sessions.events import Event, Phase
from mntui.sessions.history import active_quarantines
from mntui.sessions.results import NodeError
from mntui.sessions.ssh import Cluster, Node

from . import clusterwatch
from .nodeplan import NodePlan
from .plan import Plan

EventSink = Callable[[Event], None]


def _start(node: Node, sp: NodePlan) -> None:
    res = node.run(sp.start_script)
    said = clusterwatch.failure(res.stdout)
    if said is not None:
        raise NodeError(node.name, said)
    if not res.ok:
        raise NodeError(node.name, (res.stderr or res.stdout).strip()[-300:] or "it failed")


def start_spares(cfg: JobConfig, plan: Plan, on_event: EventSink) -> list[str]:
    """Starts the spares' sentinels, all at once; the spares ready to take a rank. Never
    raises for a spare: the run is launched, a spare is a spare."""
    if not plan.spares:
        return []
    held = active_quarantines()
    wanted = [s for s in plan.spares if s.node not in held]
    for s in plan.spares:
        if s.node in held:
            _say(on_event, s.node, f"quarantined ({held[s.node].why}): it takes no rank")
    specs = [s for s in cfg.spares if s.name in {w.node for w in wanted}]
    if not specs:
        return []
    with Cluster(specs, cfg.ssh) as cluster:
        reached = cluster.connect()
        names = [w.node for w in wanted if reached[w.node].ok]
        done = cluster.map(lambda node: _start(node, plan_of(wanted, node.name)), names)
    ready = []
    for w in wanted:
        if w.node not in done.succeeded:
            why = reached.errors.get(w.node) or done.errors.get(w.node) or "it did not start"
            _say(on_event, w.node, f"takes no rank in the cluster's restarts: {why[:200]}")
        else:
            ready.append(w.node)
            _say(on_event, w.node, "its sentinel is up: the cluster may restart onto it")
    return ready


def plan_of(spares: list[NodePlan], name: str) -> NodePlan:
    return next(s for s in spares if s.node == name)


def _say(on_event: EventSink, node: str, text: str) -> None:
    on_event(Event(None, None, Phase.NOTICE, f"spare {node}: {text}"))
