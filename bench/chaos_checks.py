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

from fakecluster import alive, cmdline, pids_with_env, port_listening, tagged

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


def check_run_processes(job: str, run_id: str, nodes: Iterable[str]) -> list[Violation]:
    """No live process of one run (attempt) left on any of `nodes`, by its tag: what its
    teardown had to kill, the spare that ran it included."""
    out = []
    for node in nodes:
        pids = alive(pids_with_env(f"MNTUI_RUN={re.escape(f'{job}/{run_id}/{node}')}"))
        if pids:
            shown = "; ".join(f"{p} {cmdline(p)[:60].strip()}" for p in pids[:3])
            out.append(Violation("processes", node, f"{len(pids)} of run {run_id} left: {shown}"))
    return out


def check_teardown_nodes(record: RunRecord) -> list[Violation]:
    """The watchdog's teardown of `record` killed on the nodes the attempt ran on, each
    of them, and on no other (a quarantined node instead of the spare that took its
    place). A run with no teardown note passes: whether one was due is the caller's."""
    note = next((h for h in record.history if h.get("what") == "watchdog-teardown"), None)
    if note is None:
        return []
    results = note.get("results")
    reached = set(results) if isinstance(results, dict) else set()
    ran = {n.node for n in record.nodes}
    where = f"attempt {record.attempt} (run {record.run_id}, on {','.join(sorted(ran))})"
    out = [
        Violation("teardown", n, f"the teardown of {where} never killed on it; it killed on "
                  f"{','.join(sorted(reached)) or 'no node'}")
        for n in sorted(ran - reached)
    ]  # fmt: skip
    out += [
        Violation("teardown", n, f"the teardown of {where} killed on it, a node it does not run on")
        for n in sorted(reached - ran)
    ]
    return out


def check_quarantined_out(record: RunRecord, held: Mapping[str, float]) -> list[Violation]:
    """`held`: node -> when it was quarantined. An attempt created after a node's
    quarantine does not run on it (a spare takes its place, or the launch refuses)."""
    return [
        Violation("quarantine", n.node, f"attempt {record.attempt} (run {record.run_id}) runs on "
                  f"it, created {record.created_at - held[n.node]:.1f}s after its quarantine")
        for n in record.nodes
        if n.node in held and record.created_at > held[n.node]
    ]  # fmt: skip


def user_kill_at(records: Sequence[RunRecord]) -> float | None:
    """When a user's full kill was first written on the chain (its note), if it was."""
    times = [
        float(h["at"])
        for r in records
        for h in r.history
        if h.get("what") == "kill" and h.get("by") == "user" and "nodes" not in h
        and isinstance(h.get("at"), (int, float))
    ]  # fmt: skip
    return min(times) if times else None


def check_kill_recorded(records: Sequence[RunRecord], since: float) -> list[Violation]:
    """A user's `mntui kill` at `since` left its word on the chain (a note, or the run
    killed): a supervisor deciding on the chain afterwards reads it there."""
    at = user_kill_at(records)
    if at is not None and at >= since:
        return []
    if any(r.status is RunStatus.KILLED and r.created_at <= since for r in records):
        return []
    latest = max(records, key=lambda r: r.created_at) if records else None
    now = f"attempt {latest.attempt} {latest.status.value}" if latest else "no run"
    return [Violation("kill", None, f"the user's kill left no mark on the chain ({now})")]


def check_no_restart_after_kill(records: Sequence[RunRecord]) -> list[Violation]:
    """Once a user's kill is written on the chain, no restart is decided (a `restart`
    note later than it) and no attempt is started that is not stopped again (a relaunch
    already under way is caught and killed)."""
    at = user_kill_at(records)
    if at is None:
        return []
    out = [
        Violation("restart", None, f"attempt {r.attempt} (run {r.run_id}) marked `restarting` "
                  f"{float(h['at']) - at:.2f}s after the user's kill (attempt {h.get('attempt')})")
        for r in records
        for h in r.history
        if h.get("what") == "restart" and isinstance(h.get("at"), (int, float)) and h["at"] > at
    ]  # fmt: skip
    out += [
        Violation("restart", ",".join(n.node for n in r.nodes), f"attempt {r.attempt} (run "
                  f"{r.run_id}) created {r.created_at - at:.2f}s after the user's kill, and "
                  f"{r.status.value}")
        for r in records
        if r.created_at > at and r.status not in (RunStatus.KILLED, RunStatus.ABORTED)
    ]  # fmt: skip
    return out


