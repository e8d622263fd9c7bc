"""`mntui history`, `mntui quarantine` and `mntui nodes --history`: what the records of
every run say across runs, and the list of nodes kept out of launches.

They read the state dir only (no node is reached, no config is needed for the first
two), so they answer at once over a bare SSH session. A record this version cannot read
is skipped and counted in one line at the end, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any

from mntui.sessions.config import JobConfig, format_span
from mntui.sessions.errors import ExitCode, UsageError

from .output import say

if TYPE_CHECKING:
    from mntui.sessions.history import NodeHistory

MAX_NODE = 253
MAX_WHY = 300


def _left_out(skipped: int, partial: int) -> str | None:
    if not skipped and not partial:
        return None
    return (
        f"({skipped} run record(s) could not be read and were skipped; {partial} report(s) "
        "or note(s) left out)"
    )


def cmd_history(args: argparse.Namespace) -> int:
    from mntui.sessions.history import format_ledgers, ledgers, scan

    now = time.time()
    found = scan(args.job, args.since, now)
    items = ledgers(found, now)
    if args.json:
        out = {"chains": [c.plain() for c in items], "skipped": found.skipped,
               "partial": found.partial}  # fmt: skip
        say(json.dumps(out, indent=2))
        return ExitCode.OK
    if not items:
        where = f" of job {args.job!r}" if args.job else ""
        within = f" within {format_span(args.since)}" if args.since else ""
        say(f"no runs{where} recorded{within} on this machine")
    else:
        say(format_ledgers(items))
    note = _left_out(found.skipped, found.partial)
    if note:
        say(note, err=True)
    return ExitCode.OK


def check_node_name(name: str) -> str:
    if not name.strip() or len(name) > MAX_NODE or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise UsageError(f"{name!r}: not a node name (printable text, at most {MAX_NODE} chars)")
    return name


def check_why(text: str) -> str:
    """`--why` is shown to whoever launches on the node: one printable line."""
    if len(text) > MAX_WHY or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise UsageError(f"--why: one line of printable text, at most {MAX_WHY} characters")
    return text


def cmd_quarantine(args: argparse.Namespace) -> int:
    from mntui.sessions import history

    for name in args.release or []:
        gone = history.release_node(check_node_name(name))
        say(f"released {name}" if gone else f"{name} was not quarantined")
    if args.nodes:
        why = check_why(args.why) if args.why else "no reason given"
        for name in args.nodes:
            q = history.quarantine_node(check_node_name(name), args.hold, why)
            say(f"quarantined {q.node} {q.describe()}; `mntui quarantine --release {q.node}` "
                "ends it")  # fmt: skip
    if args.list or not (args.nodes or args.release):
        return _list(args.json)
    return ExitCode.OK


def _list(as_json: bool) -> int:
    from mntui.sessions import history

    history.prune_quarantines()
    found = history.quarantine_listing()
    if as_json:
        from dataclasses import asdict

        rows = [asdict(q) for q in found.active]
        say(json.dumps({"quarantined": rows, "unreadable": found.unreadable}, indent=2))
        return ExitCode.OK
    if not found.active:
        say("no node is quarantined")
    for q in found.active:
        say(f"{q.node:<16} {q.describe()}")
    if found.unreadable:
        say(f"({found.unreadable} quarantine file(s) could not be read and were skipped)", err=True)
    return ExitCode.OK


def nodes_history(as_json: bool) -> int:
    """`mntui nodes --history`: every node any recorded run used, most failures first."""
    from mntui.sessions import history

    found = history.scan()
    histories = history.fold(found)
    held = history.active_quarantines()
    if as_json:
        out: dict[str, Any] = {
            "nodes": [h.plain() for h in histories],
            "quarantined": {n: q.describe() for n, q in held.items()},
            "skipped": found.skipped,
            "partial": found.partial,
        }
        say(json.dumps(out, indent=2))
        return ExitCode.OK
    if not histories:
        say("no runs recorded on this machine")
    else:
        say(history.format_histories(histories, dict.fromkeys(held, "quarantined")))
    note = _left_out(found.skipped, found.partial)
    if note:
        say(note, err=True)
    return ExitCode.OK


def history_section(cfg: JobConfig) -> list[str]:
    """The lines `mntui nodes` ends with: the job's nodes' records across all runs."""
    from mntui.sessions import history

    names = [n.name for n in (*cfg.nodes, *cfg.spares)]
    by_node = {h.node: h for h in history.fold(history.scan())}
    held = history.active_quarantines()
    out = ["", "history (every recorded run; `mntui nodes --history` for all nodes):"]
    for name in names:
        out.append(f"  {name:<16} {_one_line(by_node.get(name))}")
        if name in held:
            out.append(f"  {'':<16} quarantined {held[name].describe()}")
    return out


def _one_line(h: NodeHistory | None) -> str:
    if h is None or not h.runs:
        return "no recorded runs"
    kinds = ", ".join(f"{k}×{c}" for k, c in h.kinds().items())
    text = f"{h.runs} run(s), caused {len(h.caused)}" + (f" ({kinds})" if kinds else "")
    text += f", a consequence in {len(h.consequence_of)}"
    return text + (f", {len(h.doctor)} doctor failure(s)" if h.doctor else "")


def keep_doctor(job: str, rows: list[dict[str, Any]]) -> None:
    """Save a doctor run's rows for the nodes' history; a full disk costs the history a
    row, never the doctor its answer."""
    from mntui.sessions.history import save_doctor

    try:
        save_doctor(job, rows)
    except OSError as exc:
        say(f"mntui: doctor results not kept for the node history: {exc}", err=True)
