"""Which rank holds a synchronous job: the rule lives in the node package
(node/straggle.py), where the cluster's coordinator judges its sentinels' samples with
it; the manager's sampler (sampler.py) tallies and judges with the same one, from here.
"""

from __future__ import annotations

from mntui.sessions.node.straggle import (
    ALPHA,
    GAP,
    MIN_SAMPLES,
    WINDOW,
    Sample,
    Tally,
    chance,
    name_suspect,
)

__all__ = [
    "ALPHA",
    "GAP",
    "MIN_SAMPLES",
    "WINDOW",
    "Sample",
    "Tally",
    "chance",
    "name_suspect",
]
