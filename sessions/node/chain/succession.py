"""Who takes a lost main's place, and when: the rule a successor on the cluster acts on,
pure (successor.py carries it out; the sentinels' side is lostmain.py).

Why a rule of its own: the coordinator runs on the main, so a main that is gone (its
host dead, or its coordinator and sentinel both) decides nothing, and no node can tell
a dead main from one it alone is cut off from. So the successor is one spare, the one
the placement rule would put at rank 0 (`candidate`: the first spare in the config's
order that is in no use, not quarantined nor lost in this chain, and runs as many
processes as the main; placing.place with `here`, as this machine's stand-by placed
it before issue 37), and it acts only when it lost the main itself and every worker
of the attempt said, after the attempt started, that it lost the main too: a worker
that still hears the main says nothing, and its silence keeps the successor waiting,
so a partition that cuts the successor (or some workers) off never starts a second
chain beside the main's. A worker that has not said it is waited for, and so is one
whose word does not parse. A one-node run has no worker to confirm the loss: its
spare never acts. A sentinel gives its word once an epoch, to one successor
(epochs.may_follow), so two successors can never both count every worker.

The next epoch's chain (`next_chain`) is the chain as the successor's newest copy has
it (the coordinator shares chain.json with every sentinel: chaincopy.py), with the lost
attempt ended (its culprit the main, `unreachable`), the chain's restart policy over
every end (restarts.decide) and the placement with the main lost (the successor at
rank 0): the restarts and quarantines go on where the main left them.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from mntui.sessions.node.rules.chainstates import LIVE, ChainStatus, status_of
from mntui.sessions.node.rules.placing import place
from mntui.sessions.node.rules.restarts import AttemptEnd, decide, ends_from
from mntui.sessions.node.rules.runid import RUN_ID
from mntui.sessions.node.rules.states import NodeState
from mntui.sessions.node.wire.epochs import number_of
from mntui.sessions.node.wire.watchcfg import WatchConfig

from . import swaps

NAMED = 3  # nodes a line names; the others are counted


class Call(str, Enum):
    WAIT = "wait"  # not yet (or never): `why` says for what
    ELECTED = "elected"  # every worker lost the main: this node takes its place
    OVER = "over"  # nothing to take over: the chain ended, or another node is named

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Word:
    """A worker's word that it lost the main: what its sentinel's hello carries."""

    run: str  # the attempt it followed when it lost the main
    at: float  # wall clock: when it lost it
    epoch: int  # the epoch whose main it lost
    stepped_at: float | None = None  # wall clock: its ranks' step last advanced


def word_of(d: object) -> Word | None:
    """A hello's `lost` (node data, checked): None when it is not a word."""
    if not isinstance(d, dict):
        return None
    run, at, n = d.get("run"), _when(d.get("at")), number_of(d.get("epoch"))
    if not isinstance(run, str) or not RUN_ID.fullmatch(run) or at is None or n is None:
        return None
    return Word(run, at, n, _when(d.get("stepped_at")))


def patience(cfg: WatchConfig) -> float:
    """How long a successor and the words given to it wait for every worker's word,
    from their own loss: a worker that still hears the main says nothing, and once
    that main's coordinator has torn the attempt down (the workers it lost are
    unreachable to it) and ended the chain, nothing will come."""
    return max(60.0, 6 * cfg.rules.unreachable_after)


