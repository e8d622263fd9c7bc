"""Nodes kept out of launches until a time: `mntui quarantine g375 --for 24h --why ...`.

One file per node under the state dir's quarantine/, written atomically and readable by
the user alone, so two shells quarantining at once never leave half a file, and a file
this version cannot read is skipped (and counted), never a traceback and never a node
wrongly let in or kept out forever. A quarantine ends by itself at `until`: an expired
one is no quarantine, and the next write or listing removes its file (mntui made it).
A launch asks `route_around`: a quarantined node is refused in one line, or replaced by
a spare that is not quarantined itself.
"""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from urllib.parse import quote, unquote

from mntui.sessions.config import JobConfig
from mntui.sessions.errors import LaunchError, private_dir, state_dir
from mntui.sessions.jsonshape import load, number, text
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


def refusal(q: Quarantine, more: int = 0) -> str:
    also = f" (and {more} more quarantined node(s))" if more else ""
    return (
        f"{q.node} is quarantined {q.describe()}{also}; nothing was started: "
        f"`mntui quarantine --release {q.node}` to use it, or list a spare"
    )


def route_around(cfg: JobConfig, now: float | None = None) -> tuple[JobConfig, list[str]]:
    """`cfg` with each quarantined node replaced by a spare that is not quarantined (the
    spare takes its rank; a replaced main hands the master over), and what was done;
    LaunchError, one line, when no spare is left for one."""
    held = active_quarantines(now)
    out = [n for n in cfg.nodes if n.name in held]
    if not out:
        return cfg, []
    used = {n.name for n in cfg.nodes}
    free = [s for s in cfg.spares if s.name not in held and s.name not in used]
    said = []
    for i, node in enumerate(out):
        if not free:
            raise LaunchError(refusal(held[node.name], len(out) - i - 1))
        spare = free.pop(0)
        nodes = tuple(replace(spare, rank=n.rank) if n.name == node.name else n for n in cfg.nodes)
        main = spare.name if cfg.main == node.name else cfg.main
        master = None if cfg.main == node.name else cfg.master_addr
        cfg = replace(cfg, nodes=nodes, main=main, master_addr=master)
        said.append(f"{node.name} is quarantined ({held[node.name].why}): spare {spare.name} "
                    f"takes its place")  # fmt: skip
    return cfg, said
