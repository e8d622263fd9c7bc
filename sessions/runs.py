"""The local record of runs, so `kill`, `logs`, `status` and `attach` need no flags.

Kept under $XDG_STATE_HOME/mntui/<job>/<run_id>/run.json. Several processes write it
(the launch, the records' sync of every look, a user's `mntui kill`, the app), so every
write goes to a temp file of its own, is fsynced and renamed into place, and every
read-modify-write holds the run's lock: a half-written or lost record must never hide a
live job, and an unreadable record reads as "unknown", never as "ended".
Directories are 0700 and files 0600: records hold the job's log lines.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from .errors import UsageError, private_dir, state_dir
from .jsonshape import (
    Check,
    is_count,
    is_map,
    is_str,
    is_time,
    list_of,
    load_identified,
    optional,
    shaped,
)
from .node.rules.runid import RUN_ID

__all__ = [
    "NodeRecord",
    "RunRecord",
    "RunStatus",
    "check_run_id",
    "latest",
    "live_runs",
    "load_run",
    "read_status",
    "state_dir",
]

RUN_ID_RE = RUN_ID  # the node package's rule: a sentinel checks the same ids
SPARES_NOTE = "cluster-spares"  # the first record's note of the spares' hosts (plan.py)
# a user's kill found processes a sentinel's clean report had left (launch/userkill.py)
MISSED_NOTE = "kill-missed"


class RunStatus(StrEnum):
    LAUNCHING = "launching"
    RUNNING = "running"
    KILLING = "killing"  # a user's kill is under way
    KILLED = "killed"  # by the user: nobody restarts or reports it
    ABORTED = "aborted"  # the launch failed and stopped what it had started
    TORN_DOWN = "torn-down"  # the cluster's watch took it down
    FINISHED = "finished"  # every node exited 0
    FAILED = "failed"  # ended by itself, a node with a non-zero exit code
    RESTARTING = "restarting"  # ended, and its coordinator starts the next attempt
    GAVE_UP = "gave-up"  # ended, and the restart policy's `max` is spent

    @property
    def is_live(self) -> bool:
        """The job may hold processes (a watch guards them, or nothing does)."""
        return self in (RunStatus.LAUNCHING, RunStatus.RUNNING, RunStatus.RESTARTING)

    @property
    def is_stopping(self) -> bool:
        return self is RunStatus.KILLING

    @property
    def may_restart(self) -> bool:
        """Ended in a way the restart policy may relaunch from: until its supervisor marks
        it `restarting`, the chain's next attempt is still undecided."""
        return self in (RunStatus.TORN_DOWN, RunStatus.FAILED, RunStatus.ABORTED)


def check_run_id(run_id: str) -> str:
    """`--run` names a run, never a path (`../../x` would reach outside the state dir)."""
    if not RUN_ID_RE.match(run_id):
        raise UsageError(
            f"--run {run_id!r}: not a run id (they look like 20261122-105313-8e89; "
            "`mntui status` shows the latest)"
        )
    return run_id


@dataclass(frozen=True)
class NodeRecord:
    node: str
    host: str
    rank: int
    session: str
    tag: str
    run_dir: str
    started_at: float | None = None
    nproc: int | None = None  # the node's processes (None: recorded before nodes could differ)


