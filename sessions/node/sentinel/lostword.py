"""A worker's word that it lost the main: `lost.json` in its run dir, written by its
sentinel once the coordinator was silent for `unreachable_after`, whatever its ranks'
state.

Why always, ranks or none: the successor on the cluster (succession.py) replaces a
lost main only once every worker of the attempt said it lost it. A worker whose
ranks had already ended (finished, or crashed and torn down) before the main went
silent has nothing to kill, but it is still a witness the successor waits for: a
sentinel that left without a word would make it wait forever. Its word then says so
(`nothing_left`), and there is no kill report to keep apart.
"""

from __future__ import annotations

import json
import os
from typing import Any

from mntui.sessions.node.files.plainfile import read_plain
from mntui.sessions.node.wire.watchcfg import write_json

LOST = "lost.json"  # the word, small: the evidence, and what a respawn goes on from
LOST_KILL = "lost-kill.json"  # the kill's report, apart (~300 B a process)
WHY_MAX = 500


def lost_why(coord: str, silent: float, killed: bool) -> str:
    """`coord` is `host:port`; `killed`: this node still ran ranks of the job."""
    did = "this node's ranks were torn down" if killed else "nothing of the job was left to kill"
    return f"no word from the coordinator {coord} for {silent:.0f} s: {did}"


def say_lost(
    run_dir: str,
    lost_at: float,
    torn_down_at: float,
    why: str,
    kill: dict[str, Any] | None,
    epoch: int = 0,
    run: str | None = None,
) -> None:
    """The kill's report first (when there was a kill), then the word: a reader of the
    word finds the report beside it. `epoch` and `run`: the epoch whose main was lost
    and the attempt this node followed (a sentinel started again gives its word to the
    successor again from them: lostmain.resume)."""
    if kill is not None:
        write_json(os.path.join(run_dir, LOST_KILL), {"lost_at": lost_at, "kill": kill})
    word: dict[str, Any] = {"lost_at": lost_at, "torn_down_at": torn_down_at, "why": why[:WHY_MAX],
                            "epoch": epoch, "run": run}  # fmt: skip
    if kill is None:
        word["nothing_left"] = True
    write_json(os.path.join(run_dir, LOST), word)


def read_lost(run_dir: str) -> dict[str, Any] | None:
    """This node's word, as written (None: none, or not ours)."""
    raw = read_plain(os.path.join(run_dir, LOST), 1 << 16)
    try:
        data = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
