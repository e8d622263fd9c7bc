"""Whether a run the cluster watches has lost its main for good, as this machine sees it:
the one rule its standby (standby.py) acts on, pure.

Why a rule of its own, here: the coordinator runs on the main, so a main that is gone
(its host dead, or its coordinator and sentinel both) decides nothing, and a main the
coordinator will not replace (it broke twice in a row, or is quarantined: placing.py)
ends the chain saying only this machine can. Only this machine can tell the two cases
from "this machine is cut off" (a laptop on a train): the main silent alone proves
nothing, so a lost main needs the workers' word too, their sentinels' `lost.json`
(sentinel.py `lose`), read over SSH: every worker of the attempt, each lost it after the
attempt started. A worker that has not said it yet is waited for (its sentinel counts
the same `unreachable_after`, from its own clock), and so is one this machine does not
reach: it may still hear the main, and a stand-by that acted on the others' word would
start a second chain beside the cluster's live one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from mntui.sessions.node.chainstates import LIVE  # chain.json's statuses of a chain going on


class Call(StrEnum):
    WATCH = "watch"  # the cluster watches; nothing to do here
    LOST = "lost"  # the main is gone: the chain goes on from here
    GIVEN_UP = "given-up"  # the coordinator ended the chain for this machine to replace the main
    OVER = "over"  # the chain ended on the cluster for its own reasons


@dataclass(frozen=True)
class Look:
    """What this machine saw of the run, one look (recorded inputs of the unit test)."""

    main: str
    workers: tuple[str, ...]
    started_at: float  # wall clock: the current attempt's start (an older lost.json is not its)
    unreachable_after: float
    silent: float | None  # seconds since the main last answered with its coordinator alive
    chain: Mapping[str, Any] | None  # coord/chain.json as last read (the main may be gone)
    lost: Mapping[str, Mapping[str, Any] | None]  # a worker reached -> its lost.json, or None
    malformed: tuple[str, ...] = ()  # workers reached whose lost.json did not parse


@dataclass(frozen=True)
class Verdict:
    call: Call
    why: str


def judge_main(look: Look) -> Verdict:
    """The chain's own end first (it was read while the main answered), then the silence."""
    chain = look.chain
    status = chain.get("status") if chain is not None else None
    if chain is not None and status not in LIVE:
        why = str(chain.get("why") or status)[:300]
        return Verdict(Call.GIVEN_UP if chain.get("main_here") is True else Call.OVER, why)
    if look.silent is None or look.silent < look.unreachable_after:
        return Verdict(Call.WATCH, "the main answers")
    silent = f"the main {look.main} silent for {look.silent:.0f} s"
    if not look.workers:
        return Verdict(Call.WATCH, f"{silent}; a one-node run has no worker to confirm it")
    reached = [w for w in look.workers if w in look.lost]
    said = [w for w in reached if _lost_now(look.lost[w], look)]
    waiting = [w for w in reached if w not in said]
    unreached = [w for w in look.workers if w not in look.lost]
    if not reached:
        unseen = "no worker answers either (this machine may be the one cut off)"
        return Verdict(Call.WATCH, f"{silent}; {unseen}")
    bad = [w for w in waiting if w in look.malformed]
    if bad:  # it wrote one: waiting on it quietly would wait forever
        return Verdict(Call.WATCH, f"{silent}; the lost.json of {', '.join(bad[:3])} is "
                       "malformed: not taken as its word")  # fmt: skip
    if waiting:
        return Verdict(Call.WATCH, f"{silent}; waiting for {', '.join(waiting[:3])} to lose it")
    if unreached:  # it may still hear the main: its word is the one that can say no
        return Verdict(Call.WATCH, f"{silent}; {', '.join(unreached[:3])} cannot be reached "
                       "from here: waiting for every worker's word")  # fmt: skip
    return Verdict(Call.LOST, f"{silent}, and {', '.join(said[:3])} lost it too")


def _lost_now(data: Mapping[str, Any] | None, look: Look) -> bool:
    """A `lost.json` of this attempt: written after it started."""
    at = data.get("lost_at") if data is not None else None
    return isinstance(at, (int, float)) and not isinstance(at, bool) and at >= look.started_at
