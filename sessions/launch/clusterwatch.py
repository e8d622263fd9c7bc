"""Starting the cluster's watch with the job, and reading what it wrote (issue 30).

With `watch.where: cluster` each node's start script also writes the node's watch file
and the run's secret (0600, from the script's heredoc on SSH's stdin: never a command
line), ships the sentinel bundle if the node lacks this version, and starts the node's
sentinel (and, on the main, the coordinator first) detached, each tagged
`MNTUI_RUN=<tag>/sentinel|coord` so `mntui kill` finds them and a poll never counts
them. The launch then waits until every sentinel has connected to the coordinator, or
stops everything it started: a run is watched by the cluster or not launched.
"""

from __future__ import annotations

import json
import secrets
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mntui.sessions.config import JobConfig
from mntui.sessions.errors import LaunchError
from mntui.sessions.node.judging import Rules
from mntui.sessions.node.restarts import RestartRules
from mntui.sessions.node.watchcfg import WatchConfig, to_json
from mntui.sessions.procs import TAG_VAR, run_dir_word
from mntui.sessions.runs import RunRecord
from mntui.sessions.ssh import Node

from .sentinelship import bundle, remote_path, ship_script

CONFIRM = 10.0  # seconds for every sentinel to reach the coordinator after the start
START_GRACE = 120.0  # past the main's ready_timeout: a node whose sentinel never came
STALE = 10.0  # seconds: a coordinator that wrote no status for this long is not watching
HEARTBEAT = 1.0


def new_secret() -> str:
    return secrets.token_hex(32)


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
    starts = [("coord", "coord")] if wc.is_main else []
    starts.append(("sentinel", "run"))
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
        "python3 -I -S -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null || "
        "{ echo 'SENTINEL_FAILED no python3 3.9 or later on this node'; exit 1; }",
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


@dataclass(frozen=True)
class BoardView:
    """What the coordinator last wrote: its status, and its decision if it made one."""

    status: dict[str, Any] | None
    decision: dict[str, Any] | None
    alive: bool  # the coordinator's pid is a live process on the main
    journal: tuple[dict[str, Any], ...] = ()  # its last lines (up to 256 KiB), oldest first
    chain: dict[str, Any] | None = None  # coord/chain.json: the attempts it ran
    now: float | None = None  # the main's clock when it answered

    @property
    def fresh(self) -> bool:
        """The coordinator wrote its status within STALE seconds of the main's clock: a
        pid that answers `kill -0` may be stopped (SIGSTOP) or another process's."""
        at = (self.status or {}).get("at")
        if not isinstance(at, (int, float)) or self.now is None:
            return False
        return self.now - at <= STALE

    def connected(self) -> int:
        nodes = (self.status or {}).get("nodes") or {}
        return sum(1 for v in nodes.values() if isinstance(v, dict) and v.get("connected"))


def board_dir(record: RunRecord) -> str:
    """The coordinator's run dir on the main: the chain's first attempt's, which every
    restart on the cluster keeps (the main does not move)."""
    parts = record.nodes[0].run_dir.split("/")  # .mntui/runs/<job>/<run>/<node>
    parts[-2] = record.chain or record.run_id
    return "/".join(parts)


def coord_alive(run_dir: str) -> str:
    """Shell: succeeds while the run's coordinator lives. Its pid file is not enough: a
    zombie (an init that does not reap) or a reused pid answers `kill -0`; so the process
    must be no zombie and carry the coordinator's own tag."""
    parts = run_dir.split("/")  # .mntui/runs/<job>/<run>/<node>
    entry = shlex.quote(f"{TAG_VAR}={'/'.join(parts[-3:])}/coord")
    return f"""mntui_coord_alive() {{
  _p=$(head -c 20 "$d/coord.pid" 2>/dev/null)
  case "$_p" in '' | *[!0-9]*) return 1 ;; esac
  _s=$(sed 's/.*) //' "/proc/$_p/stat" 2>/dev/null | cut -d' ' -f1)
  case "$_s" in '' | Z | X) return 1 ;; esac
  tr '\\0' '\\n' <"/proc/$_p/environ" 2>/dev/null | grep -qxF -- {entry}
}}"""


def board_script(run_dir: str) -> str:
    d = run_dir_word(run_dir)
    return f"""d={d}
{coord_alive(run_dir)}
for f in status decision chain; do
  printf 'FILE %s ' "$f"; head -c 262144 "$d/coord/$f.json" 2>/dev/null | base64 -w0; echo
done
printf 'FILE journal '; tail -c 262144 "$d/coord/journal.jsonl" 2>/dev/null | base64 -w0; echo
echo "NOW $(date +%s)"
if mntui_coord_alive; then echo ALIVE yes; else echo ALIVE no; fi
"""


def parse_board(text: str) -> BoardView:
    import base64

    files: dict[str, dict[str, Any] | None] = {"status": None, "decision": None, "chain": None}
    alive = False
    now: float | None = None
    journal: tuple[dict[str, Any], ...] = ()
    for line in text.splitlines():
        words = line.split(" ")
        if len(words) == 3 and words[0:2] == ["FILE", "journal"] and words[2]:
            journal = parse_journal(words[2])
        elif len(words) == 3 and words[0] == "FILE" and words[1] in files and words[2]:
            try:
                data = json.loads(base64.b64decode(words[2], validate=True))
            except (ValueError, TypeError, RecursionError):
                data = None
            files[words[1]] = data if isinstance(data, dict) else None
        elif line == "ALIVE yes":
            alive = True
        elif len(words) == 2 and words[0] == "NOW" and words[1].isdigit() and len(words[1]) < 12:
            now = float(words[1])
    return BoardView(files["status"], files["decision"], alive, journal, files["chain"], now)


def parse_journal(b64: str) -> tuple[dict[str, Any], ...]:
    """The journal's lines that parse as ours; the first, cut by `tail -c`, does not."""
    import base64

    try:
        raw = base64.b64decode(b64, validate=True).decode("utf-8", "replace")
    except ValueError:
        return ()
    out = []
    for line in raw.splitlines():
        try:
            item = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(item, dict) and isinstance(item.get("t"), (int, float)):
            out.append(item)
    return tuple(out)


def read_board(node: Node, main_run_dir: str, timeout: float = 10.0) -> BoardView:
    res = node.run(board_script(main_run_dir), timeout=timeout)
    return parse_board(res.stdout)


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