@dataclass
class RunRecord:
    job: str
    run_id: str
    config: str
    master_addr: str
    master_port: int
    nodes: list[NodeRecord]
    created_at: float = field(default_factory=time.time)
    status: RunStatus = RunStatus.LAUNCHING
    ready_at: float | None = None
    finished_launch_at: float | None = None
    error: str | None = None
    cause: str | None = None  # the failure report's headline, once there is one
    chain: str | None = None  # run id of the chain's first attempt (restarts link here)
    attempt: int = 0  # 0: the first launch; N: the Nth restart
    attempts: list[dict[str, Any]] = field(default_factory=list)  # the chain's earlier ends
    history: list[dict[str, Any]] = field(default_factory=list)
    # nodes from a hostfile or Slurm: the source and the nodes it gave at launch, so the
    # run's later commands see them after the allocation ends (nodesource.NodeSource)
    node_source: dict[str, Any] | None = None
    # nodes a user's `mntui kill NODE` stopped: what follows from that is the user's doing,
    # never a failure to restart from or a node to blame
    killed_nodes: list[str] = field(default_factory=list)
    # the coordinator's port on the main node when the cluster watches the run (its
    # sentinels and coordinator run there; this machine may sleep); None: watched from here
    watch_port: int | None = None

    @property
    def dir(self) -> Path:
        return state_dir() / self.job / self.run_id

    def node(self, name: str) -> NodeRecord:
        return next(n for n in self.nodes if n.node == name)

    @property
    def main(self) -> NodeRecord:
        """The run's main: its rank-0 node (torchrun's master; the cluster's coordinator
        and board), wherever the record lists it; the first node only for a record with
        no rank 0. The one rule every reader of "the main" asks. IndexError: no nodes."""
        return next((n for n in self.nodes if n.rank == 0), None) or self.nodes[0]

    @property
    def stopped_by_user(self) -> bool:
        """A user's full kill reached this run: its chain ends here. A run that had
        already failed keeps its own ending (history counts it); the kill is the note."""
        return any(h.get("what") == "kill" and "nodes" not in h for h in self.history)

    def note(self, what: str, **details: Any) -> None:
        self.history.append({"at": time.time(), "what": what, **details})

    def create(self) -> Path:
        """The first save of a new run, which also becomes the job's latest run."""
        path = self.save()
        write_atomic(self.dir.parent / "latest", self.run_id + "\n")
        return path

    def create_once(self) -> bool:
        """`create`, unless the run has a record already (another process wrote it, or
        a kill marked it, since this one looked): False then, and nothing written."""
        with _locked(self.dir):
            if (self.dir / "run.json").exists():
                return False
            self._write()
        write_atomic(self.dir.parent / "latest", self.run_id + "\n")
        return True

    def save(self) -> Path:
        with _locked(self.dir):
            return self._write()

    def update(self, change: Callable[[RunRecord], object]) -> RunRecord:
        """Read-modify-write under the run's lock: `change` is applied to what is on disk
        now (another process may have written since this object was loaded), and this
        object then follows what was saved."""
        with _locked(self.dir):
            current = _read(self.dir / "run.json") or self
            change(current)
            current._write()
        for f in fields(self):
            setattr(self, f.name, getattr(current, f.name))
        return self

    def _write(self) -> Path:
        data = asdict(self)
        data["status"] = self.status.value
        return write_atomic(self.dir / "run.json", json.dumps(data, indent=2))

    @classmethod
    def load(cls, path: Path) -> RunRecord:
        """ValueError for a file that is no record of this shape (jsonshape.load bounds
        its size and depth), so no reader meets a number, list or map it cannot use."""
        data, seen = load_identified(path)
        if seen not in _SHAPED:
            if not shaped(data, _RUN):
                raise ValueError(f"{path}: not a run record this mntui can read")
            if len(_SHAPED) >= SHAPED_MAX:  # the app reads for days
                _SHAPED.clear()
            _SHAPED.add(seen)
        data.pop("cluster_attempts", None)
        data["nodes"] = [NodeRecord(**n) for n in data["nodes"]]
        data["status"] = RunStatus(data["status"])
        return cls(**data)


# Records whose shape was checked in this process, by the bytes read (jsonshape's
# identity of them): a kill reads its run's record a dozen times and at 64 nodes each
# check of every node's keys cost ~9 ms; a record is only ever replaced whole.
_SHAPED: set[tuple[int, int, int, int]] = set()
SHAPED_MAX = 1024

_NODE: dict[str, Check] = {
    **dict.fromkeys(("node", "host", "session", "tag", "run_dir"), is_str),
    "rank": is_count,
    "started_at": optional(is_time),
    "nproc": optional(is_count),
}
_RUN: dict[str, Check] = {
    **dict.fromkeys(("job", "run_id", "config", "master_addr"), is_str),
    **dict.fromkeys(("error", "cause", "chain"), optional(is_str)),
    **dict.fromkeys(("ready_at", "finished_launch_at"), optional(is_time)),
    "master_port": is_count,
    "attempt": is_count,
    "created_at": is_time,
    "status": lambda v: isinstance(v, str) and v in RunStatus._value2member_map_,
    "nodes": list_of(lambda n: shaped(n, _NODE)),
    "attempts": list_of(is_map),
    "history": list_of(is_map),
    "node_source": optional(is_map),
    "killed_nodes": list_of(is_str),
    "watch_port": optional(is_count),
    # read, never written: the run ids a launch before issue 37 chose for its restarts
    # (the coordinator names them now: watch/clusterchain.py)
    "cluster_attempts": list_of(is_str),
}


def write_atomic(path: Path, text: str) -> Path:
    """A private file (0600) replaced whole: a reader never sees half of it."""
    import tempfile  # a reader never writes: not on a cold `status`'s way

    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:  # mkstemp: mode 0600
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


@contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    private_dir(run_dir)
    fd = os.open(run_dir / "record.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read(path: Path) -> RunRecord | None:
    try:
        return RunRecord.load(path)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_run(job: str, run_id: str) -> RunRecord | None:
    return _read(state_dir() / job / run_id / "run.json")


def read_status(job: str, run_id: str) -> RunStatus | None:
    """The run's status, or None when it cannot be read: unknown, which is no proof
    that the job ended."""
    record = load_run(job, run_id)
    return record.status if record is not None else None


def latest(job: str) -> RunRecord | None:
    try:
        run_id = (state_dir() / job / "latest").read_text().strip()
    except OSError:
        return None
    return load_run(job, run_id) if RUN_ID_RE.match(run_id) else None


def live_runs(job: str) -> list[RunRecord]:
    """The latest run of each of the job's chains, where it may still hold processes or
    be about to (a chain in its backoff): a user's kill must end all of them. An earlier
    attempt stays `restarting` once its successor exists; it is history, and a kill
    that rewrote it would erase the failure it ended with."""
    heads: dict[str, RunRecord] = {}
    for path in sorted((state_dir() / job).glob("*/run.json")):
        if not RUN_ID_RE.match(path.parent.name) or (rec := _read(path)) is None:
            continue
        head = heads.get(rec.chain or rec.run_id)
        if head is None or (rec.attempt, rec.created_at) >= (head.attempt, head.created_at):
            heads[rec.chain or rec.run_id] = rec
    return [r for r in heads.values() if r.status.is_live]
