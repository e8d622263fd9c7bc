"""The watch file a launch writes into each node's run dir, read by the sentinel and
the coordinator there.

Why a file and not arguments: the secret and the peers must never be on a command
line (every user of the node reads /proc/*/cmdline), and a sentinel that respawns
reads the same file again. Read strictly: a launch of another mntui version, or a
hand-edited file, stops the sentinel with one line rather than a watch on wrong rules.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from dataclasses import asdict, dataclass, replace
from typing import Any

from mntui.sessions.node.files.plainfile import plain
from mntui.sessions.node.rules.judging import Rules
from mntui.sessions.node.rules.notifyhook import NotifyRules, rules_json, rules_of
from mntui.sessions.node.rules.placing import QuarantineRule
from mntui.sessions.node.rules.restarts import RestartRules
from mntui.sessions.node.rules.runid import RUN_ID

from . import epochs
from .watchfields import (
    FILE,
    NAME,
    BadWatchFile,
    get,
    judge_rules,
    nprocs,
    progress_pattern,
    readiness,
    restart_json,
    restart_rules,
    slowness,
    spares,
    stacks,
    template,
)

__all__ = ["FILE", "SECRET", "BadWatchFile", "WatchConfig", "grace_of", "load", "load_for",
           "parse", "to_json", "write_json"]  # fmt: skip
SECRET = "secret"
_TAG = re.compile(r"[A-Za-z0-9._-]{1,128}/[A-Za-z0-9._-]{1,64}/[A-Za-z0-9._-]{1,128}")


@dataclass(frozen=True)
class WatchConfig:
    job: str
    run: str
    node: str
    tag: str  # MNTUI_RUN's value for the run's processes on this node
    session: str  # the node's tmux session
    coord_host: str
    coord_port: int
    rules: Rules
    nodes: tuple[str, ...]  # every node of the run, the main first
    interval: float  # seconds between samples of the node's processes
    heartbeat: float  # a snapshot at least this often, changed or not
    grace: float  # SIGTERM to SIGKILL, as the config's kill.grace
    ports: tuple[int, ...]  # checked free after a kill on this node
    start_grace: float  # a node whose sentinel never came is unreachable after this
    progress_pattern: str | None = None  # the job's step lines (None: the default)
    restart: RestartRules | None = None  # the coordinator restarts the job (None: never)
    # the nonce of the tokens in the node's restart template, attempts/next.sh
    # (attemptscript.py); None: the launch rendered no restart
    attempt_nonce: str | None = None
    restart_base: int = 0  # MNTUI_RESTART_COUNT of the chain's attempt 0 here
    # when a restart's main is up, before its workers start: the launch's rule
    # (launch.ready: "port", "log" with ready_pattern, "delay" with ready_delay)
    master_port: int = 0
    ready: str = "port"
    ready_pattern: str | None = None  # grep -E on the main's output (readywait.py)
    ready_delay: float = 0.0
    ready_timeout: float = 600.0
    capture_budget: float = 0.0  # seconds of py-spy before a hang's kill (0: no stacks)
    stacks_nonce: str | None = None  # marks the lines of the launch's stack scripts
    sample_every: float = 0.0  # seconds between py-spy samples of the ranks (0: none)
    on_slow: str = "notify"  # a straggler named by the samples: "notify" or "kill_all"
    slow_fraction: float = 0.5  # a node below this x the median step rate ...
    slow_after: float = 120.0  # ... for this long is slow (told, never a kill)
    nprocs: tuple[int, ...] = ()  # each node's processes, as `nodes` (the GPU count's bound)
    # the spares the coordinator may swap in for a worker (placing.py), and theirs
    spares: tuple[str, ...] = ()
    spare_nprocs: tuple[int, ...] = ()
    # on a spare's own file: what its attempts' scripts carry in place of the rank they
    # take (attemptscript.py puts the rank the coordinator gave there); None on a node
    rank_token: str | None = None
    quarantine: QuarantineRule | None = None  # restart.quarantine_after (None: off)
    notify: NotifyRules | None = None  # the main's: the coordinator's notices (notifysend.py)
    # where each spare is reached (as `spares`): its master_addr, and its coordinator's
    # host, should it succeed a lost main (succession.py)
    spare_addrs: tuple[str, ...] = ()
    # the chain's epoch on this node (epochs.py: epoch.json, not the watch file): the
    # number and the node that leads it, when a successor took the main's place
    epoch: int = 0
    lead: str | None = None

    @property
    def main(self) -> str:
        """The node whose coordinator leads the chain now: the launch's main, or the
        spare that succeeded it (its epoch's)."""
        return self.lead or self.nodes[0]

    @property
    def is_main(self) -> bool:
        return self.node == self.main

    def addr(self, node: str) -> str | None:
        """Where a spare is reached (None: not a spare, or a file without addresses)."""
        return dict(zip(self.spares, self.spare_addrs)).get(node)

    @property
    def members(self) -> tuple[str, ...]:
        """Every node that may run a part of the chain: its nodes, then its spares."""
        return self.nodes + self.spares

    def nproc(self, node: str) -> int | None:
        """`node`'s processes (None: a watch file without them): at most one GPU each."""
        # two maps: one zip over both would pair the spares' counts with the run's nodes
        # when the file has `spare_nprocs` and not `nprocs`
        by = {**dict(zip(self.nodes, self.nprocs)), **dict(zip(self.spares, self.spare_nprocs))}
        return by.get(node)

    @property
    def entry(self) -> str:
        """The environment entry every process of this run on this node carries."""
        return f"MNTUI_RUN={self.tag}"


def grace_of(v: object) -> float | None:
    """A grace a request carries (seconds, 0..3600), or None for anything else."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 3600:
        return None
    return float(v)


def parse(d: object) -> WatchConfig:
    if not isinstance(d, dict) or d.get("v") != 1:
        raise BadWatchFile(f"{FILE}: not a version 1 watch file")
    nodes = d.get("nodes")
    if (
        not isinstance(nodes, list)
        or not nodes
        or not all(isinstance(n, str) and NAME.fullmatch(n) for n in nodes)
    ):
        raise BadWatchFile(f"{FILE}: nodes must be a list of node names")
    ports = d.get("ports")
    if not isinstance(ports, list) or not all(type(p) is int and 0 < p < 65536 for p in ports):
        raise BadWatchFile(f"{FILE}: ports must be a list of ports")
    cfg = WatchConfig(
        job=get(d, "job", str),
        run=get(d, "run", str),
        node=get(d, "node", str),
        tag=get(d, "tag", str),
        session=get(d, "session", str),
        coord_host=get(d, "coord_host", str),
        coord_port=get(d, "coord_port", int),
        rules=judge_rules(d.get("rules")),
        nodes=tuple(nodes),
        interval=get(d, "interval", float),
        heartbeat=get(d, "heartbeat", float),
        grace=get(d, "grace", float),
        ports=tuple(ports),
        start_grace=get(d, "start_grace", float),
        progress_pattern=progress_pattern(d.get("progress_pattern")),
        restart=restart_rules(d.get("restart")),
        **template(d),
        master_port=get(d, "master_port", int),
        **readiness(d),
        **stacks(d),
        **slowness(d),
        nprocs=nprocs(d.get("nprocs"), len(nodes)),
        **spares(d),
        notify=rules_of(d.get("notify"), BadWatchFile),
    )
    tag_ok = _TAG.fullmatch(cfg.tag) and cfg.tag == f"{cfg.job}/{cfg.run}/{cfg.node}"
    if cfg.node not in cfg.members or not tag_ok or not RUN_ID.fullmatch(cfg.run):
        raise BadWatchFile(f"{FILE}: node, run or tag not of this run")
    if set(cfg.spares) & set(cfg.nodes) or (cfg.node in cfg.spares) != bool(cfg.rank_token):
        raise BadWatchFile(f"{FILE}: a spare is a node of the run, or has no rank to take")
    if not 0 < cfg.coord_port < 65536 or not 0.05 <= cfg.interval <= 60:
        raise BadWatchFile(f"{FILE}: coord_port or interval out of range")
    return cfg


def joined(cfg: WatchConfig, epoch: epochs.Epoch | None) -> WatchConfig:
    """`cfg` in `epoch`: its coordinator's node and host (None, or one whose main is no
    member of the chain: the launch's, as the watch file says)."""
    if epoch is None or epoch.main not in cfg.members:
        return cfg
    return replace(cfg, epoch=epoch.number, lead=epoch.main, coord_host=epoch.host)


def write_json(path: str, data: dict[str, Any]) -> None:
    """Atomically (tmp + rename): a reader on the main never sees half a file."""
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "w", encoding="utf-8", opener=plain) as f:
        json.dump(data, f, sort_keys=True)
    os.replace(tmp, path)


