"""The job description: one YAML file, validated completely before anything runs.

Every error names the file, the line and the key path, because the person reading it
is about to launch on 64 GPUs and must not guess which of 30 lines is wrong.

Here is the job as a whole: JobConfig, whose fields are the file's top-level keys, and its
reading (load_config, parse_config), with the checks that span keys: required keys, the
main node and the ranks, spares, paths relative to the config file. Its parts are
settings.py's, its nodes confignodes.py's, the rules for single values configchecks.py's
and jobchecks.py's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ClusterShell.NodeSet import NodeSet, NodeSetException

from . import configchecks as ck
from . import jobchecks as jc
from .notices import NotifyPolicy
from .settings import (
    MAX_NPROC,
    KillPolicy,
    LaunchPolicy,
    NodeSpec,
    ReadyMode,
    RestartPolicy,
    SshPolicy,
    SyncPolicy,
    WatchPolicy,
)
from .yamlmarks import ConfigError, Document, Path_, format_path, load, loads

if TYPE_CHECKING:
    from .nodesource import NodeSource

__all__ = ["ConfigError", "JobConfig", "load_config", "parse_config"]


NODE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
MAX_NODES = 4096  # one SSH connection and one thread per node


def _sync(doc: Document, value: Any, path: Path_) -> SyncPolicy:
    m = ck.mapping(doc, value, path, ck.keys(SyncPolicy))
    if "git" in m and m["git"] is None:
        raise doc.error((*path, "git"), "expected a mapping ({checkout: same-commit}), got nothing")
    rsync_only = [k for k in m if k in ck.keys(SyncPolicy, "rsync")]
    if m.get("git") is not None and rsync_only:
        message = "an rsync setting, but sync.git syncs a commit instead: keep one of the two"
        raise doc.error((*path, rsync_only[0]), message)
    if m.get("git") is None and m.get("source") is None:
        message = "required: the local directory to copy into every node's workdir"
        raise doc.error((*path, "source"), message)
    policy = SyncPolicy(**ck.read(doc, SyncPolicy, m, path))
    source = Path(doc.file).parent / os.path.expanduser(policy.source)
    return replace(policy, source=str(source))


@dataclass(frozen=True)
class JobConfig:
    path: str
    job: str = field(metadata=ck.meta(jc.job_name, required=True))
    nodes: tuple[NodeSpec, ...] = field(metadata=ck.meta(required=True))  # see _node_entries
    main: str = field(metadata=ck.meta())  # default: the first node
    master_port: int = field(default=29500, metadata=ck.meta(ck.port))
    master_addr: str | None = field(default=None, metadata=ck.meta(ck.text))
    ports: tuple[int, ...] = field(default=(), metadata=ck.meta(ck.ports))
    nproc_per_node: int = field(default=1, metadata=ck.meta(ck.count(MAX_NPROC)))
    launch: LaunchPolicy = field(
        default_factory=LaunchPolicy, metadata=ck.meta(ck.section(LaunchPolicy))
    )
    kill: KillPolicy = field(default_factory=KillPolicy, metadata=ck.meta(ck.section(KillPolicy)))
    ssh: SshPolicy = field(default_factory=SshPolicy, metadata=ck.meta(ck.section(SshPolicy)))
    watch: WatchPolicy = field(
        default_factory=WatchPolicy, metadata=ck.meta(ck.section(WatchPolicy))
    )
    restart: RestartPolicy = field(
        default_factory=RestartPolicy, metadata=ck.meta(ck.section(RestartPolicy))
    )
    notify: NotifyPolicy = field(default_factory=NotifyPolicy, metadata=ck.meta(jc.notify))
    # a Python regex with a group `step`; None: progress.DEFAULT_PATTERN
    progress_pattern: str | None = field(default=None, metadata=ck.meta(jc.progress_pattern))
    # nodes that replace one that broke twice in a row (ranks are given when they join)
    spares: tuple[NodeSpec, ...] = field(default=(), metadata=ck.meta())
    # where `nodes: {hostfile: ...}` / `{slurm: ...}` took the nodes from; None: the list
    nodes_from: NodeSource | None = None
    # copy the code to every node before a launch (`launch --no-sync` skips it)
    sync: SyncPolicy | None = field(default=None, metadata=ck.meta(_sync))

    @property
    def grace(self) -> float:
        return self.kill.grace

    @property
    def main_node(self) -> NodeSpec:
        return self.node(self.main)

    @property
    def workers(self) -> tuple[NodeSpec, ...]:
        return tuple(n for n in self.nodes if n.name != self.main)

    @property
    def all_ports(self) -> tuple[int, ...]:
        return (self.master_port, *[p for p in self.ports if p != self.master_port])

    def nproc(self, node: NodeSpec) -> int:
        """The node's processes: its own count, else the job's."""
        return node.nproc_per_node or self.nproc_per_node

    @property
    def world_size(self) -> int:
        return sum(self.nproc(n) for n in self.nodes)

    def node(self, name: str) -> NodeSpec:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)


NODE_KEYS = ck.keys(NodeSpec)
SHARED_KEYS = ck.keys(NodeSpec, "shared")
TOP_KEYS = ck.keys(JobConfig) | SHARED_KEYS | {"overrides"}
REQUIRED = [f.name for c in (JobConfig, NodeSpec) for f in fields(c) if f.metadata.get("required")]


# ---- building the job ---------------------------------------------------------------


def load_config(path: str | Path) -> JobConfig:
    return _build(load(Path(path)))


def parse_config(text: str, name: str = "<config>") -> JobConfig:
    return _build(loads(text, name))


def _build(doc: Document) -> JobConfig:
    top = ck.mapping(doc, doc.data if doc.data is not None else {}, (), TOP_KEYS)
    for required in REQUIRED:
        if required not in top:
            raise doc.error((), f"missing required key {required!r}")
        if top[required] is None:
            raise doc.error((required,), "required: expected a value, got nothing")
    settings = ck.read(doc, JobConfig, top, ())
    source, listed = _node_source(doc, top["nodes"], settings["job"])
    nodes = _node_specs(doc, top, _node_entries(doc, listed), lenient=source is not None)
    main = _main(doc, top, nodes)
    spares = _spares(doc, top, nodes)
    ranked = _ranked(nodes, main)
    cfg = JobConfig(doc.file, nodes=ranked, main=main, spares=spares, nodes_from=source, **settings)
    _check_launch(doc, cfg.launch)
    _check_sync(doc, cfg)
    return replace(cfg, ssh=_ssh_relative(doc.file, cfg.ssh))


def _check_sync(doc: Document, cfg: JobConfig) -> None:
    bare = [n.name for n in cfg.nodes if n.workdir is None]
    if cfg.sync is not None and bare:
        message = f"copies into each node's workdir, and {NodeSet.fromlist(bare)} has none"
        raise doc.error(("sync",), message + ": set workdir")


def _spares(doc: Document, top: Mapping[str, Any], nodes: list[NodeSpec]) -> tuple[NodeSpec, ...]:
    """Spare nodes take the job's shared settings, as the nodes do; never one of them."""
    if top.get("spares") is None:
        return ()
    entries = _node_entries(doc, top["spares"], "spares")
    names = {n.name for n in nodes}
    for name, _, path in entries:
        if name in names:
            raise doc.error(path, f"{name!r} is a node of the job already, not a spare")
    return tuple(replace(s, rank=-1) for s in _node_specs(doc, top, entries, overrides=False))


