"""The failure report: which node and rank broke first, and why, in a few lines.

After a teardown every rank's log is a wall of errors, and most of them are only the
others noticing: collective timeouts, "connection closed by peer". The report puts
the root cause first (the earliest node with a primary error, by the watch's own
observations corrected with the node's clock where the node wrote one), groups the
other nodes' errors under it as consequences, and keeps the stacks of hung ranks and
each node's last lines. Building it is pure; `evidence` and `stacks` did the IO. What
the nodes wrote is made terminal-safe where it enters (`summarize_node`, classify.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any

from mntui.sessions.node.rules.classify import first_error
from mntui.sessions.node.rules.firstfail import NodeCause, exit_text, first_failure
from mntui.sessions.node.rules.logrules import Finding
from mntui.sessions.poll import NodeState
from mntui.sessions.termsafe import clean, one_line

from .evidence import NodeEvidence
from .stacks import NodeStacks, RankStack
from .verdict import Conclusion, Suspect

# A conclusion from stacks and dumps leads only where the judge saw a hang (or on a
# live run): a failed rank's own error says more than what the others wait in.
CONCLUDES = frozenset({NodeState.FROZEN, NodeState.STALLED, NodeState.UNREACHABLE})

VERBS = {
    NodeState.FAILED: "failed",
    NodeState.ORPHANED: "lost its launcher",
    NodeState.FROZEN: "froze",
    NodeState.STALLED: "stalled",
    NodeState.UNREACHABLE: "became unreachable",
}
LAST_LINES = 20


class Ending(StrEnum):
    TORN_DOWN = "torn-down"  # the cluster's watch killed it
    ENDED = "ended"  # it exited by itself
    LIVE = "live"  # an on-demand report of a run still going (or hung)


@dataclass(frozen=True)
class Change:
    """A node's state as the watch first saw it (its wall clock)."""

    node: str
    state: NodeState
    why: str
    at: float


@dataclass(frozen=True)
class NodeSummary:
    node: str
    rank: int  # node rank
    state: str
    first_problem_at: float | None
    exit_code: int | None
    finding: Finding | None
    kernel: tuple[str, ...]
    stacks: tuple[RankStack, ...]
    stacks_missing: str | None
    last_lines: tuple[str, ...]
    evidence_error: str | None = None


@dataclass(frozen=True)
class FailureReport:
    job: str
    run_id: str
    headline: str
    cause: str
    cause_node: str | None
    first_at: float | None
    timeline: tuple[Change, ...]
    nodes: tuple[NodeSummary, ...]
    consequences: tuple[str, ...]
    ended_at: float | None  # the teardown's kill finished, or the job's last exit
    ending: Ending
    progress: str = ""
    flight_records: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    stack_consensus: tuple[str, ...] = ()  # the ranks' stacks folded, odd ones first
    flight: tuple[str, ...] = ()  # what the Flight Recorder dumps say
    culprits: tuple[Suspect, ...] = ()  # who holds the job, the likeliest first
    watchdog: str = ""  # what the judge saw first, when a conclusion leads instead
    slow: tuple[str, ...] = ()  # the straggler the sampler named while the job ran


def _node_cause(n: NodeSummary, why: str) -> str:
    if n.finding is not None:
        text = n.finding.summary
        if n.exit_code is not None and n.exit_code in (137, -9) and n.kernel:
            text += f"; kernel: {n.kernel[-1].strip()[:160]}"
        return text
    if n.exit_code is not None and n.exit_code != 0:
        text = exit_text(n.exit_code)
        if n.kernel and n.exit_code in (137, -9):
            text += f", killed by the kernel OOM killer: {n.kernel[-1].strip()[:160]}"
        return text
    return why


