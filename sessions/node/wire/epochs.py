"""The chain's epoch on this node: which coordinator its watchers follow, in
`epoch.json` in the node's run dir.

Why a number: a main that is lost is replaced by a successor among the chain's spares
(succession.py), and a main that was only frozen, or cut off, may come back. Two
coordinators of one chain must never both start attempts, so each has an epoch (the
launch's main 0, each successor one more), every sentinel keeps the highest it has
joined, and a sentinel never follows a coordinator of a lower one (`may_follow`): the
old main's coordinator, woken, finds nobody to start an attempt on. The file also says
where that epoch's coordinator listens, so a watcher started again (respawn.py) and
this machine (watch/mainmoved.py reads it over SSH from any node of the chain) find
the board of the main that leads now. Absent: epoch 0, as the watch file says.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from typing import Any

from mntui.sessions.node.files.plainfile import plain, read_plain

EPOCH = "epoch.json"
MOST = 1 << 20  # epochs: a bound on what a file read back may say
ADDR = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:_-]{0,252}\Z")  # a host or address: a bare shell word


@dataclass(frozen=True)
class Epoch:
    number: int  # 0: the launch's main leads
    main: str  # the node whose coordinator leads it (the attempts' rank 0)
    host: str  # where that coordinator listens, and the ranks' master_addr
    since: float = 0.0  # wall clock: when this node joined it

    def plain(self) -> dict[str, Any]:
        return {"epoch": self.number, "main": self.main, "host": self.host, "since": self.since}


def number_of(v: object) -> int | None:
    """An epoch as a peer or a file says it: an int in range, else None."""
    return v if type(v) is int and 0 <= v <= MOST else None


def parse(d: object) -> Epoch | None:
    """An epoch from a frame or a file (node data: checked, never trusted): None when it
    is not one. The caller checks that `main` is a member of its chain."""
    if not isinstance(d, dict):
        return None
    n, main, host, since = number_of(d.get("epoch")), d.get("main"), d.get("host"), d.get("since")
    if n is None or not isinstance(main, str) or not 0 < len(main) <= 128:
        return None
    if not isinstance(host, str) or not ADDR.match(host):
        return None
    ok = isinstance(since, (int, float)) and not isinstance(since, bool) and 0 <= since < 1e11
    return Epoch(n, main, host, float(since) if ok and since is not None else 0.0)


def read(run_dir: str) -> Epoch | None:
    raw = read_plain(os.path.join(run_dir, EPOCH), 4096)
    try:
        return parse(json.loads(raw)) if raw is not None else None
    except ValueError:
        return None


def write(run_dir: str, epoch: Epoch) -> None:
    """Atomically (tmp + rename), as the coordinator's files: a respawn or a reader over
    SSH never sees half of it."""
    path = os.path.join(run_dir, EPOCH)
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "w", encoding="utf-8", opener=plain) as f:
        json.dump(epoch.plain(), f, sort_keys=True)
    os.replace(tmp, path)


def may_follow(own: int, theirs: int, lost: bool) -> bool:
    """Whether a sentinel at epoch `own` may follow a coordinator that says `theirs`:
    never a lower one; and once it lost its main (`lost`), only a later one, the
    successor it gave its word to, never the coordinator it lost, should that one come
    back (one word per epoch: two coordinators can never both count it)."""
    return theirs > own if lost else theirs >= own
