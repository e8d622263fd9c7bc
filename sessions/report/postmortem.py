"""Turning what a look saw, and what the nodes still hold, into a report.

The order matters: stacks of hung ranks are taken before the kill (they exist only
while the processes do), the kill is not delayed by more than the capture budget,
and logs, exit codes and kernel lines are read after it (they stay on the nodes).
The report is saved with the run record as text and JSON, and the record keeps its
headline, so `mntui status` can say in one line why an ended run ended.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mntui.sessions.config import JobConfig, compile_pattern
from mntui.sessions.history import StepClock, compile_checkpoint
from mntui.sessions.launch import LineSplitter
from mntui.sessions.node.board import teardown as coordinator
from mntui.sessions.poll import (
    DEFAULT_PATTERN,
    NodeSnapshot,
    NodeState,
    ProgressTracker,
    Verdict,
    describe,
)
from mntui.sessions.procs import run_pattern
from mntui.sessions.results import GroupResult
from mntui.sessions.runs import RunRecord, write_atomic
from mntui.sessions.ssh import Cluster
from mntui.sessions.termsafe import clean, one_line

from . import evidence, frchild, nodestacks, stacks
from . import failure as report
from .ended import proven_ended
from .failure import Change, Ending, FailureReport
from .suspect import slow_section
from .verdict import Conclusion, conclude

# The states in which the others most likely wait in a collective, worth a stack: the
# coordinator's set, one rule for both watches.
HUNG = coordinator.HUNG


@dataclass
class Observations:
    """What a look saw of a run (the app's polls, a report's poll, the coordinator's
    journal): state changes with the time they were first seen, each node's clock
    offset, its latest state and progress."""

    changes: list[Change] = field(default_factory=list)
    offsets: dict[str, float] = field(default_factory=dict)  # node clock - local clock
    states: dict[str, NodeState] = field(default_factory=dict)
    progress: str = ""
    last_output: float | None = None  # local time any node's log last grew
    last_progress: float | None = None  # local time any node's step last advanced
    tracker: ProgressTracker | None = None
    ranks: dict[str, int] = field(default_factory=dict)  # node -> node rank, for wording
    splitters: dict[str, LineSplitter] = field(default_factory=dict)
    steps: StepClock | None = None  # first/last step, checkpoints: the ledger's

    def saw(self, node: str, state: NodeState, why: str, at: float) -> None:
        if self.states.get(node) is not state:
            self.changes.append(Change(node, state, why, at))
            self.states[node] = state

    def clock(self, node: str, node_time: float, local_time: float) -> None:
        self.offsets.setdefault(node, node_time - local_time)


def observations(cfg: JobConfig, record: RunRecord) -> Observations:
    """Observations that also follow each node's training step (`progress_pattern`)."""
    pattern = compile_pattern(cfg.progress_pattern or DEFAULT_PATTERN)
    return Observations(
        tracker=ProgressTracker(pattern),
        ranks={n.node: n.rank for n in record.nodes},
        splitters={n.node: LineSplitter() for n in record.nodes},
        steps=StepClock(
            compile_checkpoint(cfg.checkpoint_pattern) if cfg.checkpoint_pattern else None
        ),
    )


def observe(
    obs: Observations, snaps: Mapping[str, NodeSnapshot], verdicts: Mapping[str, Verdict]
) -> None:
    """Feed one poll's results: the node's clock is read at about the middle of the
    round trip, and a state counts from the first poll that saw it. Every node's
    progress is fed on every poll, lines or not: that is how a stopped node's rate
    falls to 0. Output is not progress (a traceback is output): `last_progress` moves
    only when a step advances, the unfinished line's (a `\\r` progress bar) included."""
    now = time.time()
    fed: list[str] = []
    for node, snap in snaps.items():
        if snap.node_time is not None and snap.rtt is not None:
            obs.clock(node, snap.node_time, snap.at - snap.rtt / 2)
        if node in verdicts:
            obs.saw(node, verdicts[node].state, verdicts[node].why, now)
        if snap.new_output:
            obs.last_output = now
        if obs.tracker is not None:
            splitter = obs.splitters.setdefault(node, LineSplitter())
            lines = splitter.feed(snap.new_output)
            fed += lines
            if obs.tracker.feed(node, lines, now, splitter.pending()):
                obs.last_progress = now
    if obs.tracker is not None:
        steps = obs.tracker.snapshot(now)
        obs.progress = describe(steps, obs.ranks, now, obs.tracker.pace())
        if obs.steps is not None:
            top = max((p.step for p in steps.values() if p.step is not None), default=None)
            obs.steps.feed(now, top, fed)


