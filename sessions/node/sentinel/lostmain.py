"""A sentinel after it lost its main: its word given to the successor, and the next
epoch joined when that one leads.

Why the sentinel stays: before issue 37 a worker's sentinel that lost the coordinator
tore its ranks down, wrote `lost.json` and left, and a stand-by on this machine read
those words over SSH and started the next attempt with a spare as the main. Now the
chain goes on on the cluster: the sentinel still tears its ranks down and writes
`lost.json` (lostword.py), then, when the chain could go on (restarts, a copy of the
chain, a spare that fits: succession.candidate), connects to that spare's address
with its word in its hello (the epoch it lost, the attempt it followed, when) and its
copy of the chain, and waits. The spare itself, once it lost the main too, starts the
coordinator that counts the words (successor.py). When every worker's word is in,
that coordinator leads the next epoch and says so (`epoch`): each sentinel writes
`epoch.json`, follows it as its coordinator, and starts the next attempt when told, as
after any restart. A sentinel gives its word once an epoch and never follows the
coordinator it lost again (epochs.may_follow), so a main that comes back finds its
workers gone; one that waited `succession.patience` in vain leaves, as before.
"""

from __future__ import annotations

import os
import time
from typing import Any, Protocol

from mntui.sessions.node.chain import succession
from mntui.sessions.node.chain.succession import Word
from mntui.sessions.node.proc import respawn
from mntui.sessions.node.proc.attempt import Attempt
from mntui.sessions.node.rules.chainstates import LIVE, status_of
from mntui.sessions.node.wire import epochs
from mntui.sessions.node.wire.chaincopy import fit, keep
from mntui.sessions.node.wire.epochs import Epoch
from mntui.sessions.node.wire.watchcfg import WatchConfig, joined, write_json

from .lostword import read_lost, say_lost

HEIR = "heir.json"  # on the successor: what its coordinator is started to take over
TEND = 2.0  # seconds between two tries to start the successor's coordinator


class Lost(Protocol):
    """What this needs of the sentinel (sentinel.py)."""

    cfg: WatchConfig
    dir: str
    att: Attempt
    copy: dict[str, Any] | None  # the chain as the coordinator last shared it
    lost: Word | None  # its word, once it lost the main (None: it follows one)
    heir: str | None  # the spare its word goes to
    heard: float
    stepped_at: float | None
    tended: float  # monotonic: the successor's coordinator is not started again before
    keepers: list[respawn.Keeper]
    bundle: list[str] | None

    def drop_link(self) -> None: ...

    def coordinator_started(self) -> None: ...


def stay(s: Lost, lost_at: float) -> bool:
    """After the loss's kill: whether the sentinel stays for a successor (its word set,
    and on the successor itself its coordinator started); False: it leaves as before."""
    heir = heir_of(s.cfg, s.copy)
    if heir is None:
        return False
    s.lost = Word(s.att.run, lost_at, s.cfg.epoch, s.stepped_at)
    s.heir = heir
    print(f"sentinel: the main {s.cfg.main} is lost: my word goes to {heir}, its successor",
          flush=True)  # fmt: skip
    if heir == s.cfg.node:
        start_successor(s)
    s.drop_link()  # the link goes to the successor from now on
    return True


def heir_of(cfg: WatchConfig, copy: dict[str, Any] | None) -> str | None:
    """The spare that succeeds the main, when the chain could go on: restarts on, a copy
    of the chain that is live and of this epoch, and a spare that fits."""
    if cfg.restart is None or cfg.restart.max <= 0 or copy is None:
        return None
    live = status_of(copy.get("status")) in LIVE or copy.get("handover") is True
    if not live or copy.get("epoch", 0) != cfg.epoch:
        return None
    return succession.candidate(copy, cfg)


def handed(s: Lost, msg: dict[str, Any]) -> bool:
    """The coordinator ended its chain for a spare to go on with it (its main must be
    replaced: chain.py): the chain as it ended taken as this node's copy, and its word
    given as after a loss (the attempt was torn down already). False when this sentinel
    leaves instead: the main's own, or one with no successor to give it to."""
    data = fit(msg.get("data"), s.cfg.run)
    if data is not None:
        s.copy = data
        keep(s.dir, data)
    if s.cfg.is_main or s.lost is not None:
        return False
    at = time.time()
    why = f"the coordinator on {s.cfg.main} handed the chain over: {str(msg.get('why'))[:300]}"
    say_lost(s.dir, at, at, why, None, s.cfg.epoch, s.att.run)
    return stay(s, at)


