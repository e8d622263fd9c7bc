"""The chaos campaign's invariants, each a function that returns what it found wrong.

Every check takes plain data (node names, session lists, run records, status text, tree
snapshots) or looks at the machine by tag, so tests/unit/test_chaos_checks.py can show
each one failing on a deliberate leftover: a checker that cannot fail proves nothing.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fakecluster import cmdline, port_listening, tagged

from mntui.sessions.runs import RunRecord, RunStatus

TERMINAL = frozenset(
    {
        RunStatus.KILLED,
        RunStatus.FINISHED,
        RunStatus.FAILED,
        RunStatus.GAVE_UP,
        RunStatus.TORN_DOWN,
        RunStatus.ABORTED,
    }
)
# The line `mntui status` must print once the chain's supervisor died (issue 18): it names
# the supervisor (or watchdog) and says it is gone. The exact words are the lead's; this
# accepts any of them.
ORPHAN_LINE = re.compile(
    r"(?im)^.*\b(supervisor|watchdog)\b.*\b(died|dead|gone|killed|not running|orphan\w*)\b.*$"
)
MNTUI_HOME = ".mntui"  # a node's run dirs live in ~/.mntui/runs/<job>/<run>/<node>


@dataclass(frozen=True)
class Violation:
    invariant: str  # processes, ports, sessions, chain, restart, orphan-line, files, ...
    node: str | None
    detail: str
    phase: str = ""  # when it was seen: "at the end", "after mntui kill", ...

    def line(self) -> str:
        where = f" {self.node}" if self.node else ""
        when = f" ({self.phase})" if self.phase else ""
        return f"{self.invariant}{where}{when}: {self.detail}"


def check_processes(job: str, nodes: Iterable[str]) -> list[Violation]:
    """No live process tagged `MNTUI_RUN=<job>/...` on any of `nodes`, found by tag."""
    out = []
    for node in nodes:
        pids = tagged(job, node)
        if pids:
            shown = "; ".join(f"{p} {cmdline(p)[:70].strip()}" for p in pids[:4])
            more = f" (+{len(pids) - 4} more)" if len(pids) > 4 else ""
            out.append(Violation("processes", node, f"{len(pids)} left: {shown}{more}"))
    return out


def check_port(port: int) -> list[Violation]:
    if port_listening(port):
        return [Violation("ports", None, f"master port {port} still listening")]
    return []


def check_sessions(found: Mapping[str, Sequence[str]]) -> list[Violation]:
    """`found`: node -> the job's tmux sessions still on it."""
    return [
        Violation("sessions", node, f"tmux session(s) left: {', '.join(names)}")
        for node, names in found.items()
        if names
    ]


def check_chain(records: Sequence[RunRecord]) -> list[Violation]:
    """The chain ended: its latest attempt in a terminal state, every earlier one terminal
    or `restarting` with a later attempt after it (what the supervisor leaves)."""
    if not records:
        return [Violation("chain", None, "no run record at all")]
    ordered = sorted(records, key=lambda r: (r.attempt, r.created_at))
    out = []
    for i, rec in enumerate(ordered):
        superseded = i < len(ordered) - 1 and rec.status is RunStatus.RESTARTING
        if rec.status not in TERMINAL and not superseded:
            last = rec.history[-1]["what"] if rec.history else "-"
            out.append(
                Violation(
                    "chain",
                    None,
                    f"run {rec.run_id} (attempt {rec.attempt}) is {rec.status.value}, "
                    f"not terminal (last note: {last})",
                )
            )
    return out


def check_no_restart_after(
    records: Sequence[RunRecord], since: float, what: str
) -> list[Violation]:
    """No attempt of the chain was created after `since` (the user's kill)."""
    late = [r for r in records if r.created_at > since]
    return [
        Violation(
            "restart",
            ",".join(n.node for n in r.nodes),
            f"attempt {r.attempt} (run {r.run_id}, {r.status.value}) created "
            f"{r.created_at - since:.1f}s after {what}",
        )
        for r in late
    ]


def check_orphan_line(status_text: str) -> list[Violation]:
    if ORPHAN_LINE.search(status_text):
        return []
    head = " | ".join(status_text.strip().splitlines()[:2])[:160]
    return [
        Violation("orphan-line", None, f"`mntui status` does not say the supervisor died: {head}")
    ]


# -- files outside the workdir and the run dirs -----------------------------------------

Entry = tuple[str, int, int]  # kind ("f", "d", "l", "o"), size, mtime_ns (0 for dirs)


def snapshot_tree(home: Path, exclude: Iterable[str] = (MNTUI_HOME,)) -> dict[str, Entry]:
    """Every path under `home` but the excluded top-level names: kind, size, mtime. A
    directory's mtime is left out: its entries are compared themselves."""
    skip = set(exclude)
    out: dict[str, Entry] = {}
    for top, dirs, files in os.walk(home):
        rel_top = os.path.relpath(top, home)
        if rel_top == ".":
            dirs[:] = [d for d in dirs if d not in skip]
            files = [f for f in files if f not in skip]
        for name in [*dirs, *files]:
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            rel = os.path.normpath(os.path.join(rel_top, name))
            if stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", 0, 0)
            else:
                kind = "l" if stat.S_ISLNK(st.st_mode) else "f" if stat.S_ISREG(st.st_mode) else "o"
                out[rel] = (kind, st.st_size, st.st_mtime_ns)
    return out


def check_files(
    node: str, before: Mapping[str, Entry], after: Mapping[str, Entry]
) -> list[Violation]:
    added = sorted(after.keys() - before.keys())
    removed = sorted(before.keys() - after.keys())
    changed = sorted(p for p in before.keys() & after.keys() if before[p] != after[p])
    out = []
    for what, paths in (("added", added), ("removed", removed), ("changed", changed)):
        if paths:
            shown = ", ".join(paths[:5]) + (f" (+{len(paths) - 5} more)" if len(paths) > 5 else "")
            out.append(Violation("files", node, f"{what} outside the run dirs: {shown}"))
    return out
