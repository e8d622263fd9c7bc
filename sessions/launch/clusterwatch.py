"""Starting the cluster's watch with the job, and reading what it wrote (issue 30).

With `watch.where: cluster` each node's start script also writes the node's watch file
and the run's secret (0600, from the script's heredoc on SSH's stdin: never a command
line), ships the sentinel bundle if the node lacks this version, and starts the node's
sentinel detached, with the one that keeps it up (on the main the coordinator, started
first; on a worker its guard, after it), each tagged `MNTUI_RUN=<tag>/<role>`
(sentinel, coord, guard) so `mntui kill` finds them and a poll never counts them. The
launch then waits until every sentinel has connected to the coordinator, or stops
everything it started.

Every node runs its watchers on the interpreter the one rule finds there
(sentinelship.sentinel_python: the bare `python3` 3.9 or later, else the one the job's
`setup` provides); the preflight asks it first, and a node where none fits refuses the
launch before anything starts, in one line naming the node and the fix (exit 2): a run
is never watched by the cluster on some nodes and not on others, and nothing of the
watch runs on this machine.
"""

from __future__ import annotations

import json
import secrets
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from mntui.sessions.config import JobConfig, WatchWhere
from mntui.sessions.errors import LaunchError
from mntui.sessions.node.proc.attemptscript import TEMPLATE
from mntui.sessions.node.rules.judging import Rules
from mntui.sessions.node.rules.restarts import RestartRules
from mntui.sessions.node.wire.watchcfg import WatchConfig, to_json
from mntui.sessions.notify import for_coordinator
from mntui.sessions.procs import TAG_VAR
from mntui.sessions.ssh import Node

from .board import BoardView, read_board
from .sentinelship import MIN_PYTHON, bundle, remote_path, sentinel_python, ship_script

CONFIRM = 10.0  # seconds for every sentinel to reach the coordinator after the start
START_GRACE = 120.0  # past the main's ready_timeout: a node whose sentinel never came
HEARTBEAT = 1.0


NAMED = 5  # nodes a refusal names for one reason; the others are counted
HERE_LINE = "watched from this machine: keep it on"  # `where: here`, until it goes
NEED = ".".join(map(str, MIN_PYTHON))
FIX = (
    f"install python3 {NEED} or later on the node, or let its `setup` provide one; "
    "`mntui launch --no-watch` runs the job unwatched"
)


def new_secret() -> str:
    return secrets.token_hex(32)


def python_unfit(version: tuple[int, int] | None, from_setup: bool = False) -> str | None:
    """Why no sentinel can run on a node whose bare python3 is `version`
    (sentinelship.parse_python) and whose `setup` gives one that fits (`from_setup`);
    None when one can. The doctor and the launch say the same words."""
    if from_setup or (version is not None and version >= MIN_PYTHON):
        return None
    bare = f"python3 {version[0]}.{version[1]}" if version is not None else "no python3"
    return f"{bare} on the login PATH and none {NEED} or later after `setup`"


def unfit_reason(unfit: Mapping[str, str]) -> str:
    """`node1, node4: no python3 ...`: one line however many nodes, the nodes named by
    reason, up to NAMED each."""
    by_why: dict[str, list[str]] = {}
    for node, why in unfit.items():
        by_why.setdefault(why, []).append(node)
    parts = []
    for why, nodes in by_why.items():
        more = f" and {len(nodes) - NAMED} more" if len(nodes) > NAMED else ""
        parts.append(f"{', '.join(nodes[:NAMED])}{more}: {why}")
    return "; ".join(parts)


def refusal(unfit: Mapping[str, str]) -> str:
    """The launch's one line when a node can run no sentinel (exit 2): the nodes, why,
    and the fix."""
    return (
        f"{unfit_reason(unfit)}: the cluster's watch cannot run there; nothing was started ({FIX})"
    )


def watched_here(cfg: JobConfig) -> JobConfig:
    """The config as `watch.where: here` has it: no sentinel, no coordinator, no watch
    port; its restarts are this machine's supervisor's."""
    return replace(cfg, watch=replace(cfg.watch, where=WatchWhere.HERE))


def watch_config(
    cfg: JobConfig,
    run_id: str,
    node: str,
    tag: str,
    session: str,
    nodes: tuple[str, ...],
    master_addr: str,
    nonce: str | None,
    restart_base: int = 0,
) -> WatchConfig:
    """`nonce`: the restart template's (None: no restart on the cluster); `restart_base`:
    MNTUI_RESTART_COUNT of the launch's attempt."""
    w, r, ready = cfg.watch, cfg.restart, cfg.launch
    restart = RestartRules(
        r.max, r.backoff, r.backoff_max, r.on, r.exit_codes, r.not_on, r.reset_after
    )
    port = cfg.watch_port
    assert port is not None
    return WatchConfig(
        job=cfg.job,
        run=run_id,
        node=node,
        tag=tag,
        session=session,
        coord_host=master_addr,
        coord_port=port,
        rules=Rules(
            frozen_after=w.frozen_after,
            unreachable_after=w.unreachable_after,
            on_failure=str(w.on_failure),
            on_stall=str(w.on_stall),
            stall_after=w.stall_after,
        ),
        nodes=nodes,
        interval=w.node_interval,
        heartbeat=HEARTBEAT,
        grace=cfg.grace,
        # the coordinator's own port closes when it exits, after the kill it runs
        ports=tuple(p for p in cfg.all_ports if p != port) if node == nodes[0] else (),
        start_grace=cfg.launch.ready_timeout + START_GRACE,  # workers start once it is ready
        progress_pattern=cfg.progress_pattern,
        restart=restart if nonce is not None else None,
        attempt_nonce=nonce,
        restart_base=restart_base,
        master_port=cfg.master_port,
        ready=str(ready.ready),  # a restart's workers wait for its main as the launch's do
        ready_pattern=ready.ready_pattern if ready.ready == "log" else None,
        ready_delay=ready.ready_delay,
        ready_timeout=ready.ready_timeout,
        sample_every=w.sample_every,  # the straggler's samples and rules (node/coord/slowness.py)
        on_slow=str(w.on_slow),
        slow_fraction=w.slow_fraction,
        slow_after=w.slow_after,
        nprocs=tuple({s.name: cfg.nproc(s) for s in cfg.nodes}.get(n, 1) for n in nodes),
        notify=for_coordinator(cfg.notify) if node == nodes[0] else None,  # the webhook: a secret
    )


