"""Nodes from where clusters keep them: a DeepSpeed/MPI hostfile or a Slurm allocation.

`salloc -N 4` puts the nodes in SLURM_JOB_NODELIST, DeepSpeed users have a hostfile:
typed again into the YAML they go stale as soon as the allocation changes, so the config
names the source and each command reads it when it runs. The run record keeps what a
launch read, and that wins while the run is live and whenever the source fails now: a
kill must reach the nodes the job runs on, not those of the next allocation.

Parsing is pure (parse_hostfile, parse_job, choose); reading the file and asking Slurm
is resolve()'s. A config with a plain node list never loads this module.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ClusterShell.NodeSet import NodeSet, NodeSetException

from .config import CONTROL_RE, MAX_NODES, MAX_NPROC, NODE_RE, _nodeset_bound
from .yamlmarks import ConfigError, Document, Path_

if TYPE_CHECKING:
    from .config import JobConfig

JOB_ID_RE = re.compile(r"[0-9]{1,12}(?:_[0-9]{1,12})?\Z")  # a job, or one task of an array
SLURM_TIMEOUT = 20.0  # scontrol retries an unreachable slurmctld for MessageTimeout (10 s)
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
    from .runs import latest  # runs -> plan -> config: not at import time

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


def _slots(options: list[str], file: str, number: int) -> int | None:
    slots: int | None = None
    for option in options:
        key, eq, value = option.partition("=")
        if not eq or key not in ("slots", "max_slots", "max-slots"):
            message = f"unknown {option!r}: a line is `host slots=N`"
            raise ConfigError(file, number, "", message)
        if not value.isdigit() or not 1 <= int(value) <= MAX_NPROC:
            message = f"{option}: expected {key}=N, N from 1 to {MAX_NPROC}"
            raise ConfigError(file, number, "", message)
        if key == "slots":
            if slots is not None:
                raise ConfigError(file, number, "", "slots given twice")
            slots = int(value)
    return slots


# ---- Slurm -------------------------------------------------------------------------


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    state: str
    user: str
    uid: int
    nodelist: str
    reason: str | None


_JOB_FIELDS = ("JobId", "JobState", "UserId", "NodeList")


def parse_job(text: str) -> SlurmJob:
    """`scontrol -o show job ID`: one line of Key=Value words. A value may hold spaces
    (JobName, Comment) and so look like another key: a key we read that appears twice
    is refused, never guessed. Raises ValueError saying why."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        raise ValueError(f"{len(lines)} records: an array or heterogeneous job; give one id")
    found: dict[str, list[str]] = {}
    for word in lines[0].split():
        key, eq, value = word.partition("=")
        if eq:
            found.setdefault(key, []).append(value)
    for key in _JOB_FIELDS:
        if key not in found:
            raise ValueError(f"no {key}= in scontrol's answer")
        if len(found[key]) > 1:
            raise ValueError(f"{key}= more than once in scontrol's answer (in a job name?)")
    user = re.fullmatch(r"([^()]*)\(([0-9]{1,10})\)", found["UserId"][0])
    if user is None:
        raise ValueError(f"unreadable UserId={found['UserId'][0]!r}")
    reasons = found.get("Reason", [])
    return SlurmJob(
        found["JobId"][0],
        found["JobState"][0],
        user[1],
        int(user[2]),
        found["NodeList"][0],
        reasons[0] if len(reasons) == 1 and reasons[0] != "None" else None,
    )


def job_problem(job: SlurmJob, uid: int) -> str | None:
    """Why the job's nodes are not ours to launch on, or None."""
    name = f"Slurm job {job.job_id}"
    if job.state != "RUNNING":
        because = f" ({job.reason})" if job.reason else ""
        if job.state in ("PENDING", "CONFIGURING"):
            return f"{name} is {job.state}{because}, not running yet: wait until it starts"
        return (
            f"{name} is {job.state}{because}, not running: its nodes are given back "
            "(start an allocation and give its id, or `slurm: auto` inside it)"
        )
    if job.uid != uid:
        return (
            f"{name} belongs to {job.user} (uid {job.uid}), not to you (uid {uid}): "
            "mntui launches only on your own allocation"
        )
    return None


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


