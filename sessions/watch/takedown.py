"""Tearing a broken job down: stacks first, then the kill and the report at once.

The watchdog (headless or in the app) calls this once it has decided. For a hang,
the ranks' Python stacks are taken before the kill, within `watch.capture_budget`,
because they vanish with the processes; the report is built from what the nodes hold
while the kill runs, and completed with the kill's end. Neither may stop the kill: a
failed capture or report is logged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from mntui.sessions.config import JobConfig
from mntui.sessions.events import Event, Phase
from mntui.sessions.history import note_steps
from mntui.sessions.launch import kill_job, not_clean
from mntui.sessions.poll import NodeState
from mntui.sessions.report import (
    HUNG,
    Ending,
    FailureReport,
    Observations,
    by_user,
    capture_stacks,
    killed_at,
    save,
    try_report,
)
from mntui.sessions.runs import RunRecord, RunStatus, load_run
from mntui.sessions.ssh import Cluster

from .judge import Trigger


@dataclass(frozen=True)
class Teardown:
    clean: bool  # every node but an unreachable culprit is clean
    report: FailureReport | None  # None: building it failed (logged), the kill did not


def teardown(
    cfg: JobConfig,
    record: RunRecord,
    cluster: Cluster,
    t: Trigger,
    on_event: Callable[[Event], None] = lambda e: None,
    obs: Observations | None = None,
) -> Teardown:
    """Kill the whole job because of `t`, write why into the run record, and leave a
    failure report. For a hang, the ranks' stacks are taken first, within the budget."""
    obs = obs if obs is not None else Observations()
    decided = time.time()
    obs.saw(t.node, t.state, t.why, decided)
    rank = record.node(t.node).rank
    what = f"watchdog: {t.state.value} ({t.why}); tearing the job down"
    on_event(Event(t.node, rank, Phase.KILLING, what))
    taken = None
    if t.state in HUNG and cfg.watch.capture_budget > 0:
        skip = frozenset({t.node}) if t.state is NodeState.UNREACHABLE else frozenset()
        taken = capture_stacks(cfg, record, cluster, skip)
        count = sum(len(n.stacks) for n in taken.by_node.values())
        on_event(
            Event(None, None, Phase.NOTICE, f"stacks of {count} rank(s) in {taken.seconds:.1f}s")
        )
    started = time.time()
    # The kill and the report's reads run at once: the stacks and dumps are in hand, so
    # the conclusion is written while the kill runs, not after it (it can take seconds on
    # a loaded node). An unreachable culprit's kill runs out its own timeout aside.
    lost = t.node if t.state is NodeState.UNREACHABLE else None
    names = [n.name for n in cfg.nodes if n.name != lost]
    with ThreadPoolExecutor(2, "mntui-teardown-kill") as pool:
        late = None
        if lost is not None:
            late = pool.submit(kill_job, cfg, cluster, names=[lost], on_event=on_event)
        kill = pool.submit(kill_job, cfg, cluster, names=names, on_event=on_event)
        built = try_report(
            cfg, record, cluster, obs, trigger=(t.node, t.state, t.why), taken=taken,
            ended_at=None, ending=Ending.TORN_DOWN,
        )  # fmt: skip
        reported = time.time()
        results = kill.result()
        ended = time.time()
        if late is not None:
            results.update(late.result())
    if built is not None:
        built = killed_at(built, ended)
        save(record, built)
    built = users_doing(record, built)
    # An unreachable culprit cannot be killed: the others being clean is what counts.
    dirty = [n for n in not_clean(results) if n != lost]
    culprit = next((n for n in built.nodes if n.node == t.node), None) if built else None

    def torn_down(r: RunRecord) -> None:
        if r.status.is_live:  # a user's kill that got there first keeps its word
            r.status = RunStatus.KILLED if r.killed_nodes else RunStatus.TORN_DOWN
        r.error = f"{t.node} {t.state.value}: {t.why}"
        note_steps(r, obs.steps)  # the ledger's training time and lost work
        r.note(
            "watchdog-teardown",
            node=t.node,
            state=t.state.value,
            why=t.why,
            last_lines=list(culprit.last_lines) if culprit else [],
            kill_seconds=round(ended - started, 3),
            decided_at=round(decided, 3),
            report_at=round(reported, 3) if built is not None else None,
            killed_at=round(ended, 3),  # the report is completed with it
            stack_seconds=round(taken.seconds, 3) if taken else None,
            clean=not dirty,
            results={n: (o.value.summary() if o.value else o.error) for n, o in results.items()},
        )

    record.update(torn_down)
    if built is not None:
        on_event(Event(None, None, Phase.NOTICE, f"report: {built.headline} (`mntui report`)"))
    return Teardown(not dirty, built)


def user_kills(record: RunRecord) -> tuple[list[str], float | None]:
    """Nodes of this run a user's `mntui kill NODE` stopped, and when (the record on disk:
    the kill is another process). A node the run does not use is not its end's cause,
    even where an older record wrote one down."""
    current = load_run(record.job, record.run_id) or record
    used = {n.node for n in current.nodes}
    at = next(
        (
            h.get("at")
            for h in reversed(current.history)
            if h.get("what") == "kill" and "nodes" in h
        ),
        None,
    )
    killed = [n for n in current.killed_nodes if n in used]
    return killed, at if isinstance(at, (int, float)) and killed else None


def users_doing(record: RunRecord, built: FailureReport | None) -> FailureReport | None:
    """A run a user partly killed ended because of it: the report says so, and blames
    no node for what followed."""
    killed, at = user_kills(record)
    if built is None or not killed:
        return built
    mended = by_user(built, killed, at)
    save(record, mended)
    return mended