def _main(doc: Document, top: Mapping[str, Any], nodes: list[NodeSpec]) -> str:
    if top.get("main") is None:
        return nodes[0].name
    main = ck.text(doc, top["main"], ("main",))
    names = [n.name for n in nodes]
    if main not in names:
        raise doc.error(("main",), f"unknown node {main!r}; nodes are {NodeSet.fromlist(names)}")
    return main


def _ranked(nodes: list[NodeSpec], main: str) -> tuple[NodeSpec, ...]:
    """The main is rank 0; the others keep their listed order."""
    ordered = [n for n in nodes if n.name == main] + [n for n in nodes if n.name != main]
    return tuple(replace(n, rank=i) for i, n in enumerate(ordered))


def _check_launch(doc: Document, launch: LaunchPolicy) -> None:
    if launch.ready is ReadyMode.LOG and launch.ready_pattern is None:
        raise doc.error(("launch", "ready_pattern"), "required when ready is 'log'")


def _ssh_relative(file: str, ssh: SshPolicy) -> SshPolicy:
    """A relative ssh_config is relative to the config, so the two travel together."""
    if ssh.config is None or Path(ssh.config).is_absolute() or ssh.config.startswith("~"):
        return ssh
    return replace(ssh, config=str(Path(file).parent / ssh.config))


# A node before checking: its name, its own raw keys, and where it was written.
Entry = tuple[str, dict[str, Any], Path_]


def _node_source(doc: Document, value: Any, job: str) -> tuple[NodeSource | None, Any]:
    """`nodes: {hostfile: PATH}` or `{slurm: JOBID | auto}`: read now (or as the job's
    run recorded them), as a list of node mappings; a plain list passes through, and
    never loads nodesource (nor calls Slurm)."""
    if not isinstance(value, dict):
        return None, value
    from . import nodesource

    source = nodesource.resolve(doc, value, ("nodes",), job)
    listed = [
        {"name": n.name, **({"nproc_per_node": n.slots} if n.slots else {})} for n in source.nodes
    ]
    return source, listed


