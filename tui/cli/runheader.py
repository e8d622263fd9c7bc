"""The lines above a run's status table: its status, its place in a restart chain, why
it ended, and who (if anyone) guards it. Shared by `status` polled from here and
`status` read from the cluster's coordinator (clusterstatus.py).

A run is watched one way, from its launch: by the cluster (its record has a watch
port; clusterstatus says so from the coordinator's board), by nothing (`--no-watch`),
or, with `watch.where: here`, from this machine, which must then stay on: `status`
says which, in text and JSON."""

from __future__ import annotations

import time

from mntui.sessions.runs import RunRecord


def status_header(record: RunRecord, progress: str, restarts: int = 0) -> str:
    """The run in a few lines: its status, its place in a restart chain, why it ended."""
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
    if guard := orphan_line(record) or unguarded_line(record) or here_line(record):
        lines.append(guard)
    if progress:
        lines.append(f"progress: {progress}")
    stall = [h for h in record.history if h.get("what") == "stall-threshold"]
    if stall and record.status.is_live:
        lines.append(f"stall threshold: {stall[-1].get('text', '?')}")
    return "\n".join(lines)


def orphan_line(record: RunRecord) -> str:
    """One line when the run's chain is live but its supervisor is gone (SIGKILLed while
    watching, in a backoff or mid-relaunch): nothing guards or restarts it any more."""
    if record.watch_port is not None:  # its coordinator restarts it: no supervisor here
        return ""  # (and a cold status reads no record of the job's other runs)
    from mntui.sessions.launch import chain_of, orphaned

    view = chain_of(record.job, record)
    gone = orphaned(view) if view is not None else None
    if gone is None:
        return ""
    since = time.strftime("%H:%M:%S", time.localtime(gone.since))
    return (
        f"supervisor: gone since {since} (pid {gone.pid}): nothing watches or restarts this "
        "chain; `mntui watch` resumes it, `mntui kill` ends it"
    )


def unguarded_line(record: RunRecord) -> str:
    """One line when a running run has no watchdog at all (--no-watch, or one that never
    came up): a failed or hung node holds the others until someone kills the job."""
    if record.watch_port is not None:  # its coordinator on the main guards it
        return ""
    from mntui.sessions.launch import chain_of, guarded, orphaned
    from mntui.sessions.runs import RunStatus

    view = chain_of(record.job, record)
    if view is None or view.latest.status is not RunStatus.RUNNING:
        return ""
    if guarded(view) or orphaned(view) is not None:
        return ""
    return (
        "watchdog: none guards this run: a failed or hung node is not torn down; "
        "`mntui watch` guards it, `mntui kill` ends it"
    )


CLUSTER = "cluster"
HERE = "this machine"


def watched_from(record: RunRecord) -> str | None:
    """`status --json`'s "watched_from": "cluster" or "this machine", as the run was
    launched; None for a live run that nothing watches now (its "watchdog" or
    "supervisor" says why)."""
    if record.watch_port is not None:
        return CLUSTER
    if record.status.is_live and (orphan_line(record) or unguarded_line(record)):
        return None
    return HERE


def here_line(record: RunRecord) -> str:
    """For a live run watched from here (a `where: here` job): this machine must stay on
    and connected, or a failed or hung node is not torn down. Said after the lines for
    an unguarded run."""
    if record.watch_port is not None or not record.status.is_live:
        return ""
    from mntui.sessions.launch.clusterwatch import HERE_LINE

    return HERE_LINE