def _when(v: object) -> float | None:
    """A wall-clock time as node data says it, or None."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1e11
    return float(v) if ok and isinstance(v, (int, float)) else None


@dataclass(frozen=True)
class Look:
    """What the successor knows, one look (the unit test's recorded inputs)."""

    me: str
    epoch: int  # the epoch whose main was lost
    chain: Mapping[str, Any] | None  # the newest copy of chain.json among its own and words'
    words: Mapping[str, Word | None]  # a worker heard from -> its word (None: malformed)
    lost_at: float | None  # this node's own loss of the main (None: it still hears it)


@dataclass(frozen=True)
class Verdict:
    call: Call
    why: str
    main: str | None = None  # the lost main


def attempt(chain: Mapping[str, Any], cfg: WatchConfig) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The chain's current attempt and its nodes by rank (the main first)."""
    items = chain.get("attempts")
    last = items[-1] if isinstance(items, list) and items and isinstance(items[-1], dict) else {}
    return last, swaps.layout_of(last, cfg) or cfg.nodes


def candidate(chain: Mapping[str, Any], cfg: WatchConfig) -> str | None:
    """The spare that takes the main's place if it is lost: the one placing.place puts
    at rank 0 were every spare up. None: no spare can (none fits, or none's address is
    known: an older launch)."""
    if not cfg.spare_addrs:
        return None
    _, layout = attempt(chain, cfg)
    out = swaps.out_of(dict(chain))
    main = layout[0]
    for s in cfg.spares:
        if s not in layout and s not in out and cfg.nproc(s) == cfg.nproc(main):
            return s
    return None


def judge(look: Look, cfg: WatchConfig) -> Verdict:
    """Whether `look.me` takes the main's place now."""
    chain = look.chain
    if chain is None:
        return Verdict(Call.WAIT, "no copy of the chain here yet")
    status = status_of(chain.get("status"))
    if status not in LIVE and chain.get("handover") is not True:
        why = str(chain.get("why") or status or "?")[:300]
        return Verdict(Call.OVER, f"the chain ended on the main: {why}")
    if chain.get("chain") != cfg.run or number_of(chain.get("epoch", 0)) != look.epoch:
        return Verdict(Call.OVER, "the copy of the chain is of another chain or epoch")
    last, layout = attempt(chain, cfg)
    main = layout[0]
    named = candidate(chain, cfg)
    if named != look.me:
        return Verdict(Call.OVER, f"the chain names {named or 'no spare'} to succeed {main}", main)
    if look.lost_at is None:
        return Verdict(Call.WAIT, f"this node still hears {main}", main)
    gone = "handed the chain over" if chain.get("handover") is True else "lost"
    workers = layout[1:]
    if not workers:
        return Verdict(Call.WAIT, f"{main} {gone}; a one-node run has no worker to confirm it",
                       main)  # fmt: skip
    started = _when(last.get("started_at")) or 0.0
    said, bad, waiting = [], [], []
    for w in workers:
        word = look.words.get(w)
        if w not in look.words:
            waiting.append(w)
        elif word is None:
            bad.append(w)
        elif word.epoch == look.epoch and (word.run == last.get("run") or word.at >= started):
            said.append(w)
        else:  # a word of an earlier attempt, or of another epoch: not of this loss
            waiting.append(w)
    if bad:
        return Verdict(Call.WAIT, f"{main} {gone}; the word of {_names(bad)} is malformed: "
                       "not taken", main)  # fmt: skip
    if waiting:
        return Verdict(Call.WAIT, f"{main} {gone}; waiting for {_names(waiting)} to lose it too "
                       "(a worker that still hears the main keeps it)", main)  # fmt: skip
    return Verdict(Call.ELECTED, f"{main} {gone}, and {_names(said)} lost it too", main)


def _names(nodes: list[str]) -> str:
    more = f" and {len(nodes) - NAMED} more" if len(nodes) > NAMED else ""
    return ", ".join(nodes[:NAMED]) + more


def newest(copies: Collection[Mapping[str, Any]], run: str) -> Mapping[str, Any] | None:
    """The newest copy of the chain `run` among `copies` (its `rev`: the coordinator counts
    its writes): a successor whose own copy missed the last write takes a worker's."""
    best: Mapping[str, Any] | None = None
    for c in copies:
        rev = number_of(c.get("rev", 0))
        if c.get("chain") != run or rev is None:
            continue
        if best is None or rev > (number_of(best.get("rev", 0)) or 0):
            best = c
    return best


def next_chain(
    look: Look, cfg: WatchConfig, ready: Collection[str], now: float
) -> tuple[dict[str, Any], bool]:
    """chain.json of the next epoch, led by `look.me` (ELECTED): the lost attempt ended
    (unless it had ended before the loss: a backoff), the policy's decision over the
    chain's every end, and the placement with the main lost; whether the chain goes on."""
    assert look.chain is not None
    data: dict[str, Any] = json.loads(json.dumps(look.chain))  # a copy of its own
    last, layout = attempt(data, cfg)
    main = layout[0]
    words = {n: w for n, w in look.words.items() if w is not None}
    heard = _names(sorted(words)) or look.me
    after = cfg.rules.unreachable_after
    why = f"the main {main} was lost: {heard} heard nothing from its coordinator for {after:g} s"
    handed = data.pop("handover", None) is True  # a main given up (placing.py), not lost
    if handed:
        why = f"the main {main} handed the chain to {look.me}: {str(data.get('why'))[:200]}"
        for key in ("main_here", "why", "ended_at"):  # the chain goes on
            data.pop(key, None)
    if not isinstance(last.get("end"), dict):
        started = _when(last.get("started_at"))
        stepped = [w.stepped_at for w in words.values() if w.stepped_at is not None]
        progressed = max(stepped) - started if stepped and started is not None else 0.0
        at = min([w.at for w in words.values()] or [look.lost_at or now])
        end = AttemptEnd(int(last.get("attempt") or 0), str(last.get("run")),
                         NodeState.UNREACHABLE, main, (), max(0.0, progressed), why)  # fmt: skip
        seen = {"node": main, "state": str(NodeState.UNREACHABLE), "why": why}
        last.update(end=end.plain(), ended_at=at, kind="teardown", seen=seen)
    ends = [a["end"] for a in data["attempts"] if isinstance(a, dict) and "end" in a]
    history = list(ends_from(ends))
    old = data.get(swaps.LOST)
    lost = {n for n in old if isinstance(n, str)} if isinstance(old, list) else set()
    if not handed:  # a main handed over may come back later, as a spare swapped out does
        lost.add(main)
    said = {n: w.at for n, w in sorted(words.items())}
    succession = {"epoch": look.epoch + 1, "from": main, "to": look.me, "at": now, "why": why,
                  "words": said, "handed": handed}  # fmt: skip
    data.update(epoch=look.epoch + 1, main=look.me, rev=(number_of(data.get("rev", 0)) or 0) + 1)
    if lost:
        data[swaps.LOST] = sorted(lost)
    data["successions"] = [*_list(data.get("successions")), succession]
    d = decide(cfg.restart, history) if cfg.restart is not None else None
    nprocs = {n: cfg.nproc(n) or 1 for n in cfg.members}
    p = place(layout, history, swaps.out_of(data), cfg.spares, {*ready, look.me}, nprocs,
              here=True, lost=lost)  # fmt: skip
    stop = None
    if d is None or not d.restart:
        stop = d.why if d is not None else "restart is off"
    elif p.stop is not None:
        stop = f"no restart: {p.stop}"
    elif p.layout[0] != look.me:  # the rule's own candidate is this node: never, but said
        stop = f"no restart: the placement puts {p.layout[0]} at rank 0, not {look.me}"
    if stop is not None:
        gave_up = d is not None and d.gave_up
        last.update(restart=stop, delay=None)
        end_as = ChainStatus.GAVE_UP if gave_up else ChainStatus.ENDED
        data.update(status=end_as.value, why=f"{why}; {stop}", ended_at=now)
        return data, False
    assert d is not None
    last.update(restart=d.why, delay=d.delay, next_nodes=list(p.layout), swapped=list(p.said))
    data["status"] = ChainStatus.BACKOFF.value
    return data, True


def _list(v: object) -> list[Any]:
    return list(v) if isinstance(v, list) else []
