"""`mntui report`: why a run ended, or, for a run still going, what every rank is doing.

Headless text (or JSON) for a terminal or a pipe, never Textual. An ended run prints
the report its watchdog saved; a live run (or a hung one) gets one on demand: a poll,
py-spy stacks of every rank, every node's log and exit code; nothing is killed. The
run's agent takes it on its open connections when one serves the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mntui.sessions.agent import AgentUnavailable, Via, live_report, try_connect
from mntui.sessions.config import JobConfig
from mntui.sessions.errors import ExitCode
from mntui.sessions.runs import RunRecord

Say = Callable[..., None]


def cmd_report(
    cfg: JobConfig, record: RunRecord, as_json: bool, say: Say, verbose: bool = False
) -> ExitCode:
    from mntui.sessions.report import saved_report

    saved = saved_report(record)
    if saved is not None and not record.status.is_live:
        say(saved[1] if as_json else saved[0], end="" if not as_json else "\n")
        _slow(record, as_json, say, saved[0])
        from mntui.sessions.history import chain_line

        if not as_json and (line := chain_line(record.job, record.chain)):
            say(line[2:])  # the chain's seff-style line
        return ExitCode.OK
    if not record.status.is_live:
        say(f"run {record.run_id} ended ({record.status}) without a failure report", err=True)
        _slow(record, as_json, say)
        return ExitCode.NOT_RUNNING
    text, data, via = _live(cfg, record)
    if verbose:
        say(f"mntui: {via.describe()}", err=True)
    say(json.dumps({**data, "via": via.name}, indent=2) if as_json else text, end="")
    _slow(record, as_json, say, text)
    return ExitCode.OK


def _slow(record: RunRecord, as_json: bool, say: Say, shown: str = "") -> None:
    """The straggler the watchdog's sampler named while the job ran (report/suspect.py),
    where the report `shown` lacks it (one saved before reports carried it, or none)."""
    from mntui.sessions.report import slow_section

    lines = slow_section(record.dir)
    if lines and not as_json and lines[0] not in shown:
        say("\n" + "\n".join(lines))


def _live(cfg: JobConfig, record: RunRecord) -> tuple[str, dict[str, Any], Via]:
    client, via = try_connect(record.dir)
    if client is not None:
        with client:
            try:
                budget = cfg.watch.capture_budget + 120
                return (*live_report(client, record.run_id, budget), via)
            except AgentUnavailable as exc:
                via = Via(False, str(exc))
    from mntui.sessions.report import render, report_now, to_json
    from mntui.sessions.ssh import Cluster

    with Cluster(cfg.nodes, cfg.ssh) as cluster:
        cluster.connect()
        built = report_now(cfg, record, cluster)
    return render(built), to_json(built), via