def check_port(port: int, what: str = "master port") -> list[Violation]:
    if port_listening(port):
        return [Violation("ports", None, f"{what} {port} still listening")]
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
    or `restarting` with a later attempt after it (what the supervisor leaves). Called with
    no record only where the fault's launch recorded a run (a Ctrl+C before the record
    leaves none, by design: start.py records a run once its nodes are reached and checked)."""
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


# -- the watch on the cluster (issue 30, bench/chaos_cluster.py) -------------------------


def watchers(job: str, node: str | None = None) -> list[int]:
    """The sentinels and coordinators of any run of `job` (on `node`), by their own tag
    `MNTUI_RUN=<job>/<run>/<node>/<role>`, which `tagged` (the job's ranks) never matches."""
    where = re.escape(node) if node else "[^/]+"
    return alive(pids_with_env(f"MNTUI_RUN={re.escape(job)}/[^/]+/{where}/[^/]+"))


def check_watchers(job: str, nodes: Iterable[str]) -> list[Violation]:
    """No sentinel or coordinator of the job left on any of `nodes`."""
    out = []
    for node in nodes:
        pids = watchers(job, node)
        if pids:
            shown = "; ".join(f"{p} {cmdline(p)[:60].strip()}" for p in pids[:3])
            out.append(
                Violation("watchers", node, f"{len(pids)} sentinel/coordinator(s) left: {shown}")
            )
    return out


def check_no_decision(decision: Mapping[str, object] | None, what: str) -> list[Violation]:
    """No teardown by the coordinator where nothing of the job failed (`what`: the fault,
    which touched no rank). A user's kill or the job's own end is not a teardown."""
    if decision is None or decision.get("decided_by") != "coordinator":
        return []
    return [Violation("decision", _text(decision.get("node")), f"the coordinator tore the job "
                      f"down after {what}, which touched no rank: {_text(decision.get('state'))}: "
                      f"{_text(decision.get('why'))}")]  # fmt: skip


def check_decision(decision: Mapping[str, object] | None, node: str, states: Iterable[str],
                   took: float | None = None, not_before: float = 0.0) -> list[Violation]:  # fmt: skip
    """The coordinator tore the job down (its decision complete: `ended_at`), naming the
    injected `node` in one of `states`; `took`: seconds from the fault to the decision,
    no fewer than `not_before` (a node is unreachable only after unreachable_after)."""
    want = sorted(states)
    if decision is None:
        return [Violation("decision", node, f"no decision.json on the main ({'/'.join(want)} due)")]
    if "ended" in decision:
        return [Violation("decision", node, f"the coordinator saw the job end by itself "
                          f"({_text(decision.get('ended'))}), no teardown naming {node}")]  # fmt: skip
    got = (decision.get("decided_by"), decision.get("node"), decision.get("state"))
    out = []
    if got[0] != "coordinator" or got[1] != node or got[2] not in want:
        out.append(Violation("decision", node, f"decided by {_text(got[0])} naming {_text(got[1])} "
                             f"{_text(got[2])}, not {node} {'/'.join(want)}: "
                             f"{_text(decision.get('why'))}"))  # fmt: skip
    if "ended_at" not in decision:
        out.append(Violation("decision", node, "the teardown never finished (no ended_at)"))
    if took is not None and took < not_before:
        out.append(Violation("decision", node, f"decided {took:.1f}s after the fault, "
                             f"before {not_before:g}s"))  # fmt: skip
    return out


def check_lost(lost: Mapping[str, Mapping[str, object] | None], since: float,
               not_before: float) -> list[Violation]:  # fmt: skip
    """Each node's sentinel that lost the coordinator wrote lost.json, no sooner than
    `not_before` seconds after `since` (the fault's wall clock)."""
    out = []
    for node, info in sorted(lost.items()):
        if info is None:
            out.append(Violation("lost", node, "its sentinel wrote no lost.json"))
            continue
        at = info.get("lost_at")
        if not isinstance(at, (int, float)) or at - since < not_before:
            out.append(Violation("lost", node, f"gave up on the coordinator {_text(at)} "
                                 f"(fault at {since:.1f}), before {not_before:g}s: "
                                 f"{_text(info.get('why'))}"))  # fmt: skip
    return out


def check_steps_advanced(before: Mapping[str, int], after: Mapping[str, int],
                         least: int) -> list[Violation]:  # fmt: skip
    """Every node's step count went up by `least` or more (the job trained on)."""
    return [
        Violation("steps", node, f"{after.get(node, 0) - n} step(s) during the partition, "
                  f"fewer than {least}")
        for node, n in sorted(before.items())
        if after.get(node, 0) - n < least
    ]  # fmt: skip


STATUS_DECISION = re.compile(
    r"the coordinator tore the job down at \S+: (\S+) "
)  # its first failure


def check_status_torn_down(status_text: str, node: str) -> list[Violation]:
    """A fresh `mntui status` says the run is torn down and names the injected node."""
    m = STATUS_DECISION.search(status_text)
    if m and m[1] == node and "(torn-down)" in status_text:
        return []
    head = " | ".join(status_text.strip().splitlines()[:3])[:200]
    return [
        Violation("status", node, f"`mntui status` does not say torn-down naming {node}: {head}")
    ]


def _text(v: object) -> str:
    return re.sub(r"[\x00-\x1f\x7f]", "?", str(v))[:160]


def check_respawned(role: str, old: int, new: int | None, took: float | None,
                    within: float) -> list[Violation]:  # fmt: skip
    """The main's `role` (coordinator or sentinel), SIGKILLed as pid `old`, was started
    again by the other as `new` (a live process of that tag, named by the pid file),
    within `within` seconds (`took`)."""
    if new is None or new == old:
        return [Violation("respawn", None, f"the {role} (pid {old}) was not started again "
                          f"within {within:g}s")]  # fmt: skip
    if took is not None and took > within:
        return [Violation("respawn", None, f"the {role} came back after {took:.1f}s, "
                          f"over {within:g}s")]  # fmt: skip
    return []


def check_not_lost(lost: Mapping[str, Mapping[str, object] | None], what: str) -> list[Violation]:
    """No sentinel gave its coordinator up (lost.json) after `what`."""
    return [
        Violation("lost", node, f"its sentinel called the coordinator lost after {what}: "
                  f"{_text(info.get('why'))}")
        for node, info in sorted(lost.items())
        if info is not None
    ]  # fmt: skip


def check_journal_respawn(journal: Sequence[Mapping[str, object]], role: str,
                          pid: int | None) -> list[Violation]:  # fmt: skip
    """The coordinator's journal has a `respawn` line for `role`'s new `pid`."""
    for e in journal:
        data = e.get("data")
        if not isinstance(data, Mapping) or e.get("kind") != "respawn":
            continue
        if data.get("who") == role and (pid is None or data.get("pid") == pid):
            return []
    return [Violation("journal", None, f"no `respawn` line for the {role} (pid {pid})")]


# -- the manager's account against the coordinator's journal (issue 37) ---------------------

KILLED_LINE = re.compile(r"(?m)^(?:\+ *[0-9.]+s )?([A-Za-z0-9_.-]+)\[-?\d+\]")  # events.format


def failed_attempts(chain: Mapping[str, object]) -> list[Mapping[str, object]]:
    """The attempts the coordinator ended for a failure: an end of their own that is not
    a clean finish (a user's kill ends the chain, not the attempt: no end of its own)."""
    items = chain.get("attempts")
    out = []
    for e in items if isinstance(items, list) else []:
        end = e.get("end") if isinstance(e, dict) else None
        if isinstance(end, dict) and end.get("state") != "finished":
            out.append(e)
    return out


def check_account(
    chain: Mapping[str, object] | None,
    kill_text: str,
    answered: bool,
    losses: int | None,
    causes: Mapping[str, str | None],
) -> list[Violation]:
    """What mntui said matches what the coordinator recorded: a kill the coordinator
    answered names every node of its last attempt (a spare it swapped in included);
    history counts as many failures as the chain has; every failed attempt has a saved
    report whose first failing node is the one the coordinator named (`causes`: each
    failed attempt's run -> its saved report's cause node, None when none was saved)."""
    if not chain:
        return [Violation("account", None, "no chain.json on the main to compare with")]
    found: list[Violation] = []
    items = chain.get("attempts")
    last = items[-1] if isinstance(items, list) and items else {}
    nodes = last.get("nodes") if isinstance(last, dict) else None
    named = set(KILLED_LINE.findall(kill_text))
    if answered and isinstance(nodes, list):
        missing = sorted(set(map(str, nodes)) - named)
        if missing:
            found.append(Violation("account", None, f"the kill did not name {missing} of the "
                                   f"coordinator's last attempt {nodes}"))  # fmt: skip
    failed = failed_attempts(chain)
    if losses is not None and losses != len(failed):
        found.append(Violation("account", None, f"history counts {losses} failure(s), the "
                               f"coordinator's chain {len(failed)}"))  # fmt: skip
    for e in failed:
        run, first = str(e.get("run")), e.get("first")
        want = first.get("node") if isinstance(first, dict) else None
        if run not in causes or causes[run] is None:
            found.append(Violation("account", None, f"attempt {run} failed: no saved report"))
        elif want is not None and causes[run] != want:
            found.append(Violation("account", want, f"attempt {run}'s report names "
                                   f"{causes[run]}, the coordinator {want} first"))  # fmt: skip
    return found
