"""The job description: one YAML file, validated completely before anything runs.

Every error names the file, the line and the key path, because the person reading it
is about to launch on 64 GPUs and must not guess which of 30 lines is wrong.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from ClusterShell.NodeSet import NodeSet, NodeSetException

from .notify import NotifyPolicy
from .yamlmarks import ConfigError, Document, Path_, load, loads

__all__ = [
    "LOCAL_HOSTS",
    "TEMPLATE_FIELDS",
    "Action",
    "ConfigError",
    "HostKeyPolicy",
    "JobConfig",
    "NodeSpec",
    "ReadyMode",
    "WatchPolicy",
    "load_config",
    "parse_config",
]

TEMPLATE_FIELDS = (
    "node_rank",
    "nnodes",
    "master_addr",
    "master_port",
    "nproc_per_node",
    "node",
    "restart_count",
)
# Hosts that run through a local runner, without SSH.
LOCAL_HOSTS = frozenset({"local", "localhost"})

JOB_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
NODE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Names mntui sets itself; letting the config override them would break the job.
RESERVED_ENV = frozenset(
    {
        "NODE_RANK",
        "NNODES",
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "MNTUI_RUN",
        "MNTUI_RUN_DIR",
        "MNTUI_RESTART_COUNT",
    }
)


class ReadyMode(StrEnum):
    PORT = "port"  # the master port listens on the main node
    LOG = "log"  # a regex matches the main's output
    DELAY = "delay"  # a fixed wait: the last resort of the seed scripts


class HostKeyPolicy(StrEnum):
    STRICT = "strict"  # unknown or changed key: refuse
    ACCEPT_NEW = "accept-new"  # unknown key: record it; changed key: refuse


# -- ssh.transport / ssh.password (issue 14) ----------------------------------------
class SshTransport(StrEnum):
    PARAMIKO = "paramiko"  # in-process, one connection per node
    OPENSSH = "openssh"  # the system `ssh` per node, behind a private ControlMaster


class PasswordMode(StrEnum):
    PROMPT = "prompt"  # paramiko: asked once, kept in memory, used for every node


# -- end ssh.transport / ssh.password ------------------------------------------------


@dataclass(frozen=True)
class NodeSpec:
    name: str
    host: str
    rank: int
    command: str
    env: Mapping[str, str]
    setup: tuple[str, ...]
    workdir: str | None

    @property
    def is_local(self) -> bool:
        return self.host in LOCAL_HOSTS


@dataclass(frozen=True)
class LaunchPolicy:
    ready: ReadyMode = ReadyMode.PORT
    ready_pattern: str | None = None
    ready_delay: float = 10.0
    ready_timeout: float = 300.0
    stagger: float = 0.0


@dataclass(frozen=True)
class SshPolicy:
    config: str | None = None
    connect_timeout: float = 10.0
    host_key: HostKeyPolicy | None = None  # None: follow ssh_config's StrictHostKeyChecking
    command_timeout: float = 60.0
    transport: SshTransport = SshTransport.PARAMIKO  # issue 14
    password: PasswordMode | None = None  # issue 14; None: keys/agent only


class Action(StrEnum):
    KILL_ALL = "kill_all"  # tear the whole job down
    NOTIFY = "notify"  # report, touch nothing


@dataclass(frozen=True)
class WatchPolicy:
    on_failure: Action = Action.KILL_ALL  # a node failed, orphaned, froze or stayed unreachable
    on_stall: Action = Action.NOTIFY
    stall_after: float = 300.0  # seconds without output
    frozen_after: float = 3.0  # a stop this short is a debugger (py-spy), not a hang
    unreachable_after: float = 30.0  # a node can miss polls while its sshd is busy
    interval: float = 1.0  # seconds between polls
    capture_budget: float = 10.0  # seconds for py-spy stacks before a teardown; 0: none
    slow_fraction: float = 0.5  # a node below this fraction of the median step rate...
    slow_after: float = 120.0  # ...for this long is flagged slow (notify only)


RESTARTABLE = ("failed", "orphaned", "frozen", "unreachable", "stalled")
# argparse's usage error, launch.sh's failed `cd`, "not executable", "not found":
# relaunching the same command cannot fix them.
USAGE_EXIT_CODES = frozenset({2, 97, 126, 127})


@dataclass(frozen=True)
class RestartPolicy:
    max: int = 0  # 0: never restart
    backoff: float = 10.0  # the first delay; it doubles up to backoff_max
    backoff_max: float = 300.0
    on: frozenset[str] = frozenset(RESTARTABLE) - {"stalled"}
    exit_codes: frozenset[int] | None = None  # restart only on these
    not_on: frozenset[int] = USAGE_EXIT_CODES
    reset_after: float = 1800.0  # progress for this long forgets earlier failures; 0: never


@dataclass(frozen=True)
class JobConfig:
    path: str
    job: str
    nodes: tuple[NodeSpec, ...]
    main: str
    master_port: int
    master_addr: str | None
    ports: tuple[int, ...]
    nproc_per_node: int
    launch: LaunchPolicy = field(default_factory=LaunchPolicy)
    grace: float = 5.0
    ssh: SshPolicy = field(default_factory=SshPolicy)
    watch: WatchPolicy = field(default_factory=WatchPolicy)
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    notify: NotifyPolicy = field(default_factory=NotifyPolicy)
    progress_pattern: str | None = None  # a regex with a group `step`; None: the default
    spares: tuple[NodeSpec, ...] = ()  # nodes that replace one that broke twice in a row

    @property
    def main_node(self) -> NodeSpec:
        return self.node(self.main)

    @property
    def workers(self) -> tuple[NodeSpec, ...]:
        return tuple(n for n in self.nodes if n.name != self.main)

    @property
    def all_ports(self) -> tuple[int, ...]:
        return (self.master_port, *[p for p in self.ports if p != self.master_port])

    def node(self, name: str) -> NodeSpec:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)


T = TypeVar("T")
D = TypeVar("D")

TOP_KEYS = {
    "job",
    "nodes",
    "overrides",
    "main",
    "workdir",
    "setup",
    "env",
    "master_port",
    "master_addr",
    "ports",
    "nproc_per_node",
    "command",
    "launch",
    "kill",
    "ssh",
    "watch",
}
NODE_KEYS = {"name", "host", "command", "env", "setup", "workdir"}
LAUNCH_KEYS = {"ready", "ready_pattern", "ready_delay", "ready_timeout", "stagger"}
KILL_KEYS = {"grace"}
SSH_KEYS = {"config", "connect_timeout", "host_key", "command_timeout", "transport", "password"}
WATCH_KEYS = {
    "on_failure",
    "on_stall",
    "stall_after",
    "frozen_after",
    "unreachable_after",
    "interval",
    "capture_budget",
}


def load_config(path: str | Path) -> JobConfig:
    return _build(load(Path(path)))


def parse_config(text: str, name: str = "<config>") -> JobConfig:
    return _build(loads(text, name))


class _V:
    """Typed accessors that turn a wrong value into a ConfigError at its line."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc

    def mapping(self, value: Any, path: Path_, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.doc.error(path, f"expected a mapping, got {_kind(value)}")
        for key in value:
            if key not in allowed:
                hint = _suggest(key, allowed)
                raise self.doc.error(
                    (*path, key), "unknown key" + (f" (did you mean {hint!r}?)" if hint else "")
                )
        return value

    def get(
        self,
        m: Mapping[str, Any],
        path: Path_,
        key: str,
        check: Callable[[Any, Path_], T],
        default: D,
    ) -> T | D:
        if key not in m or m[key] is None:
            return default
        return check(m[key], (*path, key))

    def string(self, value: Any, path: Path_) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.doc.error(path, f"expected a non-empty string, got {_kind(value)}")
        if "\0" in value:
            raise self.doc.error(path, "contains a NUL byte")
        return value

    def any_mapping(self, value: Any, path: Path_) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.doc.error(path, f"expected a mapping, got {_kind(value)}")
        return value

    def list_of(self, value: Any, path: Path_, check: Callable[[Any, Path_], T]) -> tuple[T, ...]:
        if not isinstance(value, list):
            raise self.doc.error(path, f"expected a list, got {_kind(value)}")
        return tuple(check(x, (*path, i)) for i, x in enumerate(value))

    def number(self, value: Any, path: Path_) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise self.doc.error(path, f"expected a number >= 0, got {_kind(value)}")
        return float(value)

    def positive_int(self, value: Any, path: Path_) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.doc.error(path, f"expected an integer >= 1, got {_kind(value)}")
        return value

    def port(self, value: Any, path: Path_) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
            raise self.doc.error(path, f"expected a port number 1-65535, got {_kind(value)}")
        return value

    def lines(self, value: Any, path: Path_) -> tuple[str, ...]:
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, list):
            raise self.doc.error(
                path, f"expected a string or a list of strings, got {_kind(value)}"
            )
        return tuple(self.string(v, (*path, i)) for i, v in enumerate(value))

    def env(self, value: Any, path: Path_) -> dict[str, str]:
        if not isinstance(value, dict):
            raise self.doc.error(path, f"expected a mapping, got {_kind(value)}")
        out: dict[str, str] = {}
        for key, v in value.items():
            if not ENV_RE.match(key):
                raise self.doc.error((*path, key), "not a valid environment variable name")
            if key in RESERVED_ENV:
                raise self.doc.error(
                    (*path, key), "set by mntui itself; use the matching top-level key"
                )
            if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                raise self.doc.error((*path, key), f"expected a string or number, got {_kind(v)}")
            if "\0" in str(v):
                raise self.doc.error((*path, key), "contains a NUL byte")
            out[key] = str(v)
        return out

    def template(self, value: Any, path: Path_) -> str:
        text = self.string(value, path)
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError as exc:
            raise self.doc.error(
                path, f"bad template: {exc} (write {{{{ and }}}} for literal braces)"
            ) from None
        for _, fname, spec, conv in parsed:
            if fname is None:
                continue
            if fname not in TEMPLATE_FIELDS:
                raise self.doc.error(
                    path,
                    f"unknown placeholder {{{fname}}}; known: "
                    + ", ".join(f"{{{f}}}" for f in TEMPLATE_FIELDS),
                )
            if spec or conv:
                raise self.doc.error(
                    path, f"placeholder {{{fname}}} takes no format spec or conversion"
                )
        return text

    def choice(self, enum: type[StrEnumT]) -> Callable[[Any, Path_], StrEnumT]:
        def check(value: Any, path: Path_) -> StrEnumT:
            try:
                return enum(value)
            except ValueError:
                raise self.doc.error(
                    path, f"expected one of {', '.join(e.value for e in enum)}, got {value!r}"
                ) from None

        return check


