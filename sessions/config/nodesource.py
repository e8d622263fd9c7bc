"""Nodes from where clusters keep them: a DeepSpeed/MPI hostfile or a Slurm allocation.

`salloc -N 4` puts the nodes in SLURM_JOB_NODELIST, DeepSpeed users have a hostfile:
typed again into the YAML they go stale as soon as the allocation changes, so the config
names the source and each command reads it when it runs. The run record keeps what a
launch read, and that wins while the run is live and whenever the source fails now: a
kill must reach the nodes the job runs on, not those of the next allocation.

Parsing is pure (parse_hostfile, choose); reading the file and asking Slurm
(slurmjobs.py) is resolve()'s. A config with a plain node list never loads this module.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from ClusterShell.NodeSet import NodeSet

from mntui.sessions.runs import latest

from .checks import CONTROL_RE
from .nodenames import MAX_NODES, NODE_RE
from .settings import MAX_NPROC
from .slurmjobs import expand_nodelist, job_problem, show_job
from .yamlmarks import ConfigError, Document, Path_

JOB_ID_RE = re.compile(r"[0-9]{1,12}(?:_[0-9]{1,12})?\Z")  # a job, or one task of an array
MAX_HOSTFILE = 1 << 20


class SourceKind(StrEnum):
    LIST = "list"  # typed into the config
    HOSTFILE = "hostfile"
    SLURM = "slurm"


@dataclass(frozen=True)
class Listed:
    name: str
    slots: int | None = None  # the node's nproc_per_node; None: the job's


@dataclass(frozen=True)
class NodeSource:
    kind: SourceKind
    spec: str  # as configured ("slurm auto", "hostfile /abs/hosts"): what records match on
    detail: str  # what it gave: "Slurm job 42 (SLURM_JOB_ID), NodeList g[1-4]"
    nodes: tuple[Listed, ...]
    run: str | None = None  # the nodes this run recorded at its launch, not read now
    why: str | None = None  # why the recorded ones: what the source says now

    def to_record(self) -> dict[str, Any]:
        nodes = [[n.name, n.slots] for n in self.nodes]
        return {"kind": self.kind.value, "spec": self.spec, "detail": self.detail, "nodes": nodes}


def from_record(data: object, run: str) -> NodeSource | None:
    """The source a run recorded, or None where its record holds none readable."""
    if not isinstance(data, dict):
        return None
    try:
        kind, spec, detail = SourceKind(data["kind"]), data["spec"], data["detail"]
        nodes = tuple(_listed(x) for x in data["nodes"])
    except (KeyError, ValueError, TypeError):
        return None
    if not (isinstance(spec, str) and isinstance(detail, str) and nodes):
        return None
    return NodeSource(kind, spec, detail, nodes, run=run)


def _listed(item: object) -> Listed:
    if not isinstance(item, list) or len(item) != 2:
        raise ValueError(item)
    name, slots = item
    if not isinstance(name, str) or not NODE_RE.match(name):
        raise ValueError(name)
    if slots is not None and (type(slots) is not int or not 1 <= slots <= MAX_NPROC):
        raise ValueError(slots)
    return Listed(name, slots)


# ---- the config's `nodes: {hostfile: PATH}` / `{slurm: JOBID | auto}` ----------------


@dataclass(frozen=True)
class Source:
    kind: SourceKind
    value: str  # the hostfile's absolute path, a job id, or "auto"

    @property
    def spec(self) -> str:
        return f"{self.kind.value} {self.value}"


def read_source(doc: Document, value: Any, path: Path_) -> Source:
    usage = "a node source is {hostfile: PATH} or {slurm: JOBID} or {slurm: auto}"
    keys = list(value) if isinstance(value, dict) else []
    for key in keys:
        if key not in ("hostfile", "slurm"):
            raise doc.error((*path, key), f"unknown key: {usage}")
    if len(keys) != 1:
        raise doc.error(path, f"one source only: {usage}")
    key = keys[0]
    where = (*path, key)
    text = doc.text(where) if isinstance(value[key], (str, int)) else None
    if not text or not text.strip() or CONTROL_RE.search(text) or isinstance(value[key], bool):
        raise doc.error(where, f"expected a {'path' if key == 'hostfile' else 'job id'}: {usage}")
    if key == "hostfile":
        file = Path(os.path.expanduser(text))
        return Source(SourceKind.HOSTFILE, str(Path(doc.file).parent / file))
    if text != "auto" and not JOB_ID_RE.match(text):
        raise doc.error(where, f"{text!r} is not a Slurm job id (like 1234 or 1234_7) or auto")
    return Source(SourceKind.SLURM, text)


def resolve(doc: Document, value: Any, path: Path_, job: str) -> NodeSource:
    """The nodes of the source in `value`: read now, or as the job's latest run recorded
    them (see choose). Raises ConfigError, naming the file and line or the Slurm job."""
    source = read_source(doc, value, path)
    where = (*path, source.kind.value)
    fresh: NodeSource | ConfigError
    try:
        if source.kind is SourceKind.HOSTFILE:
            fresh = read_hostfile(doc, source, where)
        else:
            fresh = read_slurm(doc, source, where, os.environ)
    except ConfigError as exc:
        fresh = exc
    return choose(fresh, _recorded(job, source.spec))


def choose(fresh: NodeSource | ConfigError, recorded: tuple[NodeSource, bool] | None) -> NodeSource:
    """What the source gives now, unless the job's latest run, from the same source,
    recorded others: those win while that run is live (its kill must reach them) and
    whenever the source fails now (its status and logs can still be shown). A launch
    refuses recorded nodes (launch.check_nodes_fresh)."""
    if recorded is not None:
        was, live = recorded
        if isinstance(fresh, ConfigError):
            return replace(was, why=fresh.message)
        if live and fresh.nodes != was.nodes:
            why = (
                f"{fresh.detail} gives {_names(fresh)} now, but run {was.run} is live on "
                f"{_names(was)}: `mntui kill` ends it, then a launch reads the nodes anew"
            )
            return replace(was, why=why)
    if isinstance(fresh, ConfigError):
        raise fresh
    return fresh


def _names(source: NodeSource) -> str:
    return str(NodeSet.fromlist([n.name for n in source.nodes]))


def _recorded(job: str, spec: str) -> tuple[NodeSource, bool] | None:
    record = latest(job)
    if record is None:
        return None
    source = from_record(record.node_source, record.run_id)
    if source is None or source.spec != spec:
        return None
    return source, record.status.is_live


# ---- hostfiles ---------------------------------------------------------------------


def read_hostfile(doc: Document, source: Source, where: Path_) -> NodeSource:
    path = Path(source.value)
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_HOSTFILE + 1)
    except OSError as exc:
        raise doc.error(where, f"cannot read hostfile {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_HOSTFILE:
        raise ConfigError(str(path), None, "", "larger than 1 MiB: not a hostfile")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(str(path), line, "", "not valid UTF-8: not a hostfile") from None
    try:
        nodes = parse_hostfile(text, str(path))
    except ConfigError as exc:
        message = f"{exc.message} (nodes.hostfile of {doc.file}:{doc.line(where)})"
        raise ConfigError(exc.file, exc.line, "", message) from None
    return NodeSource(
        SourceKind.HOSTFILE, source.spec, f"hostfile {path} ({len(nodes)} host(s))", nodes
    )


def parse_hostfile(text: str, file: str = "<hostfile>") -> tuple[Listed, ...]:
    """DeepSpeed's and MPI's format: `host slots=N` a line (`max_slots=M` is read and
    ignored), `#` comments, blank lines. Raises ConfigError naming the file and line."""
    nodes: list[Listed] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        host, *options = line.split()
        if CONTROL_RE.search(line):
            raise ConfigError(file, number, "", "contains a control character")
        if not NODE_RE.match(host):
            message = f"bad host name {host!r}: use letters, digits, '.', '-' and '_'"
            raise ConfigError(file, number, "", message)
        if host in seen:
            raise ConfigError(file, number, "", f"{host} is listed twice (also line {seen[host]})")
        seen[host] = number
        nodes.append(Listed(host, _slots(options, file, number)))
        if len(nodes) > MAX_NODES:
            raise ConfigError(file, number, "", f"more than {MAX_NODES} hosts")
    if not nodes:
        raise ConfigError(file, None, "", "names no host (a line is `host slots=N`)")
    return tuple(nodes)


# ASCII digits, and few: `str.isdigit` also takes '²', which int() refuses.
_COUNT_RE = re.compile("[0-9]{1,6}", re.ASCII)


def _slots(options: list[str], file: str, number: int) -> int | None:
    slots: int | None = None
    for option in options:
        key, eq, value = option.partition("=")
        if not eq or key not in ("slots", "max_slots", "max-slots"):
            message = f"unknown {option!r}: a line is `host slots=N`"
            raise ConfigError(file, number, "", message)
        if not _COUNT_RE.fullmatch(value) or not 1 <= int(value) <= MAX_NPROC:
            message = f"{option[:40]}: expected {key}=N, N from 1 to {MAX_NPROC}"
            raise ConfigError(file, number, "", message)
        if key == "slots":
            if slots is not None:
                raise ConfigError(file, number, "", "slots given twice")
            slots = int(value)
    return slots


# ---- Slurm -------------------------------------------------------------------------


def read_slurm(doc: Document, source: Source, where: Path_, env: Mapping[str, str]) -> NodeSource:
    job_id, auto = source.value, source.value == "auto"
    if auto:
        job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
        if not job_id:
            message = (
                "`slurm: auto` reads SLURM_JOB_ID, and none is set: run mntui inside the "
                "allocation (salloc, or an sbatch script), or give the job id"
            )
            raise doc.error(where, message)
        if not JOB_ID_RE.match(job_id):
            raise doc.error(where, f"SLURM_JOB_ID={job_id[:40]!r} is not a Slurm job id")
    how = " (SLURM_JOB_ID)" if auto else ""
    try:
        if shutil.which("scontrol") is None and auto and env.get("SLURM_JOB_NODELIST"):
            nodelist = env["SLURM_JOB_NODELIST"]
            detail = f"Slurm job {job_id}{how}, SLURM_JOB_NODELIST {nodelist} (no scontrol here)"
        else:
            job = show_job(job_id)
            problem = job_problem(job, os.getuid())
            if problem is not None:
                raise ValueError(problem)
            nodelist, detail = job.nodelist, f"Slurm job {job_id}{how}, NodeList {job.nodelist}"
        names = expand_nodelist(nodelist)
    except ValueError as exc:
        raise doc.error(where, str(exc)) from None
    return NodeSource(SourceKind.SLURM, source.spec, detail, tuple(Listed(n) for n in names))
