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
from dataclasses import asdict, dataclass
from typing import Any

from .judging import Rules
from .notifytext import NotifyRules, rules_json, rules_of
from .placing import QuarantineRule
from .restarts import RestartRules
from .runid import RUN_ID

FILE = "watch.json"
SECRET = "secret"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_TAG = re.compile(r"[A-Za-z0-9._-]{1,128}/[A-Za-z0-9._-]{1,64}/[A-Za-z0-9._-]{1,128}")
NONCE = re.compile(r"[0-9a-f]{8,64}\Z")
RANK_TOKEN = re.compile(r"@@MNTUI_RANK_[0-9a-f]{16}@@\Z")


class BadWatchFile(ValueError):
    pass


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
    attempts: int = 0  # restarts rendered at launch: attempts/<k>.sh, k = 1..attempts
    master_port: int = 0  # the main's ready check before the workers of a restart
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
    # take (spareattempt.py puts the rank the coordinator gave there); None on a node
    rank_token: str | None = None
    quarantine: QuarantineRule | None = None  # restart.quarantine_after (None: off)
    notify: NotifyRules | None = None  # the main's: the coordinator's notices (notifysend.py)

    @property
    def is_main(self) -> bool:
        return self.node == self.nodes[0]

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


def _get(d: dict[str, Any], key: str, kind: type) -> Any:
    v = d.get(key)
    if kind is float and type(v) is int:
        v = float(v)
    if type(v) is not kind:
        raise BadWatchFile(f"{FILE}: {key} must be a {kind.__name__}")
    return v


def _rules(d: object) -> Rules:
    if not isinstance(d, dict):
        raise BadWatchFile(f"{FILE}: rules must be an object")
    stall = d.get("stall_after")
    if stall != "auto":
        stall = _get(d, "stall_after", float)
    return Rules(
        frozen_after=_get(d, "frozen_after", float),
        unreachable_after=_get(d, "unreachable_after", float),
        on_failure=_get(d, "on_failure", str),
        on_stall=_get(d, "on_stall", str),
        stall_after=stall,
    )


def _pattern(v: object) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or len(v) > 2000:
        raise BadWatchFile(f"{FILE}: progress_pattern must be a regex")
    try:
        if "step" not in re.compile(v).groupindex:
            raise BadWatchFile(f"{FILE}: progress_pattern has no group `step`")
    except re.error:
        raise BadWatchFile(f"{FILE}: progress_pattern is no regex") from None
    return v


def _codes(v: object, what: str) -> frozenset[int]:
    if not isinstance(v, list) or not all(type(c) is int and -256 < c < 256 for c in v):
        raise BadWatchFile(f"{FILE}: restart.{what} must be a list of exit codes")
    return frozenset(v)


def _restart(d: object) -> RestartRules | None:
    if d is None:
        return None
    if not isinstance(d, dict):
        raise BadWatchFile(f"{FILE}: restart must be an object")
    on = d.get("on")
    if not isinstance(on, list) or not all(isinstance(x, str) for x in on):
        raise BadWatchFile(f"{FILE}: restart.on must be a list of states")
    codes = d.get("exit_codes")
    return RestartRules(
        max=_get(d, "max", int),
        backoff=_get(d, "backoff", float),
        backoff_max=_get(d, "backoff_max", float),
        on=frozenset(on),
        exit_codes=None if codes is None else _codes(codes, "exit_codes"),
        not_on=_codes(d.get("not_on"), "not_on"),
        reset_after=_get(d, "reset_after", float),
    )


def _stacks(d: dict[str, Any]) -> dict[str, Any]:
    """The stacks before a hang's kill: absent from a file that takes none."""
    if d.get("stacks_nonce") is None:
        return {}
    nonce, budget = d.get("stacks_nonce"), _get(d, "capture_budget", float)
    if not isinstance(nonce, str) or not NONCE.match(nonce) or not 0 <= budget <= 600:
        raise BadWatchFile(f"{FILE}: stacks_nonce or capture_budget out of range")
    return {"capture_budget": budget, "stacks_nonce": nonce}


def _slow(d: dict[str, Any]) -> dict[str, Any]:
    """The straggler's settings (slowness.py): absent from a file that has none."""
    if "sample_every" not in d:
        return {}
    every, action = _get(d, "sample_every", float), d.get("on_slow")
    fraction, after = _get(d, "slow_fraction", float), _get(d, "slow_after", float)
    ok = 0 <= every <= 3600 and 0 <= fraction <= 1 and 0 < after <= 86400
    if not ok or action not in ("notify", "kill_all"):
        raise BadWatchFile(f"{FILE}: sample_every, on_slow or slow_* out of range")
    return {"sample_every": every, "on_slow": action, "slow_fraction": fraction,
            "slow_after": after}  # fmt: skip


