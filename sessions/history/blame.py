"""Which node keeps breaking my jobs: every run's ending folded into a history per node.

A run's ending names one node as its cause (the failure report's root cause, else the
node the watch tore the job down for) and the others that only showed the fault's
consequences (collective timeouts, a peer gone). A node that a user killed is never
blamed for what followed. Pure: it folds what records.scan read, each value already
in its shape (sessions/jsonshape.py), so nothing here converts or raises.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from mntui.sessions.jsonshape import Scalar, number, text

from .records import RunView, Scan

ENDED = frozenset({"failed", "torn-down", "restarting", "gave-up"})
SHOWN = 5  # failures listed under each node


@dataclass(frozen=True)
class Failure:
    job: str
    run_id: str
    node: str  # the node that caused it
    at: float  # the fault (the report's first problem), else the teardown
    kind: str  # the state that ended the run: failed, frozen, unreachable, ...
    cause: str


@dataclass(frozen=True)
class DoctorFail:
    job: str
    at: float | None
    check: str
    detail: str


@dataclass(frozen=True)
class NodeHistory:
    node: str
    runs: int  # runs it took part in
    caused: tuple[Failure, ...]  # newest first
    consequence_of: tuple[Failure, ...]  # other nodes' failures it was caught in
    doctor: tuple[DoctorFail, ...]

    @property
    def share(self) -> float | None:
        """Of the runs it took part in, the fraction it ended."""
        return len(self.caused) / self.runs if self.runs else None

    def kinds(self) -> dict[str, int]:
        return dict(Counter(f.kind for f in self.caused).most_common())

    def caused_within(self, seconds: float, now: float) -> int:
        return sum(1 for f in self.caused if f.at >= now - seconds)

    def plain(self) -> dict[str, Any]:
        return {**asdict(self), "share": self.share, "kinds": self.kinds()}


def failure_of(run: RunView) -> Failure | None:
    """The node that ended `run`, and how; None for a run no node ended."""
    teardown = run.last_note("watchdog-teardown")
    report = run.report
    node = report.cause_node if report is not None else None
    note: Mapping[str, Scalar] = teardown or {}
    torn = text(note.get("node"))
    node = node or torn
    if node is None or node in run.killed_nodes:
        return None
    if report is not None and report.mistake:  # the job's own mistake: never the node's
        return None
    # a run its chain chose to restart had ended by itself, even if a user's kill in
    # its backoff marked it `killed` afterwards
    if teardown is None and run.status not in ENDED and run.last_note("restart") is None:
        return None
    kind = (text(note.get("state")) if torn == node else None) or "failed"
    at = report.first_at if report is not None else None
    at = at if at is not None else number(note.get("at"))
    cause = (report.cause if report is not None else "") or text(note.get("why")) or ""
    return Failure(run.job, run.run_id, node, at or run.created_at, kind, cause or run.cause or "")


def fold(scan: Scan) -> list[NodeHistory]:
    """One history per node any run used, the nodes that caused most failures first."""
    runs: Counter[str] = Counter()
    caused: dict[str, list[Failure]] = {}
    caught: dict[str, list[Failure]] = {}
    for run in scan.runs:
        names = [n for n, _ in run.nodes]
        runs.update(set(names))
        failure = failure_of(run)
        if failure is None:
            continue
        caused.setdefault(failure.node, []).append(failure)
        for other in run.report.consequences if run.report is not None else ():
            if other != failure.node and other in names:
                caught.setdefault(other, []).append(failure)
    doctor = _doctor_fails(scan.doctor)
    nodes = set(runs) | set(caused) | set(doctor)
    out = [
        NodeHistory(
            n,
            runs[n],
            tuple(sorted(caused.get(n, ()), key=lambda f: -f.at)),
            tuple(sorted(caught.get(n, ()), key=lambda f: -f.at)),
            tuple(doctor.get(n, ())),
        )
        for n in nodes
    ]
    return sorted(out, key=_rank)


def _rank(h: NodeHistory) -> tuple[float, float, float, str]:
    last = h.caused[0].at if h.caused else 0.0
    return (-len(h.caused), -(h.share or 0.0), -last, h.node)


def _doctor_fails(rows: Iterable[Mapping[str, Scalar]]) -> dict[str, list[DoctorFail]]:
    out: dict[str, list[DoctorFail]] = {}
    for r in rows:
        if str(r.get("status", "")).upper() != "FAIL" or r.get("node_fault") is not True:
            continue  # only a failure of the node itself counts, not a config mistake
        fail = DoctorFail(
            str(r.get("job", "")),
            number(r.get("at")),
            str(r.get("check", "")),
            str(r.get("detail", ""))[:200],
        )
        out.setdefault(str(r["node"]), []).append(fail)
    return out


def stamp(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t is not None else "?"


def format_histories(
    histories: Iterable[NodeHistory], marks: Mapping[str, str] | None = None
) -> str:
    """The text of `mntui nodes --history`: a table, then each blamed node's failures.
    `marks`: a word after a node's name (a quarantine)."""
    histories = list(histories)
    marks = marks or {}
    names = {h.node: h.node + (f" [{marks[h.node]}]" if h.node in marks else "") for h in histories}
    w = max([len("node"), *map(len, names.values())])
    out = [
        f"{'node':<{w}} {'runs':>5} {'caused':>6} {'share':>6} {'conseq':>6} {'doctor':>6}  causes"
    ]
    for h in histories:
        share = f"{h.share:.0%}" if h.share is not None else "-"
        kinds = ", ".join(f"{k}×{c}" for k, c in h.kinds().items()) or "-"
        row = f"{names[h.node]:<{w}} {h.runs:>5} {len(h.caused):>6} {share:>6} "
        out.append(row + f"{len(h.consequence_of):>6} {len(h.doctor):>6}  {kinds}")
    for h in histories:
        if not h.caused and not h.doctor:
            continue
        out += ["", f"{h.node}:"]
        for f in h.caused[:SHOWN]:
            out.append(f"  {stamp(f.at)}  {f.job} {f.run_id}  {f.kind}: {f.cause[:120]}")
        if len(h.caused) > SHOWN:
            out.append(f"  … {len(h.caused) - SHOWN} earlier")
        for d in h.doctor[:SHOWN]:
            out.append(f"  {stamp(d.at)}  {d.job} doctor  {d.check} FAIL: {d.detail[:100]}")
    return "\n".join(out)
