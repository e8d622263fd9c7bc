"""Starting the cluster's watch with the job, and reading what it wrote (issue 30).

With `watch.where: cluster` each node's start script also writes the node's watch file
and the run's secret (0600, from the script's heredoc on SSH's stdin: never a command
line), ships the sentinel bundle if the node lacks this version, and starts the node's
sentinel detached, with the one that keeps it up (on the main the coordinator, started
first; on a worker its guard, after it), each tagged `MNTUI_RUN=<tag>/<role>`
(sentinel, coord, guard) so `mntui kill` finds them and a poll never counts them. The
launch then waits until every sentinel has connected to the coordinator, or stops
everything it started.

One way to watch per run, chosen before anything of it starts: a node whose bare
`python3` cannot run a sentinel (the preflight asks it, with the doctor's probe) makes
the whole run watched from this machine, as `where: here`, said in one line; a run is
never watched by the cluster on some nodes and from here on others.
"""

from __future__ import annotations

import json
import secrets
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from mntui.sessions.config import JobConfig, WatchWhere
from mntui.sessions.errors import LaunchError
from mntui.sessions.node.judging import Rules
from mntui.sessions.node.restarts import RestartRules
from mntui.sessions.node.watchcfg import WatchConfig, to_json
from mntui.sessions.notify import for_coordinator
from mntui.sessions.procs import TAG_VAR
from mntui.sessions.ssh import Node

from .board import BoardView, read_board
from .sentinelship import MIN_PYTHON, bundle, remote_path, sentinel_usable, ship_script

CONFIRM = 10.0  # seconds for every sentinel to reach the coordinator after the start
START_GRACE = 120.0  # past the main's ready_timeout: a node whose sentinel never came
HEARTBEAT = 1.0


NAMED = 5  # nodes a fallback line names for one reason; the others are counted
HERE_LINE = "watched from this machine: keep it on"
HERE_NOTE = "watched-here"  # run record note: why a `where: cluster` run is watched here


def new_secret() -> str:
    return secrets.token_hex(32)


def python_unfit(version: tuple[int, int] | None) -> str | None:
    """Why a node's bare python3 (sentinelship.parse_python) cannot run a sentinel; None
    when it can. The doctor and the launch say the same words."""
    if sentinel_usable(version):
        return None
    need = ".".join(map(str, MIN_PYTHON))
    if version is None:
        return f"no python3 {need} or later"
    return f"python3 {version[0]}.{version[1]}, not {need} or later"


def unfit_nodes(versions: Mapping[str, tuple[int, int] | None]) -> dict[str, str]:
    """node -> why its sentinel cannot run, for the nodes that cannot."""
    return {n: why for n, v in versions.items() if (why := python_unfit(v)) is not None}


def fallback_reason(unfit: Mapping[str, str]) -> str:
    """`node1, node4: no python3 3.9 or later`: one line however many nodes, the nodes
    named by reason, up to NAMED each."""
    by_why: dict[str, list[str]] = {}
    for node, why in unfit.items():
        by_why.setdefault(why, []).append(node)
    parts = []
    for why, nodes in by_why.items():
        more = f" and {len(nodes) - NAMED} more" if len(nodes) > NAMED else ""
        parts.append(f"{', '.join(nodes[:NAMED])}{more}: {why}")
    return "; ".join(parts)


def fallback_line(reason: str) -> str:
    return f"{reason}: the cluster cannot watch this run; it is {HERE_LINE}"


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
    attempts: int,
) -> WatchConfig:
    w, r = cfg.watch, cfg.restart
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
        restart=restart if attempts else None,
        attempts=attempts,
        master_port=cfg.master_port,
        ready_timeout=cfg.launch.ready_timeout,
        sample_every=w.sample_every,  # the straggler's samples and rules (node/slowness.py)
        on_slow=str(w.on_slow),
        slow_fraction=w.slow_fraction,
        slow_after=w.slow_after,
        nprocs=tuple({s.name: cfg.nproc(s) for s in cfg.nodes}.get(n, 1) for n in nodes),
        notify=for_coordinator(cfg.notify) if node == nodes[0] else None,  # the webhook: a secret
    )


@dataclass(frozen=True)
class LaterAttempt:
    """A restart's start on one node, rendered at launch for the coordinator."""

    tag: str  # <job>/<run>/<node>
    run_dir: str  # relative to the node's $HOME
    start_script: str


def watch_block(wc: WatchConfig, secret: str, later: Sequence[LaterAttempt] = ()) -> str:
    """Shell run after the node's tmux session started (same script, `$d` its run dir):
    the files, the restarts' start scripts, the bundle, then the coordinator (main) and
    the sentinel, each printing `SENTINEL <pid> ...` once it is up."""
    b = bundle()
    eof = "__MNTUI_WATCH_" + secrets.token_hex(8) + "__"
    pyz = f'"$HOME"/{shlex.quote(remote_path(b.sha))}'
    # each node's two watchers keep each other up (node/respawn.py): the main's sentinel
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
    if later:
        lines.append('mkdir -p "$d/attempts"')
    for k, np in enumerate(later, 1):
        info = json.dumps({"run": np.tag.split("/")[1], "tag": np.tag, "run_dir": np.run_dir})
        lines += [f"cat >\"$d/attempts/{k}.sh\" <<'{eof}'", np.start_script.rstrip("\n"), eof]
        lines += [f"cat >\"$d/attempts/{k}.json\" <<'{eof}'", info, eof]
    lines += [
        # the preflight chose the cluster's watch: a python3 changed since is said, not run
        f"python3 -I -S -c 'import sys; sys.exit(sys.version_info < {MIN_PYTHON})' "
        "2>/dev/null || { echo 'SENTINEL_FAILED no python3 3.9 or later on this node'; exit 1; }",
        ship_script(b),
    ]
    for role, verb in starts:
        tag = shlex.quote(f"{wc.tag}/{role}")
        lines.append(  # its one line on stderr says why (a port in use, a bad file)
            f'if ! err=$({TAG_VAR}={tag} python3 -I -S {pyz} {verb} "$d" 2>&1 >/dev/null); then '
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
    """Waits until every sentinel has connected; LaunchError (the launch then stops what
    it started) when they have not within `deadline` seconds."""
    end = time.monotonic() + deadline
    view = BoardView(None, None, False)
    while time.monotonic() < end:
        view = read_board(node, main_run_dir)
        if view.connected() >= nnodes:
            return view
        if view.decision is not None:
            break
        time.sleep(0.2)  # polling the main's board, bounded by `end`
    got = view.connected()
    raise LaunchError(
        f"the cluster's watch did not come up: {got} of {nnodes} sentinel(s) reached the "
        f"coordinator in {deadline:.0f}s (a firewall between the nodes and watch.port?); "
        "`watch.where: here` watches from this machine instead",
        json.dumps(view.status)[:2000] if view.status else "",
    )
