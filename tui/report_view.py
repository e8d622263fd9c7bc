"""`mntui report`: why a run ended, or, for a run still going, what every rank is doing.

Headless text (or JSON) for a terminal or a pipe, never Textual. An ended run prints
the report its watchdog saved; a live run (or a hung one) gets one on demand: a poll,
py-spy stacks of every rank, every node's log and exit code; nothing is killed.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from mntui.sessions.config import JobConfig
from mntui.sessions.errors import ExitCode
from mntui.sessions.postmortem import report_now, saved_report
from mntui.sessions.remote import Cluster
from mntui.sessions.report import render, to_json
from mntui.sessions.runs import RunRecord

Say = Callable[..., None]


def cmd_report(cfg: JobConfig, record: RunRecord, as_json: bool, say: Say) -> ExitCode:
    saved = saved_report(record)
    if saved is not None and not record.status.is_live:
        text, data = saved
        say(data if as_json else text, end="" if not as_json else "\n")
        return ExitCode.OK
    if not record.status.is_live:
        say(f"run {record.run_id} ended ({record.status}) without a failure report", err=True)
        return ExitCode.NOT_RUNNING
    with Cluster(cfg.nodes, cfg.ssh) as cluster:
        cluster.connect()
        built = report_now(cfg, record, cluster)
    say(json.dumps(to_json(built), indent=2) if as_json else render(built), end="")
    return ExitCode.OK
