"""A node's snapshot as the poller makes it, for the pure tests of the judge and its clock."""

from __future__ import annotations

from mntui.sessions.config import WatchPolicy
from mntui.sessions.node.rules import judging
from mntui.sessions.poll import NodeSnapshot


def snap(node: str = "n", **kw: object) -> NodeSnapshot:
    """A reachable node with a live pane and recent output; `kw` overrides any field."""
    base: dict[str, object] = {
        "node": node,
        "rank": 0,
        "at": 0.0,
        "reachable": True,
        "session": True,
        "pane_dead": False,
        "pane_pid": 10,
        "log_size": 100,
        "output_age": 1.0,
    }
    base.update(kw)
    return NodeSnapshot(**base)  # type: ignore[arg-type]


def judge_of(policy: WatchPolicy | None = None) -> judging.Judge:
    """The coordinator's judge (node/rules/judging.py) with the rules the launch sends it from
    `watch:` (launch/clusterwatch.py's watch_config): the one judge there is."""
    p = policy if policy is not None else WatchPolicy()
    rules = judging.Rules(
        frozen_after=p.frozen_after,
        unreachable_after=p.unreachable_after,
        on_failure=str(p.on_failure),
        on_stall=str(p.on_stall),
        stall_after=p.stall_after,
    )
    return judging.Judge(rules)
