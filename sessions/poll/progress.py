"""Training progress per node, read from its log: the tracker lives in the node package
(node/rules/steps.py), where a sentinel reads its node's steps and the coordinator learns the
job's pace; what is said about progress is standing.py's. Both are read from here.
"""

from __future__ import annotations

from mntui.sessions.node.rules.steps import (
    DEFAULT_PATTERN,
    MAX_GAPS,
    MAX_LINE,
    MAX_STEP,
    MIN_GAPS,
    NodeProgress,
    Pace,
    ProgressTracker,
)

from .standing import MAX_WHO, STOP_AFTER, STOP_STEPS, describe, stop_after, stopped

__all__ = [
    "DEFAULT_PATTERN",
    "MAX_GAPS",
    "MAX_LINE",
    "MAX_STEP",
    "MAX_WHO",
    "MIN_GAPS",
    "STOP_AFTER",
    "STOP_STEPS",
    "NodeProgress",
    "Pace",
    "ProgressTracker",
    "describe",
    "stop_after",
    "stopped",
]