StrEnumT = TypeVar("StrEnumT", bound=StrEnum)


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, (dict, list)):
        return {dict: "a mapping", list: "a list"}[type(value)]
    return f"{type(value).__name__} {value!r}"


def _suggest(key: str, allowed: set[str]) -> str | None:
    import difflib

    close = difflib.get_close_matches(key, sorted(allowed), n=1)
    return close[0] if close else None


def _build(doc: Document) -> JobConfig:
    v = _V(doc)
    top = v.mapping(doc.data if doc.data is not None else {}, (), TOP_KEYS)
    for required in ("job", "nodes", "command"):
        if required not in top:
            raise doc.error((), f"missing required key {required!r}")
    job = v.string(top["job"], ("job",))
    if not JOB_RE.match(job):
        raise doc.error(
            ("job",), "use letters, digits, '-' and '_' (it names tmux sessions and directories)"
        )

    command = v.template(top["command"], ("command",))
    setup: tuple[str, ...] = v.get(top, (), "setup", v.lines, ())
    env: dict[str, str] = v.get(top, (), "env", v.env, {})
    workdir = v.get(top, (), "workdir", v.string, None)
    raw_nodes = _expand_nodes(v, top["nodes"])
    names = [name for name, _, _ in raw_nodes]

    overrides_raw: dict[str, Any] = v.get(top, (), "overrides", v.any_mapping, {})
    for name in overrides_raw:
        if name not in names:
            raise doc.error(
                ("overrides", name), f"unknown node {name!r}; nodes are {NodeSet.fromlist(names)}"
            )

    nodes: list[NodeSpec] = []
    for rank_hint, (name, raw, path) in enumerate(raw_nodes):
        merged: dict[str, Any] = dict(raw)
        opath: dict[str, Path_] = {k: (*path, k) for k in raw}
        if name in overrides_raw:
            o = v.mapping(overrides_raw[name], ("overrides", name), NODE_KEYS - {"name"})
            merged.update(o)
            opath.update({k: ("overrides", name, k) for k in o})

        def val(
            key: str,
            check: Callable[[Any, Path_], T],
            default: D,
            merged: dict[str, Any] = merged,
            opath: dict[str, Path_] = opath,
        ) -> T | D:
            return check(merged[key], opath[key]) if merged.get(key) is not None else default

        host = val("host", v.string, name)
        own_env: dict[str, str] | None = val("env", v.env, None)
        node_env = {**env, **(own_env or {})}
        nodes.append(
            NodeSpec(
                name=name,
                host=host,
                rank=rank_hint,
                command=val("command", v.template, command),
                env=node_env,
                setup=val("setup", v.lines, setup),
                workdir=val("workdir", v.string, workdir),
            )
        )

    main = v.get(top, (), "main", v.string, nodes[0].name)
    if main not in names:
        raise doc.error(("main",), f"unknown node {main!r}; nodes are {NodeSet.fromlist(names)}")
    # The main is rank 0; the others keep their listed order.
    ordered = [n for n in nodes if n.name == main] + [n for n in nodes if n.name != main]
    nodes = [
        NodeSpec(n.name, n.host, i, n.command, n.env, n.setup, n.workdir)
        for i, n in enumerate(ordered)
    ]

    launch_raw: dict[str, Any] = v.get(
        top, (), "launch", lambda x, p: v.mapping(x, p, LAUNCH_KEYS), {}
    )
    lp = ("launch",)
    launch = LaunchPolicy(
        ready=v.get(launch_raw, lp, "ready", v.choice(ReadyMode), ReadyMode.PORT),
        ready_pattern=v.get(launch_raw, lp, "ready_pattern", v.string, None),
        ready_delay=v.get(launch_raw, lp, "ready_delay", v.number, 10.0),
        ready_timeout=v.get(launch_raw, lp, "ready_timeout", v.number, 300.0),
        stagger=v.get(launch_raw, lp, "stagger", v.number, 0.0),
    )
    if launch.ready is ReadyMode.LOG:
        if launch.ready_pattern is None:
            raise doc.error((*lp, "ready_pattern"), "required when ready is 'log'")
        try:
            re.compile(launch.ready_pattern)
        except re.error as exc:
            raise doc.error((*lp, "ready_pattern"), f"bad regular expression: {exc}") from None

    kill_raw: dict[str, Any] = v.get(top, (), "kill", lambda x, p: v.mapping(x, p, KILL_KEYS), {})
    ssh_raw: dict[str, Any] = v.get(top, (), "ssh", lambda x, p: v.mapping(x, p, SSH_KEYS), {})
    sp = ("ssh",)
    ssh = SshPolicy(
        config=v.get(ssh_raw, sp, "config", v.string, None),
        connect_timeout=v.get(ssh_raw, sp, "connect_timeout", v.number, 10.0),
        host_key=v.get(ssh_raw, sp, "host_key", v.choice(HostKeyPolicy), None),
        command_timeout=v.get(ssh_raw, sp, "command_timeout", v.number, 60.0),
        transport=v.get(ssh_raw, sp, "transport", v.choice(SshTransport), SshTransport.PARAMIKO),
        password=v.get(ssh_raw, sp, "password", v.choice(PasswordMode), None),
    )
    if (
        ssh.config is not None
        and not Path(ssh.config).is_absolute()
        and not ssh.config.startswith("~")
    ):
        # Relative to the config file, so a config and its ssh_config travel together.
        ssh = SshPolicy(
            str(Path(doc.file).parent / ssh.config),
            ssh.connect_timeout,
            ssh.host_key,
            ssh.command_timeout,
            ssh.transport,  # issue 14
            ssh.password,  # issue 14
        )

    watch_raw: dict[str, Any] = v.get(
        top, (), "watch", lambda x, p: v.mapping(x, p, WATCH_KEYS), {}
    )
    wp = ("watch",)
    d = WatchPolicy()
    watch = WatchPolicy(
        on_failure=v.get(watch_raw, wp, "on_failure", v.choice(Action), d.on_failure),
        on_stall=v.get(watch_raw, wp, "on_stall", v.choice(Action), d.on_stall),
        stall_after=v.get(watch_raw, wp, "stall_after", v.number, d.stall_after),
        frozen_after=v.get(watch_raw, wp, "frozen_after", v.number, d.frozen_after),
        unreachable_after=v.get(watch_raw, wp, "unreachable_after", v.number, d.unreachable_after),
        capture_budget=v.get(watch_raw, wp, "capture_budget", v.number, d.capture_budget),
        interval=max(0.1, v.get(watch_raw, wp, "interval", v.number, d.interval)),
    )
    ports: tuple[int, ...] = v.get(top, (), "ports", lambda x, p: v.list_of(x, p, v.port), ())
    return JobConfig(
        path=doc.file,
        job=job,
        nodes=tuple(nodes),
        main=main,
        master_port=v.get(top, (), "master_port", v.port, 29500),
        master_addr=v.get(top, (), "master_addr", v.string, None),
        ports=ports,
        nproc_per_node=v.get(top, (), "nproc_per_node", v.positive_int, 1),
        launch=launch,
        grace=v.get(kill_raw, ("kill",), "grace", v.number, 5.0),
        ssh=ssh,
        watch=watch,
    )


