"""The coordinator of a spare that succeeds a lost main: it counts the workers' words,
then leads the next epoch, from the chain's newest copy.

Why in the coordinator: what follows the election is a coordinator's work (the
restart policy, the placement, the next attempt's start through the sentinels, the
judge), done where the new main runs (its readiness is read there, as any restart's).
The spare's sentinel starts it once it lost the main itself (lostmain.py), with
`heir.json` saying which epoch it is to lead; it listens on the watch port at the
spare's address, where every sentinel that lost the main connects with its word
(`lost` in its hello) and its copy of the chain. Until the rule says so
(succession.judge: every worker of the attempt, after the attempt started) it decides
nothing and starts nothing; then it writes the next epoch's `coord/chain.json` (the
lost attempt ended, the policy's decision, the placement: succession.next_chain) and
its own `epoch.json`, tells every sentinel connected (`epoch`), and runs the chain from
that file as a coordinator started again would (chain.py, resume.py): a backoff, then
the next attempt with this spare at rank 0. Past `succession.patience` without every
word it leaves, and so do the sentinels that gave it theirs.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from mntui.sessions.node.board.coordstate import Board
from mntui.sessions.node.chain import succession
from mntui.sessions.node.chain.succession import Call, Look, Word
from mntui.sessions.node.files.plainfile import read_plain
from mntui.sessions.node.sentinel.lostmain import HEIR
from mntui.sessions.node.wire import epochs
from mntui.sessions.node.wire.chaincopy import fit, load
from mntui.sessions.node.wire.epochs import Epoch
from mntui.sessions.node.wire.frames import Channel
from mntui.sessions.node.wire.watchcfg import WatchConfig, joined

TICK = 0.1  # seconds between two counts of the words


@dataclass(frozen=True)
class Heir:
    """What the spare's sentinel started this coordinator to take over (heir.json)."""

    epoch: int  # the epoch it is to lead (the lost main's + 1)
    lost: str  # the main it succeeds
    lost_at: float  # wall clock: when its sentinel lost that main
    host: str  # where it listens: this spare's address


class Electing(Protocol):
    """What the count needs of the coordinator (coordinator.py)."""

    cfg: WatchConfig
    dir: str
    board: Board
    done: threading.Event
    heir: Heir | None
    copies: dict[str, dict[str, Any]]  # each voter's copy of the chain, as it sent it


def pending(run_dir: str, cfg: WatchConfig) -> tuple[WatchConfig, Heir | None]:
    """This node's coordinator config, and what it is to take over when it is a
    successor not elected yet: `heir.json` names the epoch after the one this node is
    in, the node a spare that has an address. Else `cfg` as it is, and None."""
    raw = read_plain(os.path.join(run_dir, HEIR), 4096)
    try:
        d = json.loads(raw) if raw is not None else None
    except ValueError:
        d = None
    if not isinstance(d, dict) or d.get("epoch") != cfg.epoch + 1:
        return cfg, None
    host, lost, at = cfg.addr(cfg.node), d.get("from"), d.get("lost_at")
    if host is None or not isinstance(lost, str) or lost not in cfg.members:
        return cfg, None
    if not isinstance(at, (int, float)) or isinstance(at, bool):
        return cfg, None
    heir = Heir(cfg.epoch + 1, lost, float(at), host)
    return joined(cfg, Epoch(heir.epoch, cfg.node, host)), heir


def admit(c: Electing, node: str, hello: dict[str, Any]) -> str | None:
    """Whether a sentinel that connected is one to keep: None when it is, else why not
    (refused as stale-epoch). A coordinator of a later epoch than this one's own hears
    it here: it stands down (`superseded`)."""
    own, theirs = c.cfg.epoch, epochs.number_of(hello.get("epoch", 0))
    lost = hello.get("lost")
    if theirs is None:
        return "no epoch"
    if theirs > own:
        return f"{node} follows epoch {theirs}: this coordinator leads {own}"
    if theirs == own and lost is not None:
        return f"{node} lost this coordinator (epoch {own}): its word went to a successor"
    if theirs < own and lost is None:
        return f"{node} follows epoch {theirs} and has not lost that main"
    return None


