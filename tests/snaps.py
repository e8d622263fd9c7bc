"""A node's snapshot as the poller makes it, for the pure tests of the judge and its clock."""

from __future__ import annotations

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