@dataclass(frozen=True)
class Stacks:
    by_node: Mapping[str, stacks.NodeStacks]
    seconds: float


def capture_stacks(
    cfg: JobConfig, record: RunRecord, cluster: Cluster, skip: frozenset[str] = frozenset()
) -> Stacks:
    """py-spy on every live rank of every node but `skip` (an unreachable one), within
    `watch.capture_budget`, and the ranks' Flight Recorder dumps asked for meanwhile; a
    node that fails says why in its entry."""
    t0 = time.monotonic()
    budget = cfg.watch.capture_budget
    if budget <= 0:
        return Stacks({}, 0.0)
    targets: dict[str, tuple[str, str | None]] = {
        n.node: (run_pattern(n.tag), n.run_dir) for n in record.nodes if n.node not in skip
    }
    got = stacks.capture(cluster, targets, budget)
    by_node = dict(got.succeeded)
    by_node.update({n: stacks.NodeStacks(n, (), f"no stacks: {e}") for n, e in got.errors.items()})
    return Stacks(by_node, time.monotonic() - t0)


def make_report(
    cfg: JobConfig,
    record: RunRecord,
    cluster: Cluster,
    obs: Observations,
    *,
    trigger: tuple[str, NodeState, str] | None,
    taken: Stacks | None,
    ended_at: float | None,
    ending: Ending,
) -> FailureReport:
    """Read every node's evidence (one round trip each, in parallel) and build. Saving
    is the mirror's (endreport.build_saved, which keeps the Flight Recorder dumps in the
    run dir too): a snapshot is never the run's conclusion, nor writes beside it."""
    lost = trigger[0] if trigger is not None and trigger[1] is NodeState.UNREACHABLE else None
    found = gather_all(cfg, record, cluster, frozenset({lost} if lost else ()))
    return assemble(
        cfg, record, obs, found, trigger=trigger, taken=taken, ended_at=ended_at, ending=ending
    )


def gather_all(
    cfg: JobConfig, record: RunRecord, cluster: Cluster, skip: frozenset[str]
) -> GroupResult[evidence.NodeEvidence]:
    prefixes = {n.name: evidence.flight_recorder_prefix(dict(n.env)) for n in cfg.nodes}
    return evidence.gather(cluster, record, prefixes, skip)


def assemble(
    cfg: JobConfig,
    record: RunRecord,
    obs: Observations,
    found: GroupResult[evidence.NodeEvidence],
    *,
    trigger: tuple[str, NodeState, str] | None,
    taken: Stacks | None,
    ended_at: float | None,
    ending: Ending,
    keep_dumps: bool = False,
    first: str | None = None,
) -> FailureReport:
    """The report from what was read; `first`: the node the coordinator named first."""
    saved = evidence.save_flight_records(record, found.succeeded) if keep_dumps else []
    by_node = taken.by_node if taken is not None else {}
    conclusion = _conclusion(record, trigger, taken, found.succeeded, ending)
    nodes = [
        report.summarize_node(
            n.node,
            n.rank,
            obs.states.get(n.node, NodeState.NOT_RUNNING),
            obs.changes,
            found.succeeded.get(n.node),
            by_node.get(n.node),
            obs.offsets.get(n.node),
            found.errors.get(n.node),
        )
        for n in record.nodes
    ]
    return report.build(
        record.job,
        record.run_id,
        nodes,
        obs.changes,
        trigger=trigger,
        ended_at=ended_at,
        ending=ending,
        progress=obs.progress,
        flight_records=[str(p) for p in saved],
        conclusion=conclusion,
        slow=slow_section(record.dir),
        first=first,
    )


def ranks_of(record: RunRecord) -> dict[str, tuple[int, ...]]:
    """node -> its global ranks: torchrun numbers them node by node, in node-rank order."""
    out: dict[str, tuple[int, ...]] = {}
    start = 0
    for n in sorted(record.nodes, key=lambda n: n.rank):
        count = n.nproc if n.nproc is not None else 1
        out[n.node] = tuple(range(start, start + count))
        start += count
    return out