def _node_specs(
    doc: Document,
    top: Mapping[str, Any],
    entries: list[Entry],
    *,
    overrides: bool = True,
    lenient: bool = False,
) -> list[NodeSpec]:
    """`lenient`: nodes from a hostfile or Slurm differ from one read to the next, so
    overrides of nodes not given this time are skipped, not refused."""
    shared = ck.read(doc, NodeSpec, top, (), SHARED_KEYS)
    names = [name for name, _, _ in entries]
    named = _overrides(doc, top, names, lenient) if overrides else {}
    checks = ck.checks(NodeSpec)
    merging = ck.keys(NodeSpec, "merge")
    specs: list[NodeSpec] = []
    for name, raw, path in entries:
        given = {k: (x, (*path, k)) for k, x in raw.items()}
        given.update(named.get(name, {}))
        own = {k: checks[k](doc, x, p) for k, (x, p) in given.items() if x is not None}
        values = {**shared, **own}
        for k in merging & own.keys() & shared.keys():
            values[k] = {**shared[k], **own[k]}
        values.setdefault("host", name)
        specs.append(NodeSpec(**{**values, "name": name, "rank": len(specs)}))
    return specs


def _overrides(
    doc: Document, top: Mapping[str, Any], names: list[str], lenient: bool = False
) -> dict[str, dict[str, tuple[Any, Path_]]]:
    raw = top.get("overrides")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise doc.error(("overrides",), f"expected a mapping, got {ck.kind(raw)}")
    out: dict[str, dict[str, tuple[Any, Path_]]] = {}
    for name, o in raw.items():
        where: Path_ = ("overrides", name)
        if name not in names and lenient:
            ck.mapping(doc, o, where, NODE_KEYS - {"name"})
            continue
        if name not in names:
            raise doc.error(where, f"unknown node {name!r}; nodes are {NodeSet.fromlist(names)}")
        m = ck.mapping(doc, o, where, NODE_KEYS - {"name"})
        out[name] = {k: (x, (*where, k)) for k, x in m.items()}
    return out


def _node_entries(doc: Document, value: Any, key: str = "nodes") -> list[Entry]:
    """Nodes as `g[369-376]`, a list of names/node sets, or mappings with overrides."""
    items: list[tuple[Any, Path_]]
    if isinstance(value, str):
        items = [(value, (key,))]
    elif isinstance(value, list) and value:
        items = [(x, (key, i)) for i, x in enumerate(value)]
    else:
        raise doc.error(
            (key,),
            f"expected a node set like 'g[369-376]', a non-empty list, {{hostfile: PATH}} "
            f"or {{slurm: JOBID}}, got {ck.kind(value)}",
        )
    out: list[Entry] = []
    seen: dict[str, Path_] = {}
    for item, path in items:
        for name, raw in _node_item(doc, item, path, MAX_NODES - len(out)):
            if not NODE_RE.match(name):
                message = f"bad node name {name!r}: use letters, digits, '.', '-' and '_'"
                raise doc.error(path, message)
            if name in seen:
                raise doc.error(path, f"duplicate node {name!r}: also {_where(doc, seen[name])}")
            seen[name] = path
            out.append((name, raw, path))
        if len(out) > MAX_NODES:
            raise doc.error(path, _TOO_MANY)
    return out


_TOO_MANY = f"more than {MAX_NODES} nodes (mntui holds one SSH connection per node)"


def _where(doc: Document, path: Path_) -> str:
    line = doc.line(path)
    return format_path(path) + (f" (line {line})" if line is not None else "")


def _node_item(
    doc: Document, item: Any, path: Path_, room: int
) -> list[tuple[str, dict[str, Any]]]:
    """One entry of `nodes`, as (name, own keys) pairs; a node set of more than `room`
    nodes is refused before it is expanded."""
    if isinstance(item, dict):
        raw = ck.mapping(doc, item, path, NODE_KEYS)
        if "name" not in raw:
            raise doc.error(path, "a node mapping needs a 'name'")
        name = ck.text(doc, raw["name"], (*path, "name"))
        return [(name, {k: x for k, x in raw.items() if k != "name"})]
    if not isinstance(item, str):
        raise doc.error(path, f"expected a node name or a mapping, got {ck.kind(item)}")
    if _nodeset_bound(item) > room:  # before ClusterShell spends minutes on g[1-100000000]
        raise doc.error(path, _TOO_MANY)
    try:
        names = list(NodeSet(item))
    except NodeSetException as exc:
        raise doc.error(path, f"bad node set {item!r}: {exc}") from None
    if not names:
        raise doc.error(path, f"node set {item!r} names no node")
    return [(name, {}) for name in names]


def _nodeset_bound(text: str) -> int:
    """At least as many nodes as `text` expands to: the sum over its comma-separated
    patterns of the product of their bracket sizes (ranges counted without steps)."""
    total, size, depth, group = 0, 1, 0, ""
    for c in text + ",":
        if depth:
            if c == "]":
                depth, size = 0, size * sum(_range_size(r) for r in group.split(","))
            else:
                group += c
        elif c == "[":
            depth, group = 1, ""
        elif c in ",!&^":
            total, size = total + size, 1
    return total


def _range_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d{1,9})\s*-\s*(\d{1,9})\s*(/\s*\d+\s*)?", text)
    if m:
        return max(0, int(m[2]) - int(m[1])) + 1
    return 10**9 if re.search(r"\d{10}", text) else 1