def _nprocs(v: object, n: int) -> tuple[int, ...]:
    if v is None:
        return ()
    if (
        not isinstance(v, list)
        or len(v) != n
        or not all(type(x) is int and 0 < x <= 1 << 16 for x in v)
    ):
        raise BadWatchFile(f"{FILE}: nprocs must be a count for each node")
    return tuple(v)


def _spares(d: dict[str, Any]) -> dict[str, Any]:
    """The chain's spares and quarantine rule (placing.py): absent from a file without."""
    names, token, q = d.get("spares") or [], d.get("rank_token"), d.get("quarantine")
    if not isinstance(names, list) or not all(
        isinstance(n, str) and _NAME.fullmatch(n) for n in names
    ):
        raise BadWatchFile(f"{FILE}: spares must be a list of node names")
    if token is not None and not (isinstance(token, str) and RANK_TOKEN.match(token)):
        raise BadWatchFile(f"{FILE}: rank_token is not one of ours")
    rule = None
    if q is not None:
        if not isinstance(q, dict):
            raise BadWatchFile(f"{FILE}: quarantine must be an object")
        rule = QuarantineRule(
            _get(q, "count", int), _get(q, "within", float), _get(q, "hold", float)
        )
    return {"spares": tuple(names), "spare_nprocs": _nprocs(d.get("spare_nprocs"), len(names)),
            "rank_token": token, "quarantine": rule}  # fmt: skip


def parse(d: object) -> WatchConfig:
    if not isinstance(d, dict) or d.get("v") != 1:
        raise BadWatchFile(f"{FILE}: not a version 1 watch file")
    nodes = d.get("nodes")
    if (
        not isinstance(nodes, list)
        or not nodes
        or not all(isinstance(n, str) and _NAME.fullmatch(n) for n in nodes)
    ):
        raise BadWatchFile(f"{FILE}: nodes must be a list of node names")
    ports = d.get("ports")
    if not isinstance(ports, list) or not all(type(p) is int and 0 < p < 65536 for p in ports):
        raise BadWatchFile(f"{FILE}: ports must be a list of ports")
    cfg = WatchConfig(
        job=_get(d, "job", str),
        run=_get(d, "run", str),
        node=_get(d, "node", str),
        tag=_get(d, "tag", str),
        session=_get(d, "session", str),
        coord_host=_get(d, "coord_host", str),
        coord_port=_get(d, "coord_port", int),
        rules=_rules(d.get("rules")),
        nodes=tuple(nodes),
        interval=_get(d, "interval", float),
        heartbeat=_get(d, "heartbeat", float),
        grace=_get(d, "grace", float),
        ports=tuple(ports),
        start_grace=_get(d, "start_grace", float),
        progress_pattern=_pattern(d.get("progress_pattern")),
        restart=_restart(d.get("restart")),
        attempts=_get(d, "attempts", int),
        master_port=_get(d, "master_port", int),
        ready_timeout=_get(d, "ready_timeout", float),
        **_stacks(d),
        **_slow(d),
        nprocs=_nprocs(d.get("nprocs"), len(nodes)),
        **_spares(d),
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


def write_json(path: str, data: dict[str, Any]) -> None:
    """Atomically (tmp + rename): a reader on the main never sees half a file."""
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "w", encoding="utf-8") as f:
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
    """The watch file and the run's secret, from the node's run dir."""
    with open(os.path.join(run_dir, FILE), encoding="utf-8") as f:
        raw = f.read(1 << 20)
    try:
        cfg = parse(json.loads(raw))
    except json.JSONDecodeError as exc:
        raise BadWatchFile(f"{FILE}: not JSON ({exc.msg})") from None
    with open(os.path.join(run_dir, SECRET), "rb") as f:
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
            "restart": _restart_json(cfg.restart),
            "attempts": cfg.attempts,
            "master_port": cfg.master_port,
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
            "notify": rules_json(cfg.notify),
        },
        sort_keys=True,
    )


def _restart_json(r: RestartRules | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {
        "max": r.max,
        "backoff": r.backoff,
        "backoff_max": r.backoff_max,
        "on": sorted(r.on),
        "exit_codes": None if r.exit_codes is None else sorted(r.exit_codes),
        "not_on": sorted(r.not_on),
        "reset_after": r.reset_after,
    }
