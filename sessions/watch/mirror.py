"""The mirror: this machine's run records, written from what the cluster recorded.

Why one sync: the coordinator decides, restarts and names the first failure on the
cluster, and writes it on the main when it happens (chain.json, decision.json, the
journal). This machine's records are a mirror of that, written here and only here, by
every verb and the app before they speak (`sync`); reading a record never writes
anything else, so what a verb prints does not depend on which verb ran before it. An
attempt that ended gets its saved report at the first look after its end
(`save_reports`, report/endreport.py), never rebuilt after: `look` is both, for `mntui
report` and the app's `R`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mntui.sessions.launch.board import BoardView
from mntui.sessions.node.rules.runid import RUN_ID
from mntui.sessions.report import finding_of, save_finding
from mntui.sessions.runs import RunRecord, RunStatus, load_run
from mntui.sessions.termsafe import one_line

from .clusterchain import entries, sync_chain
from .clusternotify import send_missed
from .fromcluster import blamed

if TYPE_CHECKING:
    from mntui.sessions.config import JobConfig
    from mntui.sessions.ssh import Cluster

# the ends of an attempt that a report explains (a user's kill and a clean end need none)
EXPLAINED = frozenset({RunStatus.TORN_DOWN, RunStatus.FAILED, RunStatus.GAVE_UP})


def read_main(record: RunRecord, cluster: Cluster) -> BoardView | None:
    """The board of the coordinator that leads the record's chain, over the cluster's
    connection to its main; when that board says nothing of a chain going on there (lost,
    stale, stood down), the board of the successor that took the main's place, if one
    did (launch/mainmoved.py); None when none can be read."""
    from mntui.sessions.launch import mainmoved
    from mntui.sessions.launch.board import board_dir, read_board
    from mntui.sessions.results import NodeError

    view: BoardView | None
    try:
        view = read_board(cluster.nodes[record.main.node], board_dir(record), gpus=True)
    except (NodeError, KeyError):
        view = None
    if mainmoved.may_have_moved(view):
        moved = mainmoved.successor_board(record, cluster.policy)
        if moved is not None:
            return moved
    return view if view is not None and view.status is not None else None


def look(cfg: JobConfig, record: RunRecord, cluster: Cluster) -> RunRecord:
    """One look at a run the cluster watches: its board read, synced into the records,
    and the reports of its attempts that ended since saved; the chain's latest record."""
    view = read_main(record, cluster)
    latest = sync(record, view)
    save_reports(cfg, latest, view, cluster)
    return latest


def sync(record: RunRecord, view: BoardView | None) -> RunRecord:
    """Writes what the coordinator did into this machine's records: its attempts and
    their ends (chain.json), or, from a board without one, its ending; returns the
    chain's latest record; then sends, once, the notices the coordinator could not."""
    if view is not None and view.chain:
        record = sync_chain(record, view)
    else:
        _decision(record, view)
    _finding(record, view)
    send_missed(record, view)
    return record


def _finding(record: RunRecord, view: BoardView | None) -> None:
    """The straggler the coordinator named (node/coord/slowness.py), kept in its attempt's run
    dir here as the manager's sampler keeps its own (report/suspect.py): `status`, the
    app and `report` read it as a here-watched run's. Only a finding about this run's
    nodes, for a run of this chain that has a record here."""
    data = view.straggler if view is not None else None
    run = data.get("run") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(run, str) or not RUN_ID.fullmatch(run):
        return
    found = finding_of(data.get("finding"))
    target = record.dir.parent / run
    if found is None or not (target / "run.json").is_file():
        return
    nodes = {n.node for n in record.nodes}
    named = found.ranks + (found.suspect.ranks if found.suspect is not None else ())
    if any(r.node not in nodes for r in named):
        return
    try:
        save_finding(target, found)
    except OSError:
        pass


def _decision(record: RunRecord, view: BoardView | None) -> bool:
    d = view.decision if view is not None else None
    if not d or not record.status.is_live or record.status is RunStatus.LAUNCHING:
        return False
    if "ended" in d:
        states = d.get("ended")
        ok = isinstance(states, dict) and all(s == "finished" for s in states.values())
        status, cause = (RunStatus.FINISHED, None) if ok else (RunStatus.FAILED, None)
    else:
        status = RunStatus.TORN_DOWN
        cause = _decided(d)

    def ended(r: RunRecord) -> None:
        if r.status.is_live:
            r.status = status
            r.cause = cause or r.cause
            r.note("cluster-decision", decided_by="coordinator", at=d.get("decided_at"))

    record.update(ended)
    return True


def _decided(d: dict[str, Any]) -> str:
    """A decision as a cause: its first failure when it named one (firstfail.py)."""
    first = blamed(d)
    if first is not None:
        return first
    node, state, why = (one_line(str(d.get(k)), 200) for k in ("node", "state", "why"))
    return f"{node} {state}: {why}"


def due(record: RunRecord, view: BoardView | None) -> list[tuple[RunRecord, dict[str, Any]]]:
    """The chain's attempts that ended in a way a report explains and have none saved
    here yet: each record with its chain.json entry. Reads, writes nothing."""
    chain = view.chain if view is not None else None
    out = []
    for e in entries(chain) if chain else []:
        if not isinstance(e.get("end"), dict):
            continue
        rec = record if e["run"] == record.run_id else load_run(record.job, e["run"])
        if rec is None or (rec.status not in EXPLAINED and not _restarted_failure(rec, e)):
            continue
        if not (rec.dir / "report.json").exists():
            out.append((rec, e))
    return out


def _restarted_failure(rec: RunRecord, e: dict[str, Any]) -> bool:
    """An attempt the chain restarted after it failed (its record says restarting)."""
    end = e.get("end")
    return (
        rec.status is RunStatus.RESTARTING
        and isinstance(end, dict)
        and (end.get("state") != "finished")
    )


def save_reports(
    cfg: JobConfig, record: RunRecord, view: BoardView | None, cluster: Cluster
) -> int:
    """Each attempt `due` gets its report built and saved (report/endreport.py); how
    many were. One that cannot be built is logged and tried again at the next look."""
    from mntui.sessions.errors import log_exception
    from mntui.sessions.report.endreport import build_saved, changes_of, progress_of

    journal = view.journal if view is not None else ()
    saved = 0
    for rec, e in due(record, view):
        try:
            changes = changes_of(journal, rec.run_id, [n.node for n in rec.nodes])
            ranks = {n.node: n.rank for n in rec.nodes}
            ended = e.get("ended_at")
            until = float(ended) if isinstance(ended, (int, float)) else None
            progress = progress_of(journal, rec.run_id, ranks, until)
            build_saved(cfg, rec, cluster, e, changes, progress)
            saved += 1
        except Exception as exc:  # never a verb that fails for its report
            log_exception(f"report of {rec.job} {rec.run_id}", exc)
    return saved
