"""What a node's snapshot means: one state, derived by a pure function.

The rule lives in the node package (node/rules/states.py), where the coordinator on the main
node derives from a sentinel's facts with it; a NodeSnapshot has every attribute it
reads (`rules.Facts`), so the manager's modules keep importing it from here.
"""

from __future__ import annotations

from mntui.sessions.node.rules.states import PROBLEMS, NodeState, Verdict, derive, may_still_run

__all__ = ["PROBLEMS", "NodeState", "Verdict", "derive", "may_still_run"]