def load_for(argv: list[str], role: str) -> tuple[str, WatchConfig, bytes] | int:
    """`<verb> RUN_DIR`'s run dir, watch file and secret, or the exit code after one line
    on stderr (a sentinel or coordinator that cannot start says why, and nothing else)."""
    if len(argv) != 1:
        print(f"usage: {role} RUN_DIR", file=sys.stderr)
        return 2
    run_dir = os.path.abspath(argv[0])
    try:
        cfg, secret = load(run_dir)
    except (OSError, BadWatchFile) as exc:
        print(f"{role}: {exc}", file=sys.stderr)
        return 2
    return run_dir, cfg, secret


def load(run_dir: str) -> tuple[WatchConfig, bytes]:
    """The watch file and the run's secret, from the node's run dir, in the epoch this
    node joined last (epochs.py)."""
    with open(os.path.join(run_dir, FILE), encoding="utf-8", opener=plain) as f:
        raw = f.read(1 << 20)
    try:
        cfg = joined(parse(json.loads(raw)), epochs.read(run_dir))
    except json.JSONDecodeError as exc:
        raise BadWatchFile(f"{FILE}: not JSON ({exc.msg})") from None
    with open(os.path.join(run_dir, SECRET), "rb", opener=plain) as f:
        secret = f.read(256).strip()
    if len(secret) < 32:
        raise BadWatchFile(f"{SECRET}: too short to be the run's secret")
    return cfg, secret


