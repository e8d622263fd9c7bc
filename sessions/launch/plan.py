"""The launch plan: pure, printable (`--dry-run`) and unit-tested.

Everything a launch will run is decided here, as text, before any node is touched:
each node's part (nodeplan.py), and with the cluster's watch each node's sentinel, the
template of the restarts the coordinator may start and the spares (watchplan.py). The
plan is what the launch carries out and the first run record is written from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from mntui.sessions.config import JobConfig
from mntui.sessions.procs import TAG_VAR
from mntui.sessions.runs import SPARES_NOTE, NodeRecord, RunRecord

from .nodeplan import NodePlan, node_plans
from .watchplan import watched


@dataclass(frozen=True)
class Plan:
    job: str
    run_id: str
    master_addr: str
    master_port: int
    nnodes: int
    world_size: int
    nodes: tuple[NodePlan, ...]
    # the spares' starts: their sentinels, and the restarts' template for any worker rank
    spares: tuple[NodePlan, ...] = ()

    @property
    def main(self) -> NodePlan:
        return self.nodes[0]

    @property
    def workers(self) -> tuple[NodePlan, ...]:
        return self.nodes[1:]

    def node(self, name: str) -> NodePlan:
        return next(n for n in self.nodes if n.node == name)


def run_record(plan: Plan, config: str) -> RunRecord:
    """The run's first record: here, not in runs.py, so the records need no plan. The
    spares the coordinator may swap in are noted (how to reach each): the record of an
    attempt that ran on one is written from it (watch/clusterchain.py)."""
    record = RunRecord(
        plan.job,
        plan.run_id,
        os.path.abspath(config),
        plan.master_addr,
        plan.master_port,
        [
            NodeRecord(n.node, n.host, n.rank, n.session, n.tag, n.run_dir, nproc=n.nproc)
            for n in plan.nodes
        ],
    )
    if plan.spares:
        spares = [{"node": s.node, "host": s.host, "session": s.session, "nproc": s.nproc}
                  for s in plan.spares]  # fmt: skip
        record.note(SPARES_NOTE, nodes=spares)
    return record


def build_plan(
    cfg: JobConfig,
    run_id: str,
    master_addr: str,
    extra_env: Mapping[str, Mapping[str, str]] | None = None,
    *,
    restart_count: int = 0,
    addrs: Mapping[str, str] | None = None,
) -> Plan:
    """`extra_env` adds per-node variables mntui decides at launch (e.g. PATH of a local
    node). With the cluster's watch, each node's start also starts its sentinel, and
    carries the template of the restarts the coordinator may start and the stack
    capture script (watchplan.py), and the spares get starts of their own. `addrs`:
    where each spare is reached (its master address, should it succeed the main)."""
    nodes = node_plans(cfg, run_id, master_addr, extra_env, restart_count)
    spares: list[NodePlan] = []
    if cfg.watch_port is not None:
        nodes, spares = watched(cfg, run_id, master_addr, extra_env, restart_count, nodes,
                                addrs or {})  # fmt: skip
    world = cfg.world_size  # the sum over the nodes: their nproc can differ
    return Plan(
        cfg.job, run_id, master_addr, cfg.master_port, len(nodes), world, tuple(nodes),
        tuple(spares),
    )  # fmt: skip


def describe(plan: Plan) -> str:
    """The human-readable dry run: every node's env, command and script."""
    lines = [
        f"job {plan.job}  run {plan.run_id}  nodes {plan.nnodes}  world size {plan.world_size}",
        f"master {plan.master_addr}:{plan.master_port}",
        "",
    ]
    for n in plan.nodes:
        role = "main" if n.is_main else "worker"
        lines += [
            f"== {n.node} (host {n.host}, rank {n.rank}, {role}) tmux session {n.session}",
            f"   run dir ~/{n.run_dir}",
            f"   nproc_per_node {n.nproc}",
            f"   tag {TAG_VAR}={n.tag}",
            "   launch.sh:",
        ]
        lines += [f"   | {line}" for line in n.launch_script.rstrip("\n").splitlines()]
        lines.append("")
    for s in plan.spares:
        lines.append(
            f"== {s.node} (host {s.host}, spare) an idle sentinel: the cluster's restarts may "
            "give it a worker's rank (one template for every attempt)"
        )
    return "\n".join(lines)
