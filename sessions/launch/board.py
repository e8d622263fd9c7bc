"""What the cluster's coordinator wrote on the main node, read over one connection.

Why a module of its own: `status` of a run the cluster watches reads this board and
nothing else of the watch, and a cold status (tui/cli/quickstatus.py) must not load
what starts the watch (the sentinel bundle, the judge's settings, the SSH stack) to
read it. The launch's confirmation, the kill through the coordinator and both status
paths read the board with this one script and parse it with one parser (boardparse.py).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from mntui.sessions.node.wire import nodewire
from mntui.sessions.node.wire.gpuwire import BOARD_FILE, BOARD_MAX
from mntui.sessions.procs import TAG_VAR, run_dir_word

from .boardparse import JOURNAL, SMALL, SMALL_MAX, STALE, BoardView, parse_board

__all__ = ["STALE", "SWAP_NOTE", "BoardView", "board_dir", "board_script", "coord_alive",
           "coord_run", "parse_board", "read_board"]  # fmt: skip

if TYPE_CHECKING:
    from mntui.sessions.runs import RunRecord
    from mntui.sessions.ssh import Node

# a record launched onto a new main by the stand-by this machine ran before issue 37:
# its records are still read right
SWAP_NOTE = "main-swap"


def board_dir(record: RunRecord) -> str:
    """The coordinator's run dir on the main: the chain's first attempt's, which every
    restart on the cluster keeps (the main does not move); a new main put in from here
    before (SWAP_NOTE) has a new coordinator, in its own attempt's dir."""
    parts = record.main.run_dir.split("/")  # .mntui/runs/<job>/<run>/<node>
    parts[-2] = coord_run(record)
    return "/".join(parts)


def coord_run(record: RunRecord) -> str:
    """The run whose dir the record's coordinator and sentinels write in."""
    note = next((h for h in record.history if h.get("what") == SWAP_NOTE), None)
    run = note.get("run") if note is not None else None
    return run if isinstance(run, str) and "/" not in run else (record.chain or record.run_id)


def coord_alive(run_dir: str) -> str:
    """Shell: succeeds while the run's coordinator lives. Its pid file is not enough: a
    zombie (an init that does not reap) or a reused pid answers `kill -0`; so the process
    must be no zombie and carry the coordinator's own tag. The pid and the state are read
    by the shell itself (`read`, and the state is the field after the last ") " of
    /proc/PID/stat): a status waits for this on the main, and each program costs a fork."""
    parts = run_dir.split("/")  # .mntui/runs/<job>/<run>/<node>
    entry = shlex.quote(f"{TAG_VAR}={'/'.join(parts[-3:])}/coord")
    return f"""mntui_coord_alive() {{
  _p='' _l=''
  read -r _p 2>/dev/null <"$d/coord.pid"
  case "$_p" in '' | *[!0-9]*) return 1 ;; esac
  [ "${{#_p}}" -le 20 ] || return 1
  read -r _l 2>/dev/null <"/proc/$_p/stat"
  _s=${{_l##*) }}
  _s=${{_s%% *}}
  case "$_s" in '' | Z | X) return 1 ;; esac
  tr '\\0' '\\n' <"/proc/$_p/environ" 2>/dev/null | grep -qxF -- {entry}
}}"""


def board_script(run_dir: str, gpus: bool = False) -> str:
    """With `gpus` (a `status`), the nodes' GPU readings and snapshots too (the launch's
    confirmation and a kill wait on the rest only, and these files grow with the nodes).

    Why `head -v` over every file at once, raw: the coordinator writes each file as one
    line of ASCII JSON, so one program reads them all behind `==> name <==` headers, where
    a file each through `head | base64` was a dozen programs, ~30 ms of a loaded main's
    time on every status. The reader (files_of) takes a file only as one line under its
    own header, seen once: anything else is malformed, never another file's content."""
    d = run_dir_word(run_dir)
    small = " ".join(f"{name}.json" for name in SMALL)
    big = f"{BOARD_FILE} {nodewire.BOARD_FILE}"
    read_big = f"\n  head -v -c {max(BOARD_MAX, nodewire.BOARD_MAX)} -- {big} 2>/dev/null; echo"
    return f"""d={d}
{coord_alive(run_dir)}
echo "NOW $(date +%s)"
if mntui_coord_alive; then echo ALIVE yes; else echo ALIVE no; fi
if cd "$d/coord" 2>/dev/null; then
  head -v -c {SMALL_MAX} -- {small} 2>/dev/null; echo{read_big if gpus else ""}
  tail -v -c {SMALL_MAX} -- {JOURNAL} 2>/dev/null || :
fi
"""


def read_board(
    node: Node, main_run_dir: str, timeout: float = 10.0, gpus: bool = False
) -> BoardView:
    import time
    from dataclasses import replace

    t0 = time.monotonic()
    res = node.run(board_script(main_run_dir, gpus), timeout=timeout)
    return replace(parse_board(res.stdout), rtt=time.monotonic() - t0)