def to_json(cfg: WatchConfig) -> str:
    """The watch file's text (the manager writes it; `parse` reads it back)."""
    r, q = cfg.rules, cfg.quarantine
    return json.dumps(
        {
            "v": 1,
            "job": cfg.job,
            "run": cfg.run,
            "node": cfg.node,
            "tag": cfg.tag,
            "session": cfg.session,
            "coord_host": cfg.coord_host,
            "coord_port": cfg.coord_port,
            "rules": {
                "frozen_after": r.frozen_after,
                "unreachable_after": r.unreachable_after,
                "on_failure": r.on_failure,
                "on_stall": r.on_stall,
                "stall_after": r.stall_after,
            },
            "nodes": list(cfg.nodes),
            "interval": cfg.interval,
            "heartbeat": cfg.heartbeat,
            "grace": cfg.grace,
            "ports": list(cfg.ports),
            "start_grace": cfg.start_grace,
            "progress_pattern": cfg.progress_pattern,
            "restart": restart_json(cfg.restart),
            "attempt_nonce": cfg.attempt_nonce,
            "restart_base": cfg.restart_base,
            "master_port": cfg.master_port,
            "ready": cfg.ready,
            "ready_pattern": cfg.ready_pattern,
            "ready_delay": cfg.ready_delay,
            "ready_timeout": cfg.ready_timeout,
            "capture_budget": cfg.capture_budget,
            "stacks_nonce": cfg.stacks_nonce,
            "sample_every": cfg.sample_every,
            "on_slow": cfg.on_slow,
            "slow_fraction": cfg.slow_fraction,
            "slow_after": cfg.slow_after,
            "nprocs": list(cfg.nprocs) or None,
            "spares": list(cfg.spares),
            "spare_nprocs": list(cfg.spare_nprocs) or None,
            "rank_token": cfg.rank_token,
            "quarantine": None if q is None else asdict(q),
            "spare_addrs": list(cfg.spare_addrs) or None,
            "notify": rules_json(cfg.notify),
        },
        sort_keys=True,
    )
