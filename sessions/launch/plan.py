"""The per-node launch plan: pure, printable (`--dry-run`) and unit-tested.

Everything a node will run is decided here, as text, before any node is touched.
Values from the config reach the shell only through `shlex.quote`; the two places
that are shell code by intent (`setup` lines and `command`) are the user's own, and
the placeholders substituted into `command` are quoted (the config refuses
`{master_addr}` inside quotes, where that quoting would be undone).
"""

from __future__ import annotations

import os
import secrets
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from textwrap import indent

from mntui.sessions.config import JobConfig, NodeSpec
from mntui.sessions.config.jobconfig import MAX_CLUSTER_RESTARTS
from mntui.sessions.node.placing import QuarantineRule
from mntui.sessions.node.watchcfg import WatchConfig
from mntui.sessions.procs import RUNS_DIR, TAG_VAR, run_dir_word, run_tag
from mntui.sessions.runs import SPARES_NOTE, NodeRecord, RunRecord

from . import tmux
from .clusterwatch import LaterAttempt, new_secret, watch_block, watch_config
from .flightenv import flight_recorder_block
from .stackscript import stack_files


def new_run_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now if now is not None else time.time()))
    return f"{stamp}-{secrets.token_hex(2)}"


def home_path(path: str) -> str:
    """A shell word for `path`, expanding a leading `~/` like a login shell would."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


@dataclass(frozen=True)
class NodePlan:
    node: str
    host: str
    rank: int
    is_main: bool
    nproc: int  # this node's processes: a hostfile's slots can differ from node to node
    session: str
    tag: str
    run_dir: str  # relative to the node's $HOME
    env: Mapping[str, str]  # what the command sees, besides the node's own environment
    command: str  # rendered, shell code
    launch_script: str  # contents of launch.sh
    start_script: str  # what runs over SSH to write the run dir and start tmux


@dataclass(frozen=True)
class Plan:
    job: str
    run_id: str
    master_addr: str
    master_port: int
    nnodes: int
    world_size: int
    nodes: tuple[NodePlan, ...]
    cluster_attempts: tuple[str, ...] = ()  # run ids the coordinator may restart into
    # the spares' starts: their sentinels, and each attempt's script for any worker rank
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


def render_command(template: str, values: Mapping[str, str | int]) -> str:
    return template.format(
        **{k: (v if isinstance(v, int) else shlex.quote(v)) for k, v in values.items()}
    )


def build_plan(
    cfg: JobConfig,
    run_id: str,
    master_addr: str,
    extra_env: Mapping[str, Mapping[str, str]] | None = None,
    *,
    restart_count: int = 0,
) -> Plan:
    """`extra_env` adds per-node variables mntui decides at launch (e.g. PATH of a local
    node). With the cluster's watch, each node's start also starts its sentinel, and
    carries the start scripts of the attempts the coordinator may relaunch (their run
    ids chosen now: the coordinator relaunches while this machine may be away), and the
    stack capture script its sentinel runs before a hang's kill (each attempt's tag and
    run dir its arguments; the nonce, one per launch, in the watch file)."""
    nodes = _node_plans(cfg, run_id, master_addr, extra_env, restart_count)
    later = cluster_attempts(cfg)
    spares: list[NodePlan] = []
    if cfg.watch_port is not None:
        secret = new_secret()  # only ever on the nodes
        budget = cfg.watch.capture_budget
        nonce = secrets.token_hex(8) if budget > 0 else None
        plans = [_node_plans(cfg, r, master_addr, extra_env, restart_count + k + 1)
                 for k, r in enumerate(later)]  # fmt: skip
        names = tuple(n.node for n in nodes)
        stacks = stack_files(budget, nonce) if nonce is not None else ""
        free = cluster_spares(cfg) if later else ()

        def watched(n: NodePlan, mine: list[LaterAttempt], token: str | None = None) -> str:
            wc = watch_config(cfg, run_id, n.node, n.tag, n.session, names, master_addr, len(later))
            wc = replace(wc, capture_budget=budget, stacks_nonce=nonce, rank_token=token)
            return stacks + watch_block(spare_fields(wc, cfg, free), secret, mine)

        for i, n in enumerate(nodes):
            mine = [LaterAttempt(p[i].tag, p[i].run_dir, p[i].start_script) for p in plans]
            nodes[i] = replace(n, start_script=n.start_script + watched(n, mine))
        for spec in free:
            token = f"@@MNTUI_RANK_{secrets.token_hex(8)}@@"  # spareattempt.py puts the rank
            idle = _node_plan(cfg, spec, run_id, master_addr, extra_env, 0, -1)
            mine = [_spare_attempt(cfg, spec, r, master_addr, extra_env, restart_count + k + 1,
                                   token) for k, r in enumerate(later)]  # fmt: skip
            start = f'set -e\nd={run_dir_word(idle.run_dir)}\nmkdir -p -m 700 "$d"\n'
            spares.append(replace(idle, start_script=start + watched(idle, mine, token)))
    world = cfg.world_size  # the sum over the nodes: their nproc can differ
    return Plan(
        cfg.job, run_id, master_addr, cfg.master_port, len(nodes), world, tuple(nodes), later,
        tuple(spares),
    )  # fmt: skip


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
    p = _node_plan(cfg, spec, run_id, master_addr, extra_env, k, token)
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


def _node_plans(
    cfg: JobConfig,
    run_id: str,
    master_addr: str,
    extra_env: Mapping[str, Mapping[str, str]] | None,
    restart_count: int,
) -> list[NodePlan]:
    # the config keeps the main first, at rank 0
    return [
        _node_plan(cfg, spec, run_id, master_addr, extra_env, restart_count, spec.rank)
        for spec in cfg.nodes
    ]


def _node_plan(
    cfg: JobConfig,
    spec: NodeSpec,
    run_id: str,
    master_addr: str,
    extra_env: Mapping[str, Mapping[str, str]] | None,
    restart_count: int,
    rank: int | str,
) -> NodePlan:
    """`rank`: the node's, or a spare's token for the rank it will take."""
    nnodes = len(cfg.nodes)
    values: dict[str, str | int] = {
        "node_rank": rank,
        "nnodes": nnodes,
        "master_addr": master_addr,
        "master_port": cfg.master_port,
        "nproc_per_node": cfg.nproc(spec),  # this node's: torchrun's rank math needs it
        "node": spec.name,
        "restart_count": restart_count,
    }
    env = {**(extra_env or {}).get(spec.name, {}), **spec.env}
    env.update(
        {
            "NODE_RANK": str(rank),
            "NNODES": str(nnodes),
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(cfg.master_port),
            "WORLD_SIZE": str(cfg.world_size),
            "MNTUI_RESTART_COUNT": str(restart_count),
        }
    )
    env.setdefault("PYTHONUNBUFFERED", "1")  # output goes through a pipe to the log
    env.setdefault("PYTHONFAULTHANDLER", "1")  # a segfault prints the Python stack
    command = render_command(spec.command, values)
    session = tmux.session_name(cfg.job, spec.name)
    tag = run_tag(cfg.job, run_id, spec.name)
    run_dir = f"{RUNS_DIR}/{cfg.job}/{run_id}/{spec.name}"
    script = launch_script(spec, run_id, cfg.job, env, command, rank)
    return NodePlan(
        node=spec.name,
        host=spec.host,
        rank=rank if isinstance(rank, int) else -1,
        is_main=spec.name == cfg.main,
        nproc=cfg.nproc(spec),
        session=session,
        tag=tag,
        run_dir=run_dir,
        env=env,
        command=command,
        launch_script=script,
        start_script=start_script(session, tag, run_dir, script),
    )


def job_environment(spec: NodeSpec, on_missing: str, setup_stderr: str | None = None) -> str:
    """The shell that enters the job's environment, for the launch and the doctor alike:
    `cd` to the workdir first, then `setup`, in the order docs/config.md gives, so a
    relative `source .venv/bin/activate` is the workdir's venv. `on_missing` runs when
    the workdir cannot be entered. `setup_stderr`, a shell word: where setup's stderr
    goes (the doctor shows it); the group runs in this shell, so what setup exports or
    activates stays."""
    cd = f"cd -- {home_path(spec.workdir)} || {on_missing}" if spec.workdir else ":"
    setup = "\n".join(spec.setup) or ":"
    if setup_stderr is not None:
        setup = f"{{\n{setup}\n}} 2>{setup_stderr}"
    return f"{cd}\n{setup}"


def launch_script(
    spec: NodeSpec,
    run_id: str,
    job: str,
    env: Mapping[str, str],
    command: str,
    rank: int | str | None = None,
) -> str:
    """`rank`: the node's (default), or a spare's token for the rank it will take."""
    rank = spec.rank if rank is None else rank
    exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items())
    name = shlex.quote(spec.name)
    enter = job_environment(spec, "exit 97")  # not indented: a setup heredoc stays as written
    return f"""#!/usr/bin/env bash
