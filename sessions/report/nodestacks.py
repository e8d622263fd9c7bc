"""The stacks the cluster's sentinels took before a hang's kill, read back by the manager.

Why: with `watch.where: cluster` the coordinator tears a hang down while this machine
may be away, and the stacks exist only while the ranks do; so each sentinel runs the
launch's capture script for its node before it kills and saves the output, with the
nonce that marks its lines and the coordinator's decision, as `stacks.json` in the
attempt's run dir (node/sentinel/stackcap.py). `mntui report` reads that file in the round trip
that reads the node's other evidence (evidence.py) and parses the output here with the
one parser the manager's own capture uses (stacks.parse_capture), so the report of a
cluster teardown reads as that of a manager's: the conclusion, each rank's stack.

The file is the node's data: bounded, parsed strictly, a line that is not the
script's own counted as malformed, never a crash of the report, and never believed
about a node or state that is not of this run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from mntui.sessions.node.board.teardown import HUNG
from mntui.sessions.node.wire.watchfields import NONCE
from mntui.sessions.poll import NodeState
from mntui.sessions.runs import RunRecord
from mntui.sessions.termsafe import one_line

from .evidence import STACKS_BYTES, NodeEvidence
from .stacks import NodeStacks, parse_capture


@dataclass(frozen=True)
class Saved:
    """One node's saved capture, as far as it could be read."""

    stacks: NodeStacks
    decision: tuple[str, NodeState, str] | None  # the coordinator's: node, state, why
    decided_at: float | None  # the main's clock
    seconds: float | None  # how long the capture took on the node


@dataclass(frozen=True)
class AtTeardown:
    """What the sentinels saved at a teardown: every node's stacks and the decision."""

    by_node: Mapping[str, NodeStacks]
    trigger: tuple[str, NodeState, str] | None
    decided_at: float | None
    seconds: float  # the slowest node's capture


def read_saved(node: str, raw: bytes, run: str, nodes: frozenset[str]) -> Saved:
    """`raw`, a node's stacks.json (`run`: the run whose dir it was read from)."""
    data = _load(raw)
    if data is None:
        return _unreadable(node, "its saved stacks are not a capture of ours", 1)
    nonce, out = data.get("nonce"), data.get("out")
    if data.get("run") != run or not isinstance(nonce, str) or not NONCE.match(nonce):
        return _unreadable(node, "its saved stacks are not this run's", 1)
    if not isinstance(out, str):
        return _unreadable(node, "its saved stacks hold no output", 1)
    stranger = sum(1 for line in out.split("\n") if line and not line.startswith(f"@{nonce}"))
    got = parse_capture(node, out, nonce)
    got = replace(got, malformed=got.malformed + stranger)
    error = data.get("error")
    if not got.stacks and got.missing is None and (isinstance(error, str) or got.malformed):
        why = one_line(error, 200) if isinstance(error, str) else "no rank's stack in it"
        bad = f" ({got.malformed} malformed line(s))" if got.malformed else ""
        got = replace(got, missing=f"no stacks at the teardown: {why}{bad}")
    decision, at = _decision(data.get("decision"), nodes)
    return Saved(got, decision, at, _number(data.get("seconds")))


def _load(raw: bytes) -> dict[str, Any] | None:
    if len(raw) > STACKS_BYTES:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and data.get("v") == 1 else None


def _unreadable(node: str, why: str, malformed: int) -> Saved:
    return Saved(NodeStacks(node, (), why, malformed), None, None, None)


def _decision(
    v: object, nodes: frozenset[str]
) -> tuple[tuple[str, NodeState, str] | None, float | None]:
    """The coordinator's decision the stacks were taken for; only a hang of this run's
    nodes (anything else is no decision of the coordinator's)."""
    if not isinstance(v, dict):
        return None, None
    node, state, why = v.get("node"), v.get("state"), v.get("why")
    known = {s.value: s for s in HUNG}
    if not isinstance(node, str) or not isinstance(state, str) or not isinstance(why, str):
        return None, None
    if node not in nodes or state not in known:
        return None, None
    return (node, known[state], one_line(why, 200)), _number(v.get("at"))


def _number(v: object) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e12
    return float(v) if ok and isinstance(v, (int, float)) else None


def at_teardown(record: RunRecord, found: Mapping[str, NodeEvidence]) -> AtTeardown | None:
    """The sentinels' stacks from the run's teardown (None: no node saved any); the
    decision is the first node's (the main first) that names one."""
    nodes = frozenset(n.node for n in record.nodes)
    saved = {
        n.node: read_saved(n.node, ev.capture, record.run_id, nodes)
        for n in record.nodes
        if (ev := found.get(n.node)) is not None and ev.capture is not None
    }
    if not saved:
        return None
    first = next((s for s in saved.values() if s.decision is not None), None)
    seconds = max((s.seconds for s in saved.values() if s.seconds is not None), default=0.0)
    return AtTeardown(
        {n: s.stacks for n, s in saved.items()},
        first.decision if first else None,
        first.decided_at if first else None,
        seconds,
    )
