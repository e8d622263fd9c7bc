"""`mntui doctor`: the checks, the all-reduce smoke test and the pairs, in turn over one
set of connections; then the table and its counts, or the rows as JSON.

The last line gives the counts (doctor/summary.py), so a WARN among 30 rows is not lost
in a scrolled screen; with `--json` the rows stay the list that scripts read, and the
counts go to stderr. `-v` says on stderr what each step is about to do and how long it
took (an all-reduce can wait its whole timeout in silence), and after the table how each
check was made, so a failed one can be repeated by hand.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import TypeVar

from mntui.sessions import doctor
from mntui.sessions.config import JobConfig
from mntui.sessions.doctor import Check
from mntui.sessions.errors import ExitCode
from mntui.sessions.ssh import Cluster

from .history_view import keep_doctor

Say = Callable[..., None]
T = TypeVar("T")

# A failure these checks find makes the smoke job pointless: it would hang or be refused.
BLOCKING = ("ssh", "ports", "leftovers")


def _step(say: Say, verbose: bool, name: str, about: str, run: Callable[[], T]) -> T:
    """`run`, said before and timed after when verbose."""
    if verbose:
        say(f"doctor: {name}: {about}...", err=True)
    t0 = time.monotonic()
    out = run()
    if verbose:
        say(f"doctor: {name}: done in {time.monotonic() - t0:.1f}s", err=True)
    return out


def _blocked(rows: list[Check]) -> bool:
    return any(r.status is doctor.Status.FAIL and r.check in BLOCKING for r in rows)


def _skipped(cfg: JobConfig, check: str) -> Check:
    return Check(cfg.main, check, doctor.Status.FAIL, "skipped: fix the failures above")


def cmd_doctor(
    cfg: JobConfig,
    say: Say,
    *,
    allreduce: bool = False,
    pairs: bool = False,
    timeout: float = 60.0,
    as_json: bool = False,
    verbose: bool = False,
) -> ExitCode:
    """Exit 0: all pass; 1: warnings; 2: failures."""
    t0 = time.time()
    n = len(cfg.nodes)
    if verbose:
        say(f"doctor: {cfg.path}: job {cfg.job}, {n} node(s), main {cfg.main}", err=True)
    pairs_line = ""
    with Cluster(cfg.nodes, cfg.ssh) as cluster:
        about = f"connect over {cfg.ssh.transport}, one probe a node, tcp to the main"
        rows = _step(say, verbose, "checks", about, lambda: doctor.run_checks(cfg, cluster))
        if allreduce and _blocked(rows):
            rows.append(_skipped(cfg, "allreduce"))
        elif allreduce:
            about = f"the smoke job on {n} node(s), timeout {timeout:g}s"
            rows += _step(
                say, verbose, "allreduce", about, lambda: doctor.allreduce(cfg, cluster, timeout)
            )
        if pairs and _blocked(rows):
            rows.append(_skipped(cfg, "pairs"))
        elif pairs:
            about = f"the smoke job on pairs of nodes, timeout {timeout:g}s each"
            pairs_line = _step(
                say, verbose, "pairs", about, lambda: _pairs(cfg, cluster, rows, timeout, say)
            )
    keep_doctor(cfg.job, [asdict(r) for r in rows])  # a node's history shows its failed checks
    summary = f"{doctor.summary_line(rows, n)} in {time.time() - t0:.1f}s"
    if as_json:
        say(json.dumps([asdict(r) for r in rows], indent=2))
        say(summary, err=True)
    else:
        say(doctor.format_rows(rows))
        if verbose:
            say("\n".join(doctor.how_lines(rows)))
        say(summary)
        if pairs_line:
            say(pairs_line)
    return ExitCode(doctor.exit_code(rows))


def _pairs(cfg: JobConfig, cluster: Cluster, rows: list[Check], timeout: float, say: Say) -> str:
    """`doctor --pairs`: its rows join the others, its one line ends the output, and its
    pairs are kept (state_dir()/<job>/doctor/doctor-pairs-<stamp>.json)."""
    started = time.time()
    verdict = doctor.run_pairs(cfg, cluster, timeout)
    rows += doctor.pair_checks(verdict)
    try:
        doctor.save_pairs(cfg.job, verdict, started)
    except OSError as exc:
        say(f"mntui: pairs not kept for the node history: {exc}", err=True)
    return f"pairs: {verdict.line}"