def show_job(job_id: str) -> SlurmJob:
    name = f"Slurm job {job_id}"
    try:
        res = scontrol("-o", "show", "job", job_id)
    except FileNotFoundError:
        raise ValueError(
            f"{name}: scontrol not found (install slurm-client, or list the nodes)"
        ) from None
    if res.returncode != 0:
        said = _first_line(res.stderr or res.stdout)
        if "Invalid job id" in said:
            raise ValueError(f"no {name}: it never existed or ended long ago (Slurm forgets it)")
        raise ValueError(f"{name}: scontrol failed: {said or f'exit {res.returncode}'}")
    try:
        return parse_job(res.stdout)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def scontrol(*args: str) -> subprocess.CompletedProcess[str]:
    """Raises FileNotFoundError without scontrol, and ValueError when it hangs."""
    exe = shutil.which("scontrol")
    if exe is None:
        raise FileNotFoundError("scontrol")
    try:
        return subprocess.run(
            [exe, *args],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=SLURM_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise ValueError(
            f"scontrol gave no answer in {SLURM_TIMEOUT:g}s (is slurmctld up?)"
        ) from None


def _first_line(text: str) -> str:
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    return CONTROL_RE.sub("?", line)[:200]


def expand_nodelist(text: str) -> tuple[str, ...]:
    """Slurm's own expansion (`scontrol show hostnames`), in its order; ClusterShell's
    where scontrol refuses the list, as 22.05 does `gpu-[01-03]-ib`. Raises ValueError."""
    if not text or text == "(null)":
        raise ValueError("the job holds no nodes")
    if _nodeset_bound(text) > MAX_NODES:
        raise ValueError(f"node list {text[:80]!r}: more than {MAX_NODES} nodes")
    names = _hostnames(text)
    if names is None:
        try:
            names = tuple(NodeSet(text))
        except NodeSetException as exc:
            raise ValueError(f"bad node list {text[:80]!r}: {exc}") from None
    bad = [n for n in names if not NODE_RE.match(n)]
    if bad or not names:
        raise ValueError(f"node list {text[:80]!r} gives bad node names: {bad[:3]}")
    if len(set(names)) != len(names):
        raise ValueError(f"node list {text[:80]!r} names a node twice")
    return names


def _hostnames(text: str) -> tuple[str, ...] | None:
    """scontrol's answer, or None where it gives none that is clean: it exits 0 after
    `Invalid hostlist`, and prints `x]` for `x[1-3`."""
    try:
        res = scontrol("show", "hostnames", text)
    except (FileNotFoundError, ValueError):
        return None
    names = tuple(res.stdout.split())
    clean = res.returncode == 0 and not res.stderr.strip() and names
    return names if clean and all(NODE_RE.match(n) for n in names) else None


# ---- `mntui nodes` -----------------------------------------------------------------


def listing(cfg: JobConfig) -> dict[str, Any]:
    """The nodes a command of this job uses now: ranks, processes, and where from."""
    src = cfg.nodes_from
    source: dict[str, Any] = {"kind": SourceKind.LIST.value, "detail": f"the list in {cfg.path}"}
    if src is not None:
        source = {"kind": src.kind.value, "spec": src.spec, "detail": src.detail}
        source |= {"recorded_by_run": src.run, "why": src.why} if src.run else {}
    nodes = [
        {"rank": n.rank, "node": n.name, "host": n.host, "nproc": cfg.nproc(n), "main": n.rank == 0}
        for n in cfg.nodes
    ]
    return {"job": cfg.job, "world_size": cfg.world_size, "source": source, "nodes": nodes}


def format_listing(data: dict[str, Any]) -> str:
    src = data["source"]
    lines = [
        f"job {data['job']}: {len(data['nodes'])} node(s), world size {data['world_size']}",
        f"nodes from {src['detail']}",
    ]
    if src.get("recorded_by_run"):
        lines.append(f"as recorded by run {src['recorded_by_run']}: {src['why']}")
    table = [("RANK", "NODE", "HOST", "NPROC", "ROLE")] + [
        (str(n["rank"]), n["node"], n["host"], str(n["nproc"]), "main" if n["main"] else "worker")
        for n in data["nodes"]
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in table]
    return "\n".join(line.rstrip() for line in lines)