def tend(s: Lost, now: float) -> None:
    """On the successor, until it leads: its coordinator started again should the first
    start have failed (the lost main's port not free yet on this address)."""
    if s.lost is None or s.heir != s.cfg.node or now < s.tended:
        return
    s.tended = now + TEND
    keeper = coordinator_keeper(s)
    if keeper.gave_up is None and not keeper.busy.locked():
        said = keeper.start()
        if "did not start" in said:
            print(f"sentinel: {said}", flush=True)


def start_successor(s: Lost) -> None:
    """This spare succeeds the main: its coordinator is started, told by `heir.json`
    what it is to take over, and kept up by this sentinel from now on (respawn.py)."""
    assert s.lost is not None
    host = s.cfg.addr(s.cfg.node)
    info = {"epoch": s.cfg.epoch + 1, "from": s.cfg.main, "lost_at": s.lost.at, "host": host}
    write_json(os.path.join(s.dir, HEIR), info)
    keeper = coordinator_keeper(s)
    started = keeper.start()
    print(f"sentinel: this node succeeds {s.cfg.main}: {started}", flush=True)


def coordinator_keeper(s: Lost) -> respawn.Keeper:
    for k in s.keepers:
        if k.role == "coord":
            return k
    keeper = respawn.Keeper(s.dir, s.cfg.node, s.cfg.tag, "coord", s.bundle, s.coordinator_started)
    s.keepers.append(keeper)
    return keeper


def target(s: Lost) -> tuple[str, dict[str, Any]]:
    """Where the link connects, and what its hello adds: the epoch's coordinator; after
    the loss, the successor, with the word."""
    hello: dict[str, Any] = {"epoch": s.cfg.epoch}
    if s.lost is None or s.heir is None:
        return s.cfg.coord_host, hello
    w = s.lost
    hello["lost"] = {"run": w.run, "at": w.at, "epoch": w.epoch, "stepped_at": w.stepped_at}
    host = s.cfg.addr(s.heir) or s.cfg.coord_host
    return host, hello


def fenced(s: Lost, theirs: object) -> str | None:
    """Why the coordinator that answered (its hello's epoch) is not one to follow; None
    when it is."""
    n = epochs.number_of(theirs if theirs is not None else 0)
    if n is not None and epochs.may_follow(s.cfg.epoch, n, s.lost is not None):
        return None
    return f"a coordinator of epoch {theirs!r}; this node is at {s.cfg.epoch}" + (
        ", and lost that one" if s.lost is not None else ""
    )


def join(s: Lost, data: dict[str, Any]) -> str | None:
    """The successor leads epoch `data` now: written, followed; why not, else None."""
    ep = epochs.parse(data)
    if ep is None or ep.main not in s.cfg.members or ep.number <= s.cfg.epoch:
        return f"not an epoch to join: {str(data)[:120]}"
    ep = Epoch(ep.number, ep.main, ep.host, time.time())
    epochs.write(s.dir, ep)
    s.cfg = joined(s.cfg, ep)
    s.lost = s.heir = None
    s.heard = time.monotonic()
    if s.cfg.is_main:  # kept up by this sentinel, as on the launch's main
        coordinator_keeper(s)
    print(f"sentinel: joined epoch {ep.number}: the coordinator on {ep.main} ({ep.host})",
          flush=True)  # fmt: skip
    return None


def resume(s: Lost) -> str | None:
    """A sentinel started again after it lost the main: its word again (the loss is
    written in lost.json, of this epoch), without a second kill. What it says, or None."""
    word = read_lost(s.dir)
    if word is None or word.get("epoch", 0) != s.cfg.epoch or not isinstance(word.get("run"), str):
        return None
    at = word.get("lost_at")
    if not isinstance(at, (int, float)) or isinstance(at, bool):
        return None
    heir = heir_of(s.cfg, s.copy)
    if heir is None:
        return None
    s.lost, s.heir = Word(str(word["run"]), float(at), s.cfg.epoch, None), heir
    return f"the main was lost at {at:.0f}: my word goes to {heir} again"


def patient(s: Lost, now: float) -> str | None:
    """Why the sentinel leaves after waiting for a successor too long, or None."""
    if s.lost is None:
        return None
    waited = now - s.lost.at
    most = succession.patience(s.cfg)
    if waited < most:
        return None
    return f"no successor of {s.cfg.main} led the chain within {most:.0f} s of its loss"