def _conclusion(
    record: RunRecord,
    trigger: tuple[str, NodeState, str] | None,
    taken: Stacks | None,
    found: Mapping[str, evidence.NodeEvidence],
    ending: Ending,
) -> Conclusion | None:
    """Who holds the job, from the stacks taken before the kill and the dumps read
    after it; a node that gave no stacks is named with why."""
    if ending is Ending.ENDED and not any(ev.flight_records for ev in found.values()):
        return None
    by_node = taken.by_node if taken is not None else {}
    ranks = ranks_of(record)
    files = {(node, name): data for node, ev in found.items()
             for name, data in ev.flight_records.items()}  # fmt: skip
    # In a child process, within its budget: a hostile dump cannot hold this one.
    reading = frchild.read_within(files, sum(len(r) for r in ranks.values())) if files else None
    all_stacks = [s for n in by_node.values() for s in n.stacks]
    missing = {node: n.missing for node, n in by_node.items() if n.missing and not n.stacks}
    if by_node:  # a capture ran: a node it did not reach is named too
        missing.update({n.node: "not reached" for n in record.nodes if n.node not in by_node})
    return conclude(trigger, all_stacks, missing, ranks, reading)


def save(record: RunRecord, built: FailureReport) -> Path:
    """The text and the cause go to terminals as they are (`cat`, `mntui status`): node
    text in them is made safe here (termsafe.py); the JSON escapes its own."""
    # replaced whole: `mntui report` and the app read them while a teardown writes twice
    write_atomic(record.dir / "report.txt", clean(report.render(built)))
    write_atomic(record.dir / "report.json", json.dumps(report.to_json(built), indent=2))
    record.update(lambda r: setattr(r, "cause", one_line(built.headline)))
    return record.dir / "report.txt"


def saved_report(record: RunRecord) -> tuple[str, str] | None:
    """(text, json) of the run's saved report, if it has one."""
    try:
        return (record.dir / "report.txt").read_text(), (record.dir / "report.json").read_text()
    except OSError:
        return None


def report_now(cfg: JobConfig, record: RunRecord, cluster: Cluster) -> FailureReport:
    """`mntui report` on a run that is still going (or hung): one poll for the states,
    the ranks' stacks, every node's evidence; nothing is killed, nothing saved (a
    snapshot is no conclusion: snapshot.py). Only a poll that proves the job ended on
    every node (ended.py) gets no stacks and says it ended; one that proves nothing (a
    node just starting, a node slow to answer) is a live run's. Every node is asked for
    stacks: one that did not answer the poll in its round may only be slow (a first
    connection on a loaded machine), and one that cannot be reached says why in its
    entry; unlike a teardown's, no kill waits for them."""
    from mntui.sessions.poll import Poller, derive

    obs = Observations()
    poller = Poller(record, cluster)
    poller.tail_from_end()
    snaps = poller.poll()
    stall = cfg.watch.stall_threshold()
    verdicts = {n: derive(s, stall) for n, s in snaps.items()}
    observe(obs, snaps, verdicts)
    if proven_ended(snaps, verdicts):
        found = gather_all(cfg, record, cluster, frozenset())
        if record.watch_port is not None:  # the cluster watched it: stacks of its teardown?
            torn = nodestacks.at_teardown(record, found.succeeded)
            if torn is not None:
                return _cluster_teardown(cfg, record, obs, found, torn)
        return assemble(cfg, record, obs, found, trigger=None, taken=None, ended_at=None,
                      ending=Ending.ENDED)  # fmt: skip
    taken = capture_stacks(cfg, record, cluster)
    return make_report(
        cfg, record, cluster, obs, trigger=None, taken=taken, ended_at=None, ending=Ending.LIVE
    )


def _cluster_teardown(
    cfg: JobConfig,
    record: RunRecord,
    obs: Observations,
    found: GroupResult[evidence.NodeEvidence],
    torn: nodestacks.AtTeardown,
) -> FailureReport:
    """The report of a hang the cluster's coordinator tore down: its decision, and the
    stacks its sentinels took before the kill, as the manager's teardown would have had
    them (a snapshot still: `mntui report` shows it, nothing saves it)."""
    trigger = torn.trigger
    if trigger is not None:
        at = torn.decided_at if torn.decided_at is not None else time.time()
        obs.saw(trigger[0], trigger[1], trigger[2], at - obs.offsets.get(record.main.node, 0.0))
    taken = Stacks(torn.by_node, torn.seconds)
    return assemble(cfg, record, obs, found, trigger=trigger, taken=taken, ended_at=None,
                  ending=Ending.TORN_DOWN)  # fmt: skip
