"""The job description: one YAML file, validated completely before anything runs.

Every error names the file, the line and the key path, because the person reading it
is about to launch on 64 GPUs and must not guess which of 30 lines is wrong.

Here is the job as a whole: JobConfig, whose fields are the file's top-level keys, and its
reading (load_config, parse_config), with the checks that span keys: required keys, the
main node and the ranks, spares, paths relative to the config file. Its parts are
settings.py's, its nodes nodes.py's, the rules for single values checks.py's and
jobchecks.py's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ClusterShell.NodeSet import NodeSet

from mntui.sessions.notify import NotifyPolicy

from . import checks as ck
from . import jobchecks as jc
from .nodes import SHARED_KEYS, node_entries, node_source, node_specs
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
from .yamlmarks import ConfigError, Document, Path_, load, loads

if TYPE_CHECKING:
    from .nodesource import NodeSource

__all__ = ["ConfigError", "JobConfig", "load_config", "parse_config"]


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


def _python_regex(doc: Document, value: Any, path: Path_) -> str:
    text = ck.text(doc, value, path)
    try:
        re.compile(text)
    except re.error as exc:
        raise doc.error(path, f"not a valid regular expression: {exc}") from None
    return text


@dataclass(frozen=True)
class JobConfig:
    path: str
    job: str = field(metadata=ck.meta(jc.job_name, required=True))
    nodes: tuple[NodeSpec, ...] = field(metadata=ck.meta(required=True))  # see nodes.py
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
    # a Python regex matching the job's "checkpoint saved" lines (a group `step`, if any,
    # names the step saved): the ledger's lost work; None: not followed
    checkpoint_pattern: str | None = field(default=None, metadata=ck.meta(_python_regex))
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
    def watch_port(self) -> int | None:
        """The coordinator's port on the main node, when the cluster watches the job:
        `where: auto` (the default) or `cluster`, the same now; None for `here`."""
        if self.watch.where == "here":
            return None
        return self.watch.port or self.master_port + 1

    @property
    def all_ports(self) -> tuple[int, ...]:
        own = (self.master_port, *[p for p in self.ports if p != self.master_port])
        w = self.watch_port
        return own if w is None or w in own else (*own, w)

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
    source, listed = node_source(doc, top["nodes"], settings["job"])
    nodes = node_specs(doc, top, node_entries(doc, listed), lenient=source is not None)
    main = _main(doc, top, nodes)
    spares = _spares(doc, top, nodes)
    ranked = _ranked(nodes, main)
    cfg = JobConfig(doc.file, nodes=ranked, main=main, spares=spares, nodes_from=source, **settings)
    _check_launch(doc, cfg.launch)
    _check_sync(doc, cfg)
    _check_watch(doc, cfg)
    return replace(cfg, ssh=_ssh_relative(doc.file, cfg.ssh))


def _check_watch(doc: Document, cfg: JobConfig) -> None:
    """A port the job uses cannot be the coordinator's."""
    if cfg.watch.where == "here":
        return
    if cfg.watch.port is not None and cfg.watch.port in (cfg.master_port, *cfg.ports):
        raise doc.error(
            ("watch", "port"), f"{cfg.watch.port} is one of the job's ports: pick another"
        )


def _check_sync(doc: Document, cfg: JobConfig) -> None:
    bare = [n.name for n in cfg.nodes if n.workdir is None]
    if cfg.sync is not None and bare:
        message = f"copies into each node's workdir, and {NodeSet.fromlist(bare)} has none"
        raise doc.error(("sync",), message + ": set workdir")


def _spares(doc: Document, top: Mapping[str, Any], nodes: list[NodeSpec]) -> tuple[NodeSpec, ...]:
    """Spare nodes take the job's shared settings, as the nodes do; never one of them."""
    if top.get("spares") is None:
        return ()
    entries = node_entries(doc, top["spares"], "spares")
    names = {n.name for n in nodes}
    for name, _, path in entries:
        if name in names:
            raise doc.error(path, f"{name!r} is a node of the job already, not a spare")
    return tuple(replace(s, rank=-1) for s in node_specs(doc, top, entries, overrides=False))


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