def later(c: Electing, hello: dict[str, Any]) -> bool:
    """The hello is of a later epoch than this coordinator's: another leads the chain."""
    theirs = epochs.number_of(hello.get("epoch", 0))
    return theirs is not None and theirs > c.cfg.epoch


def greet(c: Electing, ch: Channel, hello: dict[str, Any]) -> None:
    """A sentinel of the lost epoch that connects after the election joins at once, before
    it is a peer the chain may ask anything of."""
    if c.heir is None and epochs.number_of(hello.get("epoch", 0)) != c.cfg.epoch:
        ch.send("epoch", **epoch_of(c.cfg).plain())


def heard(c: Electing, node: str, msg: dict[str, Any]) -> bool:
    """A voter's copy of the chain (its `chain` frame): kept for the count; True when
    the frame was one."""
    if msg["k"] != "chain":
        return False
    data = fit(msg.get("data"), c.cfg.run)
    if data is not None and c.heir is not None:
        c.copies[node] = data
    return True


def epoch_of(cfg: WatchConfig) -> Epoch:
    return Epoch(cfg.epoch, cfg.main, cfg.coord_host, time.time())


def elect(c: Electing) -> str | None:
    """Until every worker's word is in: then the next epoch is this coordinator's (its
    chain.json written, the sentinels told) and None comes back; else why not (the
    coordinator then leaves)."""
    heir = c.heir
    assert heir is not None
    cfg, lost_epoch = c.cfg, heir.epoch - 1
    own = load(c.dir, cfg.run)
    most = succession.patience(cfg)
    said = None
    c.board.journal("succession-wait", None, epoch=heir.epoch, lost=heir.lost)
    while True:
        c.board.pulse()
        look = _look(c, own, lost_epoch)
        v = succession.judge(look, cfg)
        if v.call is Call.ELECTED:
            break
        if v.call is Call.OVER:
            c.board.journal("succession-over", None, why=v.why)
            return f"no succession: {v.why}"
        if v.why != said:
            said = v.why
            print(f"coordinator: not leading yet: {v.why}", flush=True)
            c.board.journal("succession-wait", None, why=v.why)
        if time.time() - heir.lost_at > most:
            return f"no succession within {most:.0f} s of the loss: {v.why}"
        c.done.wait(TICK)
    _lead(c, look, v.why)
    return None


def _look(c: Electing, own: dict[str, Any] | None, lost_epoch: int) -> Look:
    words: dict[str, Word | None] = {}
    for node, peer in c.board.live_peers().items():
        said = peer.ch.peer.get("lost")
        if said is not None:
            words[node] = succession.word_of(said)
    copies = [x for x in (own, *c.copies.values()) if x is not None]
    chain = succession.newest(copies, c.cfg.run)
    me = c.cfg.node
    lost_at = c.heir.lost_at if c.heir is not None else None
    return Look(me, lost_epoch, chain, {n: w for n, w in words.items() if n != me}, lost_at)


def _lead(c: Electing, look: Look, why: str) -> None:
    """The next epoch's chain written before anyone is told (a coordinator started again
    goes on from it: resume.py), then this node's epoch, then every sentinel's."""
    ready = set(c.board.live_peers())
    data, goes_on = succession.next_chain(look, c.cfg, ready, time.time())
    c.board.write("chain.json", data)
    ep = epoch_of(c.cfg)
    epochs.write(c.dir, ep)
    c.heir = None
    c.board.journal("succession", None, epoch=ep.number, lost=data["successions"][-1]["from"],
                    why=why, goes_on=goes_on)  # fmt: skip
    print(f"coordinator: leads epoch {ep.number}: {why}", flush=True)
    c.board.send_all("epoch", **ep.plain())
