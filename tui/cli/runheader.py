"""The lines above a run's status table: its status, its place in a restart chain, why
it ended, and, for a live run nothing watches, that nothing does. Shared by `status`
polled from here and `status` read from the cluster's coordinator (clusterstatus.py).

A run is watched by the cluster or by nothing (watch/reading.py): clusterstatus says who
watches from the coordinator's board; an unwatched run's status says it is unwatched, in
text and JSON."""

from __future__ import annotations

from mntui.sessions.runs import RunRecord
from mntui.sessions.watch.reading import UNWATCHED_LINE, by_cluster


def status_header(
    record: RunRecord, progress: str, restarts: int = 0, stall: str | None = None
) -> str:
    """The run in a few lines: its status, its place in a restart chain, why it ended;
    `stall`: the stall threshold its coordinator learnt (`stall_after: auto`)."""
    attempt = ""
    if record.attempt or restarts:
        attempt = f"  attempt {record.attempt + 1}/{restarts + 1}"
    lines = [f"job {record.job}  run {record.run_id}  ({record.status}){attempt}"]
    for earlier in record.attempts:
        lines.append(f"  attempt {int(earlier.get('attempt', 0)) + 1}: {earlier.get('cause', '')}")
    if (record.cause and not record.status.is_live) or record.status.value == "restarting":
        lines.append(f"cause: {record.cause or record.error or '-'}  (`mntui report`)")
    if record.killed_nodes:
        lines.append(f"killed by the user: {', '.join(record.killed_nodes)}")
    if guard := unwatched_line(record):
        lines.append(guard)
    if progress:
        lines.append(f"progress: {progress}")
    if stall and record.status.is_live:
        lines.append(f"stall threshold: {stall}")
    return "\n".join(lines)


def unwatched_line(record: RunRecord) -> str:
    """One line for a live run launched without a watch: nothing tears a failed or hung
    node down, nothing saves its report."""
    if by_cluster(record) or not record.status.is_live:
        return ""
    return UNWATCHED_LINE
