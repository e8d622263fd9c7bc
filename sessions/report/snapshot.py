"""What `mntui report` and the app's `R` show: the report saved of a run's end, or a
snapshot of a run still going, and never the one for the other.

A saved report is the run's conclusion (`report.txt`, `report.json`, the record's
`cause`), built once from what the cluster's coordinator recorded at the first look
after the end (watch/mirror.py, endreport.py). A snapshot is what the nodes hold now:
taken after the end, it shows dead ranks without stacks and says the job runs on,
which is no conclusion; it once overwrote a correct report and a run's cause (issue
29). So a snapshot is shown and never saved. An unwatched run's end gets no report: the
answer says so, with what the nodes hold now.

The record is read from disk here, never taken from the caller: the app holds the record
it launched, which says `running` long after the run's coordinator ended it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from mntui.sessions.jsonshape import load, text
from mntui.sessions.runs import RunRecord, RunStatus, load_run

from .failure import Ending
from .postmortem import saved_report

# A snapshot: its text and its JSON (failure.to_json), taken over the caller's connections.
Take = Callable[[], tuple[str, dict[str, Any]]]


class Shown(StrEnum):
    SAVED = "saved"  # the report saved of the run's end, as it was written
    NONE = "none"  # the run ended without a report, and none will come
    LIVE = "live"  # a snapshot of a run still going: shown, never saved


@dataclass(frozen=True)
class Answer:
    shown: Shown
    text: str  # for a terminal: the saved text as written, or the snapshot's ("": none)
    json: str | None  # the report's JSON text (None: none to show)
    note: str | None = None  # one line said with it: why there is no report


def answer(record: RunRecord, take: Take) -> Answer:
    """The run's report if it ended, a snapshot if it runs. A run whose nodes all ended
    while its record still says running has ended: no look has synced its end yet."""
    current = load_run(record.job, record.run_id) or record
    if not current.status.is_live:
        return _ended(current, None, take)
    text_, data = take()
    # torn-down: the stacks a cluster's sentinels took at its teardown (nodestacks.py)
    over = (Ending.ENDED.value, Ending.TORN_DOWN.value)
    if data.get("ending") not in over or current.status is RunStatus.LAUNCHING:
        return Answer(Shown.LIVE, text_, json.dumps(data, indent=2))
    return _ended(load_run(record.job, record.run_id) or current, (text_, data), take)


def _ended(record: RunRecord, taken: tuple[str, dict[str, Any]] | None, take: Take) -> Answer:
    saved = saved_report(record)
    if saved is not None:
        return Answer(Shown.SAVED, saved[0], saved[1])
    run = f"run {record.run_id}"
    if not _reported(record, taken):
        note = f"{run} {_ended_how(record)} without a failure report"
        return Answer(Shown.NONE, "", None, note)
    text_, data = taken if taken is not None else take()
    if record.watch_port is not None:  # the cluster watched it: its coordinator decided
        cause = f": {record.cause}" if record.cause else ""
        note = f"{run} {_ended_how(record)} by the coordinator on the cluster{cause} "
        held = "what its nodes hold now"
        if data.get("ending") == Ending.TORN_DOWN.value:
            held = "the stacks its sentinels took before the kill and " + held
        note += f"(`mntui status` shows its decision); {held} (not saved):"
        return Answer(Shown.NONE, text_, json.dumps(data, indent=2), note)
    note = f"{run} {_ended_how(record)} unwatched: no report is saved of it; "
    note += "what its nodes hold now (not saved):"
    return Answer(Shown.NONE, text_, json.dumps(data, indent=2), note)


def _ended_how(record: RunRecord) -> str:
    """`ended (failed)`; a record that still says running: what the nodes say."""
    return f"ended ({record.status})" if not record.status.is_live else "ended on its nodes"


def _reported(record: RunRecord, taken: tuple[str, dict[str, Any]] | None) -> bool:
    """An end a report explains: a failure (its own, or one a user's kill of a node
    caused), or a teardown. A finished job or a user's kill of the whole job has none."""
    if record.status.is_live:  # the nodes ended first: did one fail?
        return taken is not None and taken[1].get("cause_node") is not None
    if record.status is RunStatus.KILLED:
        return bool(record.killed_nodes)
    return record.status in (RunStatus.FAILED, RunStatus.TORN_DOWN)


def saved_cause(run_dir: Path) -> str | None:
    """The node the run's saved report names as its cause (None: no report, or none
    named): the app's header names that node, as the report and the toast do. Read again
    only when the file changed: the header asks every second."""
    path = run_dir / "report.json"
    try:
        st = path.stat()
    except OSError:
        return None
    return _cause_node(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _cause_node(path: Path, mtime_ns: int, size: int) -> str | None:
    try:
        data = load(path)
    except (OSError, ValueError):
        return None
    return text(data.get("cause_node")) if isinstance(data, dict) else None