def _expand_nodes(v: _V, value: Any) -> list[tuple[str, dict[str, Any], Path_]]:
    """Nodes as `g[369-376]`, a list of names/node sets, or mappings with overrides."""
    doc = v.doc
    items: list[tuple[Any, Path_]]
    if isinstance(value, str):
        items = [(value, ("nodes",))]
    elif isinstance(value, list) and value:
        items = [(x, ("nodes", i)) for i, x in enumerate(value)]
    else:
        raise doc.error(
            ("nodes",),
            f"expected a node set like 'g[369-376]' or a non-empty list, got {_kind(value)}",
        )
    out: list[tuple[str, dict[str, Any], Path_]] = []
    seen: dict[str, Path_] = {}

    def add(name: str, raw: dict[str, Any], path: Path_) -> None:
        if not NODE_RE.match(name):
            raise doc.error(path, f"bad node name {name!r}: use letters, digits, '.', '-' and '_'")
        if name in seen:
            raise doc.error(path, f"duplicate node {name!r}")
        seen[name] = path
        out.append((name, raw, path))

    for item, path in items:
        if isinstance(item, str):
            try:
                expanded = list(NodeSet(item))
            except NodeSetException as exc:
                raise doc.error(path, f"bad node set {item!r}: {exc}") from None
            for name in expanded:
                add(name, {}, path)
        elif isinstance(item, dict):
            raw = v.mapping(item, path, NODE_KEYS)
            if "name" not in raw:
                raise doc.error(path, "a node mapping needs a 'name'")
            add(
                v.string(raw["name"], (*path, "name")),
                {k: x for k, x in raw.items() if k != "name"},
                path,
            )
        else:
            raise doc.error(path, f"expected a node name or a mapping, got {_kind(item)}")
    return out
