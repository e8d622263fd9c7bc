"""Whether, when and where to bring a failed job back: pure decisions (whether and
when are node/restarts.py's, which the coordinator on the cluster runs too).

A restart turns "woke up to a dead job" into "woke up to a job that lost 5 minutes",
but a job that can never work must not be relaunched forever: the policy restarts
only for the causes and exit codes it is given (never a clean exit, never by default
the codes that mean the command or config is wrong), backs off exponentially, gives
up after `max` attempts in a row, and forgets old failures once an attempt has made
progress for `reset_after` seconds. Where the next attempt runs (a repeat culprit or a
quarantined node swapped for a spare that fits) is node/placing.py's rule, the one the
coordinator runs on the cluster: here it is only given this machine's inputs, by
history/quarantines.place_here, the one a launch routes around quarantines with.
"""

from __future__ import annotations

from mntui.sessions.history.quarantines import laid_out, place_here
from mntui.sessions.node.restarts import (
    AttemptEnd,
    Decision,
    counted_failures,
    decide,
    ends_from,
    repeat_culprit,
)

__all__ = [
    "AttemptEnd",
    "Decision",
    "counted_failures",
    "decide",
    "ends_from",
    "laid_out",
    "place_here",
    "repeat_culprit",
]
