"""Nodes kept out of launches until a time: `mntui quarantine g375 --for 24h --why ...`.

One file per node under the state dir's quarantine/, written atomically and readable by
the user alone, so two shells quarantining at once never leave half a file, and a file
this version cannot read is skipped (and counted), never a traceback and never a node
wrongly let in or kept out forever. A quarantine ends by itself at `until`: an expired
one is no quarantine, and the next write or listing removes its file (mntui made it).
A launch asks `route_around`: a quarantined node is replaced by a spare by the rule the
coordinator places with (node/rules/placing.py, through `place_here`), or refused in one line.
"""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import socket
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from urllib.parse import quote, unquote

from mntui.sessions.config import JobConfig
from mntui.sessions.errors import LaunchError, private_dir, state_dir
from mntui.sessions.jsonshape import load, number, text
from mntui.sessions.node.rules.placing import Placement, place
from mntui.sessions.node.rules.restarts import AttemptEnd
from mntui.sessions.runs import write_atomic


@dataclass(frozen=True)
class Quarantine:
    node: str
    who: str  # user@host; "policy" for restart.quarantine_after
    when: float
    until: float
    why: str

    def expired(self, now: float) -> bool:
        return self.until <= now

    def describe(self) -> str:
        return f"until {stamp(self.until)} ({self.why}; by {self.who} at {stamp(self.when)})"


@dataclass(frozen=True)
class Listing:
    active: tuple[Quarantine, ...]
    expired: tuple[Quarantine, ...]
    unreadable: int  # files this version could not read: skipped


def stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def who_am_i() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname().split('.')[0]}"


def folder() -> Path:
    return state_dir() / "quarantine"


def _path(node: str) -> Path:
    # A node name is config text: quoted into one file name, never a path of its own.
    return folder() / (quote(node, safe="-_@").replace(".", "%2E") + ".json")


def _read(path: Path) -> Quarantine | None:
    """The file's quarantine, its times finite numbers (a "NaN" or "inf" `until` would
    keep a node out forever), or None."""
    try:
        data = load(path)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    node, when, until = text(data.get("node")), number(data.get("when")), number(data.get("until"))
    if node is None or when is None or until is None or unquote(path.stem) != node:
        return None
    return Quarantine(node, text(data.get("who")) or "?", when, until, text(data.get("why")) or "")


@contextmanager
def _writing() -> Iterator[None]:
    """Writers take the folder's lock: a prune must never remove a quarantine that
    another shell has just renewed between its look and its unlink."""
    fd = os.open(private_dir(folder()) / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def quarantine_node(
    node: str, seconds: float, why: str, who: str | None = None, now: float | None = None
) -> Quarantine:
    """Keep `node` out of launches for `seconds`; a second call replaces the first."""
    now = time.time() if now is None else now
    q = Quarantine(node, who or who_am_i(), now, now + seconds, why)
    with _writing():
        write_atomic(_path(node), json.dumps(asdict(q), indent=2))
    prune_quarantines(now)
    return q


def release_node(node: str) -> Quarantine | None:
    """End `node`'s quarantine now; the one that was ended, or None if there was none."""
    path = _path(node)
    with _writing():
        q = _read(path)
        try:
            path.unlink()
        except FileNotFoundError:
            return None
    return q


def quarantine_listing(now: float | None = None) -> Listing:
    now = time.time() if now is None else now
    active, expired, bad = [], [], 0
    for path in sorted(folder().glob("*.json")) if folder().is_dir() else []:
        q = _read(path)
        if q is None:
            bad += 1
        elif q.expired(now):
            expired.append(q)
        else:
            active.append(q)
    return Listing(tuple(active), tuple(expired), bad)


def active_quarantines(now: float | None = None) -> dict[str, Quarantine]:
    return {q.node: q for q in quarantine_listing(now).active}


def prune_quarantines(now: float | None = None) -> tuple[Quarantine, ...]:
    """Remove the files of quarantines that have ended; the ones removed."""
    if not folder().is_dir():
        return ()
    with _writing():
        gone = quarantine_listing(now).expired
        for q in gone:
            try:
                _path(q.node).unlink()
            except FileNotFoundError:
                pass
    return gone


def refusal(stop: str, q: Quarantine, more: int = 0) -> str:
    """placing's line (`g2 is quarantined and no spare can take rank 1 (...)`), with the
    quarantine's own facts and the way out: still one line."""
    also = f" (and {more} more quarantined node(s))" if more else ""
    return (
        f"{stop}; nothing was started: its quarantine runs {q.describe()}{also}; "
        f"`mntui quarantine --release {q.node}` to use it, or list a spare that fits"
    )


def route_around(cfg: JobConfig, now: float | None = None) -> tuple[JobConfig, list[str]]:
    """`cfg` with each quarantined node replaced by a spare, by placing.place as the
    coordinator places (a spare not quarantined, not in use, that runs as many
    processes: another count would change the world size), and its lines;
    LaunchError, one line, when none fits one."""
    held = active_quarantines(now)
    if not any(n.name in held for n in cfg.nodes):
        return cfg, []
    new, p = place_here(cfg, (), held)
    if p.stop is None:
        return new, list(p.said)
    # place visits the ranks in order and, with no history, swaps only quarantined
    # nodes, one line each, until the first it cannot: that one is refused.
    ranked = [n.name for n in sorted(cfg.nodes, key=lambda n: n.rank) if n.name in held]
    stuck = ranked[len(p.said)]
    raise LaunchError(refusal(p.stop, held[stuck], len(ranked) - len(p.said) - 1))


def place_here(
    cfg: JobConfig, history: Sequence[AttemptEnd], held: Collection[str]
) -> tuple[JobConfig, Placement]:
    """placing.place for a job this machine launches or watches: `cfg`'s nodes by rank,
    its spares in the config's order, `held` (this machine's quarantines) used no more.
    Every spare counts as ready (no sentinel waits on one here: a spare that does not
    answer fails its launch, an attempt ended like any other), and the main may move, as
    only this machine can move it. The next attempt's config, with what was swapped."""
    layout = [n.name for n in sorted(cfg.nodes, key=lambda n: n.rank)]
    spares = [s.name for s in cfg.spares]
    nprocs = {n.name: cfg.nproc(n) for n in (*cfg.nodes, *cfg.spares)}
    p = place(layout, history, held, spares, spares, nprocs, here=True)
    return laid_out(cfg, p.layout), p


def laid_out(cfg: JobConfig, layout: Sequence[str]) -> JobConfig:
    """`cfg` on `layout` (node names by rank, the main first, from its nodes and spares):
    a spare takes the rank it is given, and a main that moved takes the master with it."""
    known = {n.name: n for n in (*cfg.spares, *cfg.nodes)}
    nodes = tuple(replace(known[name], rank=r) for r, name in enumerate(layout))
    master = cfg.master_addr if layout[0] == cfg.main else None
    return replace(cfg, nodes=nodes, main=layout[0], master_addr=master)
