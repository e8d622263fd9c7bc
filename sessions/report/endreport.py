"""The saved report of an attempt the cluster's coordinator ended: built from what the
coordinator recorded when it happened, and what the nodes kept since.

Why here, and once: the coordinator decides and names the first failure on the cluster
while this machine may sleep (node/rules/firstfail.py); the evidence a report reads (each
node's log tail, exit code and its time, the stacks its sentinel took before a hang's
kill, the ranks' Flight Recorder dumps) stays in the attempt's run dir on each node.
At this machine's first look after the end the report is built from both and saved
with the attempt's record: after that it is what `report`, `status` and the app show,
never rebuilt from a live snapshot (whose clock was the time of asking, and whose
nodes may by then run the next attempt, or be gone). Its timeline is the
coordinator's: the states its judge saw, stamped when it saw them; its progress line
the steps it journaled (every 5 s), as a poll's tracker would have said them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from mntui.sessions.config import JobConfig
from mntui.sessions.node.rules import firstfail
from mntui.sessions.poll import NodeProgress, NodeState, describe
from mntui.sessions.runs import RunRecord
from mntui.sessions.ssh import Cluster
from mntui.sessions.termsafe import one_line

from . import nodestacks
from .failure import Change, Ending, FailureReport
from .postmortem import Observations, Stacks, assemble, gather_all, save

_STATES = {s.value: s for s in NodeState}


def _of_attempt(
    journal: Iterable[Mapping[str, Any]], run: str, kind: str
) -> list[tuple[object, dict[str, Any], float]]:
    """(node, data, t) of the journal's `kind` lines for attempt `run`: the lines after
    the attempt's own start up to the next attempt's (`attempt` lines name their run).
    The first attempt has no such line: the lines before the first one are its, and no
    later attempt's."""
    out: list[tuple[object, dict[str, Any], float]] = []
    inside = None  # unknown until an `attempt` line says whose lines follow
    for e in journal:
        data = e.get("data")
        data = data if isinstance(data, dict) else {}
        if e.get("kind") == "attempt":
            mine = data.get("run") == run
            if inside is None and mine:
                out.clear()  # the first attempt's lines, not this one's
            inside = mine
            continue
        t = e.get("t")
        ok = isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)
        if inside is not False and e.get("kind") == kind and ok:
            assert isinstance(t, (int, float))
            out.append((e.get("node"), data, float(t)))
    return out


def changes_of(
    journal: Iterable[Mapping[str, Any]], run: str, nodes: Iterable[str]
) -> list[Change]:
    """The judge's states for attempt `run`, from the coordinator's journal."""
    mine = frozenset(nodes)
    out: list[Change] = []
    for node, data, t in _of_attempt(journal, run, "state"):
        state = data.get("state")
        if isinstance(node, str) and node in mine and state in _STATES:
            out.append(Change(node, _STATES[state], one_line(str(data.get("why") or ""), 200), t))
    return out


def progress_of(
    journal: Iterable[Mapping[str, Any]], run: str, ranks: Mapping[str, int], until: float | None
) -> str:
    """Where the ranks stood when attempt `run` ended, from the steps the coordinator
    journaled (`rank 1 stopped at step 40; rank 0 reached 41`): each node's last step,
    and when it last advanced; "" when none was journaled."""
    seen: dict[str, NodeProgress] = {}
    for _, data, t in _of_attempt(journal, run, "steps"):
        steps = data.get("steps")
        for node, step in (steps if isinstance(steps, dict) else {}).items():
            if node not in ranks or type(step) is not int:
                continue
            before = seen.get(node)
            if before is None or before.step is None or step > before.step:
                seen[node] = NodeProgress(node, step, None, t)
    return describe(seen, ranks, until) if seen else ""


def _seen(entry: Mapping[str, Any], nodes: frozenset[str]) -> tuple[str, NodeState, str] | None:
    """What the coordinator's judge decided on, when it decided (a teardown)."""
    seen = entry.get("seen")
    if not isinstance(seen, dict) or entry.get("kind") != "teardown":
        return None
    node, state, why = seen.get("node"), seen.get("state"), seen.get("why")
    if node not in nodes or state not in _STATES or not isinstance(why, str):
        return None
    assert isinstance(node, str) and isinstance(state, str)
    return node, _STATES[state], one_line(why, 300)


def build_saved(
    cfg: JobConfig,
    record: RunRecord,
    cluster: Cluster,
    entry: Mapping[str, Any],
    changes: list[Change],
    progress: str = "",
) -> FailureReport:
    """Attempt `record`'s report from its chain.json `entry` (what the coordinator
    decided, its first failure, when it ended) and the evidence its nodes kept; saved."""
    nodes = frozenset(n.node for n in record.nodes)
    trigger = _seen(entry, nodes)
    ranks = {n.node: n.rank for n in record.nodes}
    first = firstfail.read(entry.get("first"), ranks)
    obs = Observations(ranks=ranks, progress=progress)
    for c in sorted(changes, key=lambda c: c.at):
        obs.saw(c.node, c.state, c.why, c.at)
    lost = trigger[0] if trigger is not None and trigger[1] is NodeState.UNREACHABLE else None
    found = gather_all(cfg, record, cluster, frozenset({lost} if lost else ()))
    torn = nodestacks.at_teardown(record, found.succeeded)
    taken = Stacks(torn.by_node, torn.seconds) if torn is not None else None
    ended = entry.get("ended_at")
    ended_at = float(ended) if isinstance(ended, (int, float)) and math.isfinite(ended) else None
    ending = Ending.TORN_DOWN if trigger is not None else Ending.ENDED
    built = assemble(
        cfg, record, obs, found, trigger=trigger, taken=taken, ended_at=ended_at, ending=ending,
        keep_dumps=True, first=first.node if first is not None else None,
    )  # fmt: skip
    save(record, built)
    return built
