"""Every run the state dir remembers, read as far as it goes.

Records outlive the mntui that wrote them: an older run.json lacks keys this version
added, a newer one has keys it does not know, a crash may have left one unreadable.
`RunRecord.load` rightly refuses all of those (a verb must not guess); a history
takes what each file holds, skips what it cannot read and counts it, and never raises.
Each run is read into a small frozen view of the facts a history needs, no more, each
in its one shape (sessions/jsonshape.py): a value of another shape is missing, never a raise later.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mntui.sessions.errors import private_dir, state_dir
from mntui.sessions.jsonshape import Scalar, count, flat, listed, load, number, text
from mntui.sessions.runs import RUN_ID_RE


@dataclass(frozen=True)
class ReportView:
    cause_node: str | None
    cause: str
    first_at: float | None
    ended_at: float | None
    consequences: tuple[str, ...]  # the other nodes that showed a problem
    ending: str
    mistake: bool = False  # the root cause is the job's own (report finding's `mistake`)


@dataclass(frozen=True)
class RunView:
    job: str
    run_id: str
    chain: str
    attempt: int
    status: str
    created_at: float
    nodes: tuple[tuple[str, int | None], ...]  # (node, nproc) in rank order
    cause: str | None = None
    killed_nodes: tuple[str, ...] = ()
    notes: tuple[Mapping[str, Scalar], ...] = ()  # jsonshape.flat: nothing nested
    report: ReportView | None = None

    def last_note(self, what: str) -> Mapping[str, Scalar] | None:
        return next((h for h in reversed(self.notes) if h.get("what") == what), None)

    @property
    def ended_at(self) -> float | None:
        """The last thing the record says happened, once the run is over. A user's kill
        of a run that had already ended (it keeps its `failed` or `torn-down`, the kill
        is a note) came after its end: the chain's wall stops at the run's own end."""
        kept = (h for h in self.notes if self.status == "killed" or h.get("what") != "kill")
        times = [t for h in kept if (t := number(h.get("at"))) is not None]
        return max(times, default=None)


@dataclass(frozen=True)
class Scan:
    runs: tuple[RunView, ...]
    skipped: int = 0  # run.json files that could not be read at all
    partial: int = 0  # reports or notes that could not be read (the run was kept)
    doctor: tuple[Mapping[str, Scalar], ...] = field(default=())  # saved doctor rows


def read_report(run_dir: Path) -> ReportView:
    """The saved failure report's facts; ValueError or OSError when it cannot be read."""
    data = load(run_dir / "report.json")
    if not isinstance(data, dict):
        raise ValueError("not a report")
    root = text(data.get("cause_node"))
    others = []
    for n in listed(data, "nodes")[0]:
        name = text(n.get("node")) if isinstance(n, dict) else None
        if name and name != root and (n.get("finding") or n.get("first_problem_at")):
            others.append(name)
    mistake = any(  # a mistyped script, a module not installed: the job's, not the node's
        (flat(n.get("finding")) or {}).get("mistake") is True
        for n in listed(data, "nodes")[0]
        if isinstance(n, dict) and root is not None and n.get("node") == root
    )
    if not others:  # an older report: the consequences' text starts with the node
        for c in listed(data, "consequences")[0]:
            if isinstance(c, str) and " (node rank" in c:
                others.append(c.split(" (node rank", 1)[0])
    return ReportView(
        cause_node=root,
        cause=text(data.get("cause")) or "",
        first_at=number(data.get("first_at")),
        ended_at=number(data.get("ended_at")),
        consequences=tuple(dict.fromkeys(others)),
        ending=text(data.get("ending")) or "",
        mistake=mistake,
    )


def _nodes(data: dict[str, Any]) -> tuple[tuple[tuple[str, int | None], ...], int]:
    items, bad = listed(data, "nodes")
    nodes = []
    for n in items:
        name = text(n.get("node")) if isinstance(n, dict) else None
        if name is None:
            bad += 1
            continue
        nodes.append((name, count(n.get("nproc"), least=1)))
    return tuple(nodes), bad