def summarize_node(
    node: str,
    rank: int,
    state: NodeState,
    changes: Sequence[Change],
    ev: NodeEvidence | None,
    stacks: NodeStacks | None,
    clock_offset: float | None,
    evidence_error: str | None = None,
) -> NodeSummary:
    """The node's part of the report. The node's text enters the report here (its log's
    lines, its kernel's, the error reading it) and is made terminal-safe here, once
    (termsafe.py): the headline goes to toasts, webhooks and `cause`, the text to
    every view, the JSON to scripts that print it."""
    problems = [c.at for c in changes if c.node == node and c.state.is_problem]
    first = min(problems) if problems else None
    if ev is not None and ev.exited_at is not None and ev.exit_code not in (None, 0):
        exited = ev.exited_at - (clock_offset or 0.0)  # node clock -> ours
        first = exited if first is None else min(first, exited)
    lines = ev.lines if ev is not None else []
    return NodeSummary(
        node=node,
        rank=rank,
        state=state.value,
        first_problem_at=first,
        exit_code=ev.exit_code if ev is not None else None,
        finding=first_error(lines) if lines else None,
        kernel=tuple(one_line(k) for k in ev.kernel) if ev is not None else (),
        stacks=stacks.stacks if stacks is not None else (),
        stacks_missing=stacks.missing if stacks is not None else None,
        last_lines=tuple(clean(x) for x in lines[-LAST_LINES:]),
        evidence_error=clean(evidence_error) if evidence_error is not None else None,
    )


def _root(
    nodes: Sequence[NodeSummary], trigger: str | None, first: str | None = None
) -> NodeSummary | None:
    """The node that broke first, by the coordinator's rule (node/rules/firstfail.py); `first`:
    the node the coordinator named when it decided, which stands (the report is built
    later, from what the nodes still hold, and must say what the decision said)."""
    named = next((n for n in nodes if n.node == first), None)
    if named is not None:
        return named
    causes = [
        NodeCause(
            n.node, n.rank, n.first_problem_at, n.exit_code,
            n.finding.rank if n.finding else None, n.finding.cause if n.finding else None,
            n.finding.summary if n.finding else None,
            bool(n.finding and n.finding.secondary), bool(n.finding and n.finding.mistake),
        )
        for n in nodes
    ]  # fmt: skip
    root = first_failure(causes, trigger)
    return next((n for n in nodes if root is not None and n.node == root.node), None)


def build(
    job: str,
    run_id: str,
    nodes: Sequence[NodeSummary],
    changes: Sequence[Change],
    *,
    trigger: tuple[str, NodeState, str] | None,
    ended_at: float | None,
    ending: Ending,
    progress: str = "",
    flight_records: Sequence[str] = (),
    conclusion: Conclusion | None = None,
    slow: Sequence[str] = (),
    first: str | None = None,
) -> FailureReport:
    """`first`: the node the coordinator named first when it decided (node/rules/firstfail.py)."""
    root = _root(nodes, trigger[0] if trigger else None, first)
    why = trigger[2] if trigger and root is not None and trigger[0] == root.node else ""
    cause = _node_cause(root, why or (root.state if root else "")) if root else "unknown"
    consequences = tuple(
        f"{n.node} (node rank {n.rank}): {_node_cause(n, n.state)}"
        + (" — a consequence" if n.finding is not None and n.finding.secondary else "")
        for n in nodes
        if root is not None and n.node != root.node and (n.finding or n.first_problem_at)
    )
    headline = _headline(root, cause, nodes, trigger, ended_at, ending)
    watchdog = ""
    leads = ending is Ending.LIVE or (trigger is not None and trigger[1] in CONCLUDES)
    if conclusion is not None and conclusion.headline and leads:
        watchdog, headline = headline, conclusion.headline
    return FailureReport(
        job=job,
        run_id=run_id,
        headline=headline,
        cause=cause,
        cause_node=root.node if root else None,
        first_at=root.first_problem_at if root else None,
        timeline=tuple(sorted(changes, key=lambda c: c.at)),
        nodes=tuple(nodes),
        consequences=consequences,
        ended_at=ended_at,
        ending=ending,
        progress=progress,
        flight_records=tuple(flight_records),
        stack_consensus=conclusion.stacks if conclusion else (),
        flight=conclusion.flight if conclusion else (),
        culprits=conclusion.culprits if conclusion else (),
        watchdog=watchdog,
        slow=tuple(slow),
    )


def _who(n: NodeSummary) -> str:
    rank = n.finding.rank if n.finding is not None else None
    return f"{n.node} rank {rank}" if rank is not None else f"{n.node} (node rank {n.rank})"


