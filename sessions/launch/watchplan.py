"""What the cluster's watch adds to a launch plan: each node's sentinel, the attempts
the coordinator may restart into, and the spares it may swap in for a worker.

Why at launch: the coordinator restarts the job while this machine may be away, so
every attempt's start is rendered now, on every node that may run it (their run ids
chosen now, in the chain's order), and a spare carries each attempt's script for any
worker rank, a token where the rank goes (spareattempt.py puts the rank it is given).
The stack capture script rides along (each attempt's tag and run dir its arguments;
the nonce, one per launch, in the watch file).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import replace

from mntui.sessions.config import JobConfig, NodeSpec
from mntui.sessions.config.jobconfig import MAX_CLUSTER_RESTARTS
from mntui.sessions.node.placing import QuarantineRule
from mntui.sessions.node.watchcfg import WatchConfig
from mntui.sessions.procs import run_dir_word

from .clusterwatch import LaterAttempt, new_secret, watch_block, watch_config
from .nodeplan import NodePlan, new_run_id, node_plan, node_plans
from .stackscript import stack_files


def watched(
    cfg: JobConfig,
    run_id: str,
    master_addr: str,
    extra_env: Mapping[str, Mapping[str, str]] | None,
    restart_count: int,
    nodes: list[NodePlan],
    later: tuple[str, ...],
) -> tuple[list[NodePlan], list[NodePlan]]:
    """`nodes` each starting its sentinel too, with the attempts `later` (run ids) it
    may be restarted into; and the spares' starts: an idle sentinel each."""
    secret = new_secret()  # only ever on the nodes
    budget = cfg.watch.capture_budget
    nonce = secrets.token_hex(8) if budget > 0 else None
    plans = [node_plans(cfg, r, master_addr, extra_env, restart_count + k + 1)
             for k, r in enumerate(later)]  # fmt: skip
    names = tuple(n.node for n in nodes)
    stacks = stack_files(budget, nonce) if nonce is not None else ""
    free = cluster_spares(cfg) if later else ()

    def watch(n: NodePlan, mine: list[LaterAttempt], token: str | None = None) -> str:
        wc = watch_config(cfg, run_id, n.node, n.tag, n.session, names, master_addr, len(later))
        wc = replace(wc, capture_budget=budget, stacks_nonce=nonce, rank_token=token)
        return stacks + watch_block(spare_fields(wc, cfg, free), secret, mine)

    out = list(nodes)
    for i, n in enumerate(out):
        mine = [LaterAttempt(p[i].tag, p[i].run_dir, p[i].start_script) for p in plans]
        out[i] = replace(n, start_script=n.start_script + watch(n, mine))
    spares: list[NodePlan] = []
    for spec in free:
        token = f"@@MNTUI_RANK_{secrets.token_hex(8)}@@"  # spareattempt.py puts the rank
        idle = node_plan(cfg, spec, run_id, master_addr, extra_env, 0, -1)
        mine = [_spare_attempt(cfg, spec, r, master_addr, extra_env, restart_count + k + 1,
                               token) for k, r in enumerate(later)]  # fmt: skip
        start = f'set -e\nd={run_dir_word(idle.run_dir)}\nmkdir -p -m 700 "$d"\n'
        spares.append(replace(idle, start_script=start + watch(idle, mine, token)))
    return out, spares


def cluster_spares(cfg: JobConfig) -> tuple[NodeSpec, ...]:
    """The spares the coordinator may swap in: the config's, but for those a launch
    already routed into the nodes (a quarantined node's place)."""
    used = {n.name for n in cfg.nodes}
    return tuple(s for s in cfg.spares if s.name not in used)


def spare_fields(wc: WatchConfig, cfg: JobConfig, spares: tuple[NodeSpec, ...]) -> WatchConfig:
    """`wc` with what every watch file of the run says of its spares and quarantines."""
    q = cfg.restart.quarantine_after
    rule = None if q is None else QuarantineRule(q.count, q.within, q.hold)
    names, nprocs = tuple(s.name for s in spares), tuple(cfg.nproc(s) for s in spares)
    return replace(wc, spares=names, spare_nprocs=nprocs, quarantine=rule)


def _spare_attempt(
    cfg: JobConfig,
    spec: NodeSpec,
    run_id: str,
    master_addr: str,
    extra_env: Mapping[str, Mapping[str, str]] | None,
    k: int,
    token: str,
) -> LaterAttempt:
    """Attempt `k` on a spare, for whichever worker rank it takes: `token` stands where
    the rank goes (its characters need no quoting: the rank replaces it as it is)."""
    p = node_plan(cfg, spec, run_id, master_addr, extra_env, k, token)
    return LaterAttempt(p.tag, p.run_dir, p.start_script)


def cluster_attempts(cfg: JobConfig) -> tuple[str, ...]:
    """The run ids of the restarts the cluster's coordinator may start (none when this
    machine supervises the restarts), distinct and in the chain's order."""
    if cfg.watch_port is None:
        return ()
    ids: list[str] = []
    while len(ids) < min(cfg.restart.max, MAX_CLUSTER_RESTARTS):
        rid = new_run_id()
        if rid not in ids:
            ids.append(rid)
    return tuple(ids)
