"""What the cluster's watch adds to a launch plan: each node's sentinel, the template of
the restarts the coordinator may start, and the spares it may swap in for a worker.

Why at launch: the coordinator restarts the job while this machine may be away, so
every node's start is rendered now, once, as a template with tokens where an attempt's
own values go (its run id, its MNTUI_RESTART_COUNT, and on a spare the rank it takes),
which the node's sentinel fills in when the coordinator starts attempt k
(node/proc/attemptscript.py): as many restarts as the policy allows, whatever their number.
The stack capture script rides along (each attempt's tag and run dir its arguments;
the nonce, one per launch, in the watch file).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import replace

from mntui.sessions.config import JobConfig, NodeSpec
from mntui.sessions.node.proc.attemptscript import count_token, master_token, run_token
from mntui.sessions.node.rules.placing import QuarantineRule
from mntui.sessions.node.wire.watchcfg import WatchConfig
from mntui.sessions.notify import for_coordinator
from mntui.sessions.procs import run_dir_word

from .clusterwatch import Template, new_secret, watch_block, watch_config
from .nodeplan import NodePlan, job_environment, node_plan
from .stackscript import stack_files


def watched(
    cfg: JobConfig,
    run_id: str,
    master_addr: str,
    extra_env: Mapping[str, Mapping[str, str]] | None,
    restart_count: int,
    nodes: list[NodePlan],
    addrs: Mapping[str, str],
) -> tuple[list[NodePlan], list[NodePlan]]:
    """`nodes` each starting its sentinel too, with the template of the restarts it
    may run; and the spares' starts: an idle sentinel each. `addrs`: where each spare is
    reached: a spare that succeeds a lost main (node/chain/succession.py) listens there for
    its coordinator, and the restarts' master address follows it (the template's
    master token: node/proc/attemptscript.py)."""
    secret = new_secret()  # only ever on the nodes
    budget = cfg.watch.capture_budget
    nonce = secrets.token_hex(8) if budget > 0 else None
    restarts = secrets.token_hex(8) if cfg.restart.max > 0 else None  # the template's
    names = tuple(n.node for n in nodes)
    stacks = stack_files(budget, nonce) if nonce is not None else ""
    free = cluster_spares(cfg) if restarts is not None else ()

    def watch(n: NodePlan, spec: NodeSpec, rank: int | str) -> str:
        wc = watch_config(
            cfg, run_id, n.node, n.tag, n.session, names, master_addr, restarts, restart_count
        )
        token = rank if isinstance(rank, str) else None
        wc = replace(wc, capture_budget=budget, stacks_nonce=nonce, rank_token=token)
        later = None
        if restarts is not None:
            p = node_plan(cfg, spec, run_token(restarts), master_token(restarts), extra_env,
                          count_token(restarts), rank)  # fmt: skip
            later = Template(p.tag, p.run_dir, p.start_script)
        enter = job_environment(spec, "exit 97")
        return stacks + watch_block(spare_fields(wc, cfg, free, addrs), secret, enter, later)

    out = [replace(n, start_script=n.start_script + watch(n, cfg.node(n.node), n.rank))
           for n in nodes]  # fmt: skip
    spares: list[NodePlan] = []
    for spec in free:
        token = f"@@MNTUI_RANK_{secrets.token_hex(8)}@@"  # attemptscript.py puts the rank
        idle = node_plan(cfg, spec, run_id, master_addr, extra_env, 0, -1)
        start = f'set -e\nd={run_dir_word(idle.run_dir)}\nmkdir -p -m 700 "$d"\n'
        spares.append(replace(idle, start_script=start + watch(idle, spec, token)))
    return out, spares


def cluster_spares(cfg: JobConfig) -> tuple[NodeSpec, ...]:
    """The spares the coordinator may swap in: the config's, but for those a launch
    already routed into the nodes (a quarantined node's place)."""
    used = {n.name for n in cfg.nodes}
    return tuple(s for s in cfg.spares if s.name not in used)


def spare_fields(
    wc: WatchConfig, cfg: JobConfig, spares: tuple[NodeSpec, ...], addrs: Mapping[str, str]
) -> WatchConfig:
    """`wc` with what every watch file of the run says of its spares and quarantines:
    with every spare's address known, where each is reached; and a spare's own file
    carries the notices' rules, as the main's does (it may become the main)."""
    q = cfg.restart.quarantine_after
    rule = None if q is None else QuarantineRule(q.count, q.within, q.hold)
    names, nprocs = tuple(s.name for s in spares), tuple(cfg.nproc(s) for s in spares)
    known = tuple(addrs.get(s.name, "") for s in spares)
    where = known if all(known) else ()  # none: no spare may succeed the main
    notify = for_coordinator(cfg.notify) if wc.node in names else wc.notify
    return replace(wc, spares=names, spare_nprocs=nprocs, quarantine=rule, spare_addrs=where,
                   notify=notify)  # fmt: skip