def _notes(data: dict[str, Any]) -> tuple[tuple[Mapping[str, Scalar], ...], int]:
    items, bad = listed(data, "history")
    notes = [note for h in items if (note := flat(h)) is not None]
    return tuple(notes), bad + len(items) - len(notes)


def read_run(job: str, run_dir: Path) -> tuple[RunView | None, int]:
    """(the run, parts left out); (None, 0) when run.json itself cannot be read."""
    try:
        data = load(run_dir / "run.json")
    except (OSError, ValueError):
        return None, 0
    created = number(data.get("created_at")) if isinstance(data, dict) else None
    if not isinstance(data, dict) or created is None:
        return None, 0
    nodes, partial = _nodes(data)
    notes, left_out = _notes(data)
    killed, bad_killed = listed(data, "killed_nodes")
    partial += left_out + bad_killed
    report = None
    if (run_dir / "report.json").exists():
        try:
            report = read_report(run_dir)
        except (OSError, ValueError):
            partial += 1
    view = RunView(
        job=job,
        run_id=run_dir.name,
        chain=text(data.get("chain")) or run_dir.name,
        attempt=count(data.get("attempt")) or 0,
        status=text(data.get("status")) or "unknown",
        created_at=created,
        nodes=nodes,
        cause=text(data.get("cause")),
        killed_nodes=tuple(k for k in killed if isinstance(k, str)),
        notes=notes,
        report=report,
    )
    return view, partial


def _run_dirs(base: Path, job: str | None) -> Iterator[tuple[str, Path]]:
    try:
        jobs = [base / job] if job else [p for p in base.iterdir() if p.is_dir()]
    except OSError:
        return
    for job_dir in jobs:
        try:
            entries = os.listdir(job_dir)
        except OSError:
            continue
        for name in sorted(entries):
            if RUN_ID_RE.match(name):
                yield job_dir.name, job_dir / name


def scan(job: str | None = None, since: float | None = None, now: float | None = None) -> Scan:
    """Every run of every job (or of `job`) created within `since` seconds of `now`."""
    base = state_dir()
    cutoff = (time.time() if now is None else now) - since if since is not None else None
    runs, skipped, partial = [], 0, 0
    for name, run_dir in _run_dirs(base, job):
        if cutoff is not None and _day_of(run_dir.name) + 2 * 86400 < cutoff:
            continue  # the run id names its (local) day: skip older days unopened
        view, left_out = read_run(name, run_dir)
        if view is None:
            skipped += 1 if (run_dir / "run.json").exists() else 0
            continue
        partial += left_out
        if cutoff is None or view.created_at >= cutoff:
            runs.append(view)
    runs.sort(key=lambda r: (r.created_at, r.attempt))
    return Scan(tuple(runs), skipped, partial, tuple(read_doctor(base, job)))


def _day_of(run_id: str) -> float:
    try:
        return time.mktime(time.strptime(run_id[:8], "%Y%m%d"))
    except ValueError:
        return float("inf")


def read_doctor(base: Path, job: str | None) -> Iterator[Mapping[str, Scalar]]:
    """The rows of every saved `mntui doctor` run (doctorlog.save_doctor), flat."""
    for name, path in _doctor_files(base, job):
        try:
            data = load(path)
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        at = number(data.get("at"))
        for row in listed(data, "rows")[0]:
            kept = flat(row)
            if kept is not None and isinstance(kept.get("node"), str):
                yield {**kept, "job": name, "at": at}


def _doctor_files(base: Path, job: str | None) -> Iterator[tuple[str, Path]]:
    try:
        jobs = [base / job] if job else [p for p in base.iterdir() if p.is_dir()]
    except OSError:
        return
    for job_dir in jobs:
        folder = job_dir / "doctor"
        if folder.is_dir():
            for path in sorted(folder.glob("*.json")):
                yield job_dir.name, path


def save_doctor(job: str, rows: Sequence[Mapping[str, Any]], now: float | None = None) -> Path:
    """Keep one `mntui doctor` run's rows, so a node's history shows its failed checks."""
    now = time.time() if now is None else now
    folder = private_dir(state_dir() / job / "doctor")
    path = folder / f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}-{os.getpid()}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"at": now, "rows": [dict(r) for r in rows]}, fh)
    return path
