"""The local record of runs, so `kill`, `logs`, `status` and `attach` need no flags.

Kept under $XDG_STATE_HOME/mntui/<job>/<run_id>/run.json, written atomically:
a crashed mntui must never leave a half-written record that hides a live job.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .plan import Plan


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "mntui"


@dataclass(frozen=True)
class NodeRecord:
    node: str
    host: str
    rank: int
    session: str
    tag: str
    run_dir: str
    started_at: float | None = None


@dataclass
class RunRecord:
    job: str
    run_id: str
    config: str
    master_addr: str
    master_port: int
    nodes: list[NodeRecord]
    created_at: float = field(default_factory=time.time)
    status: str = "launching"
    ready_at: float | None = None
    finished_launch_at: float | None = None
    error: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_plan(cls, plan: Plan, config: str) -> RunRecord:
        return cls(
            plan.job,
            plan.run_id,
            os.path.abspath(config),
            plan.master_addr,
            plan.master_port,
            [NodeRecord(n.node, n.host, n.rank, n.session, n.tag, n.run_dir) for n in plan.nodes],
        )

    @property
    def dir(self) -> Path:
        return state_dir() / self.job / self.run_id

    def node(self, name: str) -> NodeRecord:
        return next(n for n in self.nodes if n.node == name)

    def note(self, what: str, **details: Any) -> None:
        self.history.append({"at": time.time(), "what": what, **details})

    def save(self) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / "run.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)
        latest = self.dir.parent / "latest"
        tmp_latest = latest.with_suffix(".tmp")
        tmp_latest.write_text(self.run_id + "\n")
        tmp_latest.replace(latest)
        return path

    @classmethod
    def load(cls, path: Path) -> RunRecord:
        data = json.loads(path.read_text())
        data["nodes"] = [NodeRecord(**n) for n in data["nodes"]]
        return cls(**data)


def load_run(job: str, run_id: str) -> RunRecord | None:
    try:
        return RunRecord.load(state_dir() / job / run_id / "run.json")
    except (OSError, ValueError, KeyError, TypeError):
        return None


def latest(job: str) -> RunRecord | None:
    try:
        run_id = (state_dir() / job / "latest").read_text().strip()
    except OSError:
        return None
    return load_run(job, run_id)