# Written by mntui: job {job}, run {run_id}, node {spec.name}, rank {rank}.
# It runs inside tmux; output goes to the pane and, unchanged, to output.log.
set -o pipefail
run_dir=$PWD
{exports}
export MNTUI_RUN_DIR="$run_dir"
printf '[mntui] %s rank %s starting at %s\\n' {name} {rank} "$(date '+%F %T')"
{{
{enter}
{indent(flight_recorder_block(), "  ")}
{command}
}} 2>&1 | tee -a "$run_dir/output.log"
rc=${{PIPESTATUS[0]}}
printf '%s\\n' "$rc" >"$run_dir/exit_code.tmp" && mv "$run_dir/exit_code.tmp" "$run_dir/exit_code"
printf '[mntui] exited with code %s at %s\\n' "$rc" "$(date '+%F %T')"
exit "$rc"
"""


def start_script(session: str, tag: str, run_dir: str, script: str) -> str:
    eof = "__MNTUI_EOF_" + secrets.token_hex(8) + "__"
    pane_cmd = f"exec env {TAG_VAR}={shlex.quote(tag)} bash ./launch.sh"
    return f"""set -e
d={run_dir_word(run_dir)}
mkdir -p -m 700 "$d"
cat >"$d/launch.sh" <<'{eof}'
{script}{eof}
: >"$d/output.log"
{tmux.kill_session(session)} || true
{tmux.retry_server_exit(tmux.new_session(session, '"$d"', pane_cmd))}
echo STARTED "$(date +%s.%N)"
"""


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
            f"give it a worker's rank ({len(plan.cluster_attempts)} attempt script(s))"
        )
    return "\n".join(lines)
