"""What the cluster's coordinator wrote on the main node, read over one connection.

Why a module of its own: `status` of a run the cluster watches reads this board and
nothing else of the watch, and a cold status (tui/cli/quickstatus.py) must not load
what starts the watch (the sentinel bundle, the judge's settings, the SSH stack) to
read it. The launch's confirmation, the kill through the coordinator and both status
paths read the board with this one script and parse it with this one parser.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mntui.sessions.node import nodewire
from mntui.sessions.node.gpuwire import BOARD_FILE, BOARD_MAX, GpuText, from_board
from mntui.sessions.procs import TAG_VAR, run_dir_word

if TYPE_CHECKING:
    from mntui.sessions.runs import RunRecord
    from mntui.sessions.ssh import Node

STALE = 10.0  # seconds: a coordinator that wrote no status for this long is not watching


@dataclass(frozen=True)
class BoardView:
    """What the coordinator last wrote: its status, and its decision if it made one."""

    status: dict[str, Any] | None
    decision: dict[str, Any] | None
    alive: bool  # the coordinator's pid is a live process on the main
    journal: tuple[dict[str, Any], ...] = ()  # its last lines (up to 256 KiB), oldest first
    chain: dict[str, Any] | None = None  # coord/chain.json: the attempts it ran
    now: float | None = None  # the main's clock when it answered
    gpus: Mapping[str, GpuText] = field(default_factory=dict)  # coord/gpus.json, if asked
    gpus_malformed: int = 0  # its entries (or itself) not a reading of ours
    straggler: dict[str, Any] | None = None  # coord/straggler.json (node/slowness.py)
    notify: dict[str, Any] | None = None  # coord/notify.json: its notices (node/notifysend.py)
    nodes: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # coord/nodes.json
    nodes_malformed: int = 0  # its entries (or itself) not a snapshot of ours
    rtt: float | None = None  # seconds the read took, connecting included

    @property
    def fresh(self) -> bool:
        """The coordinator wrote its status within STALE seconds of the main's clock: a
        pid that answers `kill -0` may be stopped (SIGSTOP) or another process's."""
        at = (self.status or {}).get("at")
        if not isinstance(at, (int, float)) or self.now is None:
            return False
        return self.now - at <= STALE

    def connected(self) -> int:
        nodes = (self.status or {}).get("nodes") or {}
        return sum(1 for v in nodes.values() if isinstance(v, dict) and v.get("connected"))


SWAP_NOTE = "main-swap"  # a record this machine launched onto a new main (recover/mainswap.py)


def board_dir(record: RunRecord) -> str:
    """The coordinator's run dir on the main: the chain's first attempt's, which every
    restart on the cluster keeps (the main does not move); a new main this machine put in
    (SWAP_NOTE) has a new coordinator, in its own attempt's dir."""
    parts = record.nodes[0].run_dir.split("/")  # .mntui/runs/<job>/<run>/<node>
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
    confirmation and a kill wait on the rest only, and these files grow with the nodes)."""
    d = run_dir_word(run_dir)
    sides = ((BOARD_FILE, BOARD_MAX, "gpus"), (nodewire.BOARD_FILE, nodewire.BOARD_MAX, "nodes"))
    read_gpus = "\n".join(
        f"printf 'FILE {word} '; head -c {most} \"$d/coord/{name}\" 2>/dev/null | base64 -w0; echo"
        for name, most, word in sides
    )
    return f"""d={d}
{coord_alive(run_dir)}
for f in status decision chain straggler notify; do  # no programs for a file not there
  printf 'FILE %s ' "$f"
  [ ! -s "$d/coord/$f.json" ] || head -c 262144 "$d/coord/$f.json" 2>/dev/null | base64 -w0
  echo
done
printf 'FILE journal '; tail -c 262144 "$d/coord/journal.jsonl" 2>/dev/null | base64 -w0; echo
{read_gpus if gpus else ""}
echo "NOW $(date +%s)"
if mntui_coord_alive; then echo ALIVE yes; else echo ALIVE no; fi
"""


def parse_board(text: str) -> BoardView:
    import base64

    files: dict[str, dict[str, Any] | None] = dict.fromkeys(
        ("status", "decision", "chain", "straggler", "notify")
    )
    alive = False
    now: float | None = None
    journal: tuple[dict[str, Any], ...] = ()
    gpus: tuple[dict[str, GpuText], int] = ({}, 0)
    nodes: tuple[dict[str, dict[str, Any]], int] = ({}, 0)
    for line in text.splitlines():
        words = line.split(" ")
        if len(words) == 3 and words[0:2] == ["FILE", "journal"] and words[2]:
            journal = parse_journal(words[2])
        elif len(words) == 3 and words[0:2] == ["FILE", "gpus"] and words[2]:
            data = _json(words[2])
            gpus = from_board(data) if data is not None else ({}, 1)  # cut, or not JSON
        elif len(words) == 3 and words[0:2] == ["FILE", "nodes"] and words[2]:
            data = _json(words[2])
            nodes = nodewire.from_board(data) if data is not None else ({}, 1)
        elif len(words) == 3 and words[0] == "FILE" and words[1] in files and words[2]:
            try:
                data = json.loads(base64.b64decode(words[2], validate=True))
            except (ValueError, TypeError, RecursionError):
                data = None
            files[words[1]] = data if isinstance(data, dict) else None
        elif line == "ALIVE yes":
            alive = True
        elif len(words) == 2 and words[0] == "NOW" and words[1].isdigit() and len(words[1]) < 12:
            now = float(words[1])
    return BoardView(
        files["status"], files["decision"], alive, journal, files["chain"], now,
        gpus=gpus[0], gpus_malformed=gpus[1], straggler=files["straggler"], notify=files["notify"],
        nodes=nodes[0], nodes_malformed=nodes[1],
    )  # fmt: skip


def _json(b64: str) -> object:
    """The JSON in a line's base64, or None."""
    import base64

    try:
        return json.loads(base64.b64decode(b64, validate=True))
    except (ValueError, TypeError, RecursionError):
        return None


def parse_journal(b64: str) -> tuple[dict[str, Any], ...]:
    """The journal's lines that parse as ours; the first, cut by `tail -c`, does not."""
    import base64

    try:
        raw = base64.b64decode(b64, validate=True).decode("utf-8", "replace")
    except ValueError:
        return ()
    out = []
    for line in raw.splitlines():
        try:
            item = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(item, dict) and isinstance(item.get("t"), (int, float)):
            out.append(item)
    return tuple(out)


def read_board(
    node: Node, main_run_dir: str, timeout: float = 10.0, gpus: bool = False
) -> BoardView:
    import time
    from dataclasses import replace

    t0 = time.monotonic()
    res = node.run(board_script(main_run_dir, gpus), timeout=timeout)
    return replace(parse_board(res.stdout), rtt=time.monotonic() - t0)