@dataclass(frozen=True)
class Template:
    """A node's restarts, rendered at launch for the coordinator: one start with the
    tokens attemptscript.py fills in for attempt k (its run id, count, a spare's rank)."""

    tag: str  # <job>/<run token>/<node>
    run_dir: str  # relative to the node's $HOME, with the run token
    start_script: str


def watch_block(wc: WatchConfig, secret: str, enter: str, template: Template | None = None) -> str:
    """Shell run after the node's tmux session started (same script, `$d` its run dir):
    the files, the restarts' template, the interpreter (the one rule, `enter` the job's
    environment: sentinelship.sentinel_python), the bundle, then the coordinator (main)
    and the sentinel, each printing `SENTINEL <pid> ...` once it is up."""
    b = bundle()
    eof = "__MNTUI_WATCH_" + secrets.token_hex(8) + "__"
    pyz = f'"$HOME"/{shlex.quote(remote_path(b.sha))}'
    # each node's two watchers keep each other up (node/proc/respawn.py): the main's sentinel
    # and coordinator, a worker's sentinel and guard (started after the one it keeps)
    starts = [("coord", "coord"), ("sentinel", "run")]
    starts = starts if wc.is_main else [("sentinel", "run"), ("guard", "guard")]
    lines = [
        "umask 077",
        f"cat >\"$d/watch.json\" <<'{eof}'",
        to_json(wc),
        eof,
        f"cat >\"$d/secret\" <<'{eof}'",
        secret,
        eof,
    ]
    if template is not None:
        run = template.tag.split("/")[1]
        info = json.dumps({"run": run, "tag": template.tag, "run_dir": template.run_dir})
        lines += ['mkdir -p "$d/attempts"']
        lines += [f"cat >\"$d/attempts/{TEMPLATE}.sh\" <<'{eof}'",
                  template.start_script.rstrip("\n"), eof]  # fmt: skip
        lines += [f"cat >\"$d/attempts/{TEMPLATE}.json\" <<'{eof}'", info, eof]
    lines += [
        # the interpreter, by the preflight's rule: a node changed since is said, not run
        sentinel_python(enter),
        'py=$(mntui_py); [ -n "$py" ] || { echo "SENTINEL_FAILED no python3 '
        f'{NEED} or later on this node, nor from setup"; exit 1; }}',
        'printf \'%s\\n\' "$py" >"$d/python"  # the app\'s stream runs on it too',
        ship_script(b, '"$py"'),
    ]
    for role, verb in starts:
        tag = shlex.quote(f"{wc.tag}/{role}")
        lines.append(  # its one line on stderr says why (a port in use, a bad file)
            f'if ! err=$({TAG_VAR}={tag} "$py" -I -S {pyz} {verb} "$d" 2>&1 >/dev/null); then '
            f"printf 'SENTINEL_FAILED the {role} did not start: %s\\n' "
            '"$(printf %s "$err" | tail -n 1 | cut -c1-200)"; exit 1; fi'
        )
    return "\n".join(lines) + "\n"


def failure(text: str) -> str | None:
    """The start script's own word on a watch that did not start, if it said one."""
    for line in text.splitlines():
        if line.startswith("SENTINEL_FAILED "):
            return line.removeprefix("SENTINEL_FAILED ")[:200]
        words = line.split(" ", 3)
        if len(words) == 4 and words[0] == "SENTINEL_BUNDLE" and words[2] == "failed":
            return f"could not ship the sentinel: {words[3][:200]}"
    return None


def confirm(node: Node, main_run_dir: str, nnodes: int, deadline: float = CONFIRM) -> BoardView:
    """Waits until every sentinel has connected, or the coordinator has already decided
    (a job that fails in its first second: its sentinels came, reported and were torn
    down before the first read here); LaunchError (the launch then stops what it
    started) when neither within `deadline` seconds."""
    end = time.monotonic() + deadline
    view = BoardView(None, None, False)
    while time.monotonic() < end:
        view = read_board(node, main_run_dir)
        if view.connected() >= nnodes or view.decision is not None:
            return view
        time.sleep(0.2)  # polling the main's board, bounded by `end`
    got = view.connected()
    raise LaunchError(
        f"the cluster's watch did not come up: {got} of {nnodes} sentinel(s) reached the "
        f"coordinator in {deadline:.0f}s (a firewall between the nodes and watch.port?); "
        "`mntui launch --no-watch` runs the job unwatched",
        json.dumps(view.status)[:2000] if view.status else "",
    )