def _headline(
    root: NodeSummary | None,
    cause: str,
    nodes: Sequence[NodeSummary],
    trigger: tuple[str, NodeState, str] | None,
    ended_at: float | None,
    ending: Ending,
) -> str:
    if root is None:
        live = ending is Ending.LIVE
        return "no node has a problem yet" if live else f"the job ended: {cause}"
    state = NodeState(root.state) if root.state in NodeState._value2member_map_ else None
    if trigger is not None and trigger[0] == root.node:
        state = trigger[1]
    verb = VERBS.get(state, "failed") if state is not None else "failed"
    at = f" at {_clock(root.first_problem_at)}" if root.first_problem_at is not None else ""
    head = f"{_who(root)} {verb} first{at}: {cause}"
    if ending is Ending.TORN_DOWN:
        head += _torn_down(root, nodes, ended_at)
    elif ending is Ending.ENDED:
        codes = [f"{n.node} {n.exit_code}" for n in nodes if n.exit_code is not None]
        head += "; the job ended" + (f" (exit codes: {', '.join(codes)})" if codes else "")
    return head


def _torn_down(root: NodeSummary, nodes: Sequence[NodeSummary], ended_at: float | None) -> str:
    if ended_at is None or root.first_problem_at is None:
        return ""
    others = [n.node for n in nodes if n.node != root.node]
    later = max(0.0, ended_at - root.first_problem_at)
    return f"; {', '.join(others) if others else 'the job'} torn down {later:.1f} s later"


def killed_at(built: FailureReport, ended_at: float) -> FailureReport:
    """A teardown's report, written while the kill ran, completed with when the kill
    ended: the conclusion does not wait for a slow kill, and the time lost is still said."""
    if built.ended_at is not None:
        return built  # the first end stands
    root = next((n for n in built.nodes if n.node == built.cause_node), None)
    if built.ending is not Ending.TORN_DOWN or root is None:
        return replace(built, ended_at=ended_at)
    tail = _torn_down(root, built.nodes, ended_at)
    if built.watchdog:  # a conclusion leads: the watchdog's own line carries the time
        return replace(built, ended_at=ended_at, watchdog=built.watchdog + tail)
    return replace(built, ended_at=ended_at, headline=built.headline + tail)


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


# When the stacks were taken, as the report's ending says: a live report tears nothing down.
STACKS_TAKEN = {
    Ending.TORN_DOWN: "stacks of live ranks (py-spy, before the teardown):",
    Ending.ENDED: "stacks of the ranks still running (py-spy, as the job ended):",
    Ending.LIVE: "stacks of the ranks now (py-spy; the job runs on, nothing was killed):",
}


def render(report: FailureReport) -> str:
    """The text form: what a person reads at 3 a.m., most important first."""
    out = [report.headline, ""]
    if report.watchdog:
        out += [f"watchdog: {report.watchdog}", ""]
    if report.stack_consensus:
        out.append("what the ranks were doing (py-spy stacks, folded):")
        out += [f"  {line}" for line in report.stack_consensus]
        out.append("")
    if report.flight:
        out.append("flight recorder (the ranks' own record of their collectives):")
        out += [f"  {line}" for line in report.flight]
        out.append("")
    if report.progress:
        out += [f"progress: {report.progress}", ""]
    if report.slow:
        out += [*report.slow, ""]
    if report.consequences:
        out.append("consequences (not causes):")
        out += [f"  {c}" for c in report.consequences]
        out.append("")
    stacks = [s for n in report.nodes for s in n.stacks]
    missing = [(n.node, n.stacks_missing) for n in report.nodes if n.stacks_missing]
    if stacks or missing:
        out.append(STACKS_TAKEN[report.ending])
        out += [f"  {s.node} rank {s.rank} (pid {s.pid}): {s.summary}" for s in stacks]
        out += [f"  {node}: {why}" for node, why in missing]
        out.append("")
    out.append("timeline:")
    out += [f"  {_clock(c.at)}  {c.node:<12} {c.state.value:<12} {c.why}" for c in report.timeline]
    for n in report.nodes:
        out += ["", f"== {n.node} (node rank {n.rank}), last seen {n.state}"]
        if n.evidence_error:
            out.append(f"  could not read the node: {n.evidence_error}")
        if n.finding is not None:
            out.append(f"  first error (log line {n.finding.line + 1}): {n.finding.summary}")
        for s in n.stacks:
            out.append(f"  rank {s.rank} (pid {s.pid}, state {s.state}):")
            out += [f"    {f.name} ({f.file}:{f.line})" for f in s.frames[:12]]
        out += [f"  | {line}" for line in n.last_lines]
    if report.flight_records:
        out += ["", "NCCL flight recorder dumps:", *[f"  {p}" for p in report.flight_records]]
    return "\n".join(out) + "\n"


def to_json(report: FailureReport) -> dict[str, Any]:
    return asdict(report)
