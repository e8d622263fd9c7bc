"""`mntui report`: why a run ended, or, for a run still going, what every rank is doing.

Headless text (or JSON) for a terminal or a pipe, never Textual. An ended run prints
the report saved at the first look after its end (watch/mirror.py, from what its
coordinator recorded); a live run (or a hung one) gets a snapshot: a poll, py-spy stacks
of every rank, every node's log and exit code; nothing is killed, nothing saved
(report/snapshot.py decides which).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mntui.sessions.config import JobConfig
from mntui.sessions.errors import ExitCode
from mntui.sessions.runs import RunRecord
from mntui.sessions.watch.reading import by_cluster, describe

Say = Callable[..., None]


def cmd_report(
    cfg: JobConfig,
    record: RunRecord,
    as_json: bool,
    say: Say,
    verbose: bool = False,
    pinned: bool = False,
) -> ExitCode:
    """`pinned`: the user named the run (`--run`); else the job's latest, once synced."""
    from mntui.sessions.report import Shown, answer

    if verbose:
        say(f"mntui: {describe(record)}", err=True)
    if by_cluster(record):
        record = _mirrored(cfg, record, pinned)

    def take() -> tuple[str, dict[str, Any]]:
        text, data = _live(cfg, record)
        return text, {**data, "via": "direct"}

    got = answer(record, take)  # the saved report, or a snapshot never saved (issue 29)
    if got.note:
        say(got.note, err=True)
    if got.json is not None:
        say(got.json if as_json else got.text, end="" if not as_json else "\n")
    _slow(record, as_json, say, got.text)
    if got.shown is Shown.SAVED and not as_json:
        from mntui.sessions.history import chain_line

        if line := chain_line(record.job, record.chain):
            say(line[2:])  # the chain's seff-style line
    return ExitCode.OK if got.shown in (Shown.SAVED, Shown.LIVE) else ExitCode.NOT_RUNNING


def _slow(record: RunRecord, as_json: bool, say: Say, shown: str = "") -> None:
    """The straggler the coordinator named while the job ran (report/suspect.py), where
    the report `shown` lacks it (one saved before reports carried it, or none)."""
    from mntui.sessions.report import slow_section

    lines = slow_section(record.dir)
    if lines and not as_json and lines[0] not in shown:
        say("\n" + "\n".join(lines))


def _mirrored(cfg: JobConfig, record: RunRecord, pinned: bool) -> RunRecord:
    """What the cluster's coordinator recorded, into this machine's records first (its
    attempts, its decisions, its straggler's finding), and the report of every attempt
    that ended since the last look built and saved (watch/mirror.py); `record` as it is
    now on disk (a run the sync moved, a report it saved)."""
    from mntui.sessions.runs import latest, load_run
    from mntui.sessions.ssh import Cluster
    from mntui.sessions.watch.mirror import look

    with Cluster(cfg.nodes, cfg.ssh) as cluster:
        look(cfg, record, cluster)
    now = load_run(record.job, record.run_id) if pinned else latest(record.job)
    return now or record


def _live(cfg: JobConfig, record: RunRecord) -> tuple[str, dict[str, Any]]:
    from mntui.sessions.report import render, report_now, to_json
    from mntui.sessions.ssh import Cluster

    with Cluster(cfg.nodes, cfg.ssh) as cluster:
        cluster.connect()
        built = report_now(cfg, record, cluster)
    return render(built), to_json(built)
