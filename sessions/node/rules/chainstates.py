"""The restart chain's states, as `coord/chain.json` spells them: one spelling for the
coordinator that writes them (chain.py, chainlog.py), the successor that reads them back
(resume.py) and the manager that turns them into run records (watch/clusterchain.py,
recover/mainloss.py).

Why a leaf module: chain.py, chainlog.py, resume.py and notifysend.py all need these,
and the manager imports them too; here they import nothing but `enum`, so no import
cycle can form around them. The values are the file's: a renamed member must keep its
value, or a manager of this version misreads a chain a coordinator of the last wrote.
"""

from __future__ import annotations

from enum import Enum


class ChainStatus(str, Enum):
    """chain.json's `status`: where the chain stands (the first three: it goes on)."""

    RUNNING = "running"  # an attempt runs
    BACKOFF = "backoff"  # an attempt ended and the next waits out its delay
    STARTING = "starting"  # the next attempt is being started
    ENDED = "ended"  # the policy said no restart (or the placement stopped it)
    GAVE_UP = "gave-up"  # the policy would restart, but `max` is spent
    KILLED = "killed"  # the user's kill
    FAILED_RESTART = "failed-restart"  # an attempt did not start

    def __str__(self) -> str:
        return str(self.value)

    @property
    def live(self) -> bool:
        return self in LIVE


LIVE = frozenset({ChainStatus.RUNNING, ChainStatus.BACKOFF, ChainStatus.STARTING})
TERMINAL = frozenset(ChainStatus) - LIVE


class OutcomeKind(str, Enum):
    """How an attempt ended, as the chain has it (chain.Outcome; chain.json's `kind`)."""

    TEARDOWN = "teardown"  # the coordinator decided it
    ENDED = "ended"  # it ended by itself
    KILLED = "killed"  # the user's kill

    def __str__(self) -> str:
        return str(self.value)


def status_of(v: object) -> ChainStatus | None:
    """chain.json's `status` as read back (node data for the manager): None for
    anything this version does not know."""
    try:
        return ChainStatus(v) if isinstance(v, str) else None
    except ValueError:
        return None
