"""What one node runs in a launch: its environment, its command, its launch.sh and the
start that writes them there and opens its tmux session. Pure, printable (`--dry-run`).

Everything a node will run is decided here, as text, before any node is touched.
Values from the config reach the shell only through `shlex.quote`; the two places
that are shell code by intent (`setup` lines and `command`) are the user's own, and
the placeholders substituted into `command` are quoted (the config refuses
`{master_addr}` inside quotes, where that quoting would be undone).
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from textwrap import indent

from mntui.sessions.config import JobConfig, NodeSpec
from mntui.sessions.node.proc.members import cgroup_name
from mntui.sessions.procs import RUNS_DIR, TAG_VAR, run_dir_word, run_tag

from . import tmux
from .flightenv import flight_recorder_block


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


def render_command(template: str, values: Mapping[str, str | int]) -> str:
    return template.format(
        **{k: (v if isinstance(v, int) else shlex.quote(v)) for k, v in values.items()}
    )


def node_plans(
    cfg: JobConfig,
    run_id: str,
    master_addr: str,
    extra_env: Mapping[str, Mapping[str, str]] | None,
    restart_count: int,
) -> list[NodePlan]:
    # the config keeps the main first, at rank 0
    return [
        node_plan(cfg, spec, run_id, master_addr, extra_env, restart_count, spec.rank)
        for spec in cfg.nodes
    ]


def node_plan(
    cfg: JobConfig,
    spec: NodeSpec,
    run_id: str,
    master_addr: str,
    extra_env: Mapping[str, Mapping[str, str]] | None,
    restart_count: int | str,
    rank: int | str,
) -> NodePlan:
    """`rank`: the node's, or a spare's token for the rank it will take; `run_id` and
    `restart_count` the run's, or the tokens of a restart's template (watchplan.py):
    each token is a word no shell quoting changes, which the node replaces by digits."""
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
{cgroup_enter(run_tag(job, run_id, spec.name))}
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
{CGROUP_LEAVE}
exit "$rc"
"""


# The run's own cgroup (node/proc/members.py), where this user may make one: a cgroup v2
# directory under the one the pane runs in (root's, a systemd user scope's). Whatever the
# job does to its environment, its session or its parentage, its processes stay in it,
# and a kill finds them there. Where it cannot be made, nothing changes: the other rules.
def cgroup_enter(tag: str) -> str:
    name = shlex.quote(cgroup_name(tag))
    return f"""cg=
cg_in=$(sed -n 's/^0:://p' /proc/$$/cgroup 2>/dev/null)
cg_at='s/^[0-9]* [0-9]* [^ ]* \\/ \\([^ ]*\\) .* - cgroup2 .*/\\1/p'
cg_mnt=$(sed -n "$cg_at" /proc/$$/mountinfo 2>/dev/null | head -n 1)
cg_new="$cg_mnt${{cg_in%/}}/"{name}
if [ -n "$cg_mnt" ] && [ -n "$cg_in" ] && mkdir "$cg_new" 2>/dev/null; then
  cg=$cg_new
  if echo $$ 2>/dev/null >"$cg/cgroup.procs"; then
    printf '%s\\n' "$cg" >"$run_dir/cgroup"
  else
    rmdir "$cg" 2>/dev/null
    cg=
  fi
fi"""


# Out of it at the end, and it goes if nothing of the job is left in it (else a kill
# finds what is, and removes it then).
CGROUP_LEAVE = """if [ -n "$cg" ]; then
  echo $$ 2>/dev/null >"${cg%/*}/cgroup.procs" && rmdir "$cg" 2>/dev/null
fi"""


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
