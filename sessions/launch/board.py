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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mntui.sessions.node import nodewire
from mntui.sessions.node.gpuwire import BOARD_FILE, BOARD_MAX, GpuText, from_board
from mntui.sessions.procs import TAG_VAR, node_lines, run_dir_word

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


SMALL = ("status", "decision", "chain", "straggler", "notify")  # coord/<name>.json
SMALL_MAX = 262144  # bytes read of each of them, and of the journal's end
JOURNAL = "journal.jsonl"
# the files in the order the script reads them (files_of checks it)
ORDER = (*(f"{n}.json" for n in SMALL), BOARD_FILE, nodewire.BOARD_FILE, JOURNAL)


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


def files_of(text: str) -> tuple[dict[str, str | None], list[str], list[str]]:
    """(each file's one line, None when malformed; the journal's lines; the lines before
    any file) of a board's answer.

    The framing holds because the coordinator writes each file as one line of ASCII JSON
    (json.dumps escapes every byte a node ever sent: no node text can make a line, let
    alone a header). A file not written so is refused where it shows: a header out of the
    script's order, unknown or seen twice, or a second line under one, spoils that file
    and every one after it, the journal too. A same-user writer could still forge a file
    the board lacks; it could as well write the file itself."""
    files: dict[str, str | None] = {}
    bad: set[str] = set()
    journal: list[str] = []
    head: list[str] = []
    name: str | None = None
    spoiled = False
    for line in node_lines(text):
        if name == JOURNAL:
            if not spoiled:
                journal.append(line)  # its own lines to the end: parse_journal checks each
        elif line.startswith("==> ") and line.endswith(" <=="):
            said = line[4:-4]
            spoiled = spoiled or said not in ORDER or ORDER.index(said) <= _at(name)
            if spoiled:
                bad.update(n for n in (name, said) if n is not None)
            name = said
        elif not line:
            continue
        elif name is None:
            head.append(line)
        elif spoiled or name in files:
            spoiled = True  # a second line: not one of the coordinator's files
            bad.add(name)
        else:
            files[name] = line
    for n in bad:
        files[n] = None
    return files, journal, head


def _at(name: str | None) -> int:
    return ORDER.index(name) if name in ORDER else -1


def parse_board(text: str) -> BoardView:
    files, journal, head = files_of(text)
    data = {name: _json(files.get(f"{name}.json")) for name in SMALL}
    small = {k: v if isinstance(v, dict) else None for k, v in data.items()}
    alive = "ALIVE yes" in head
    now = next((float(w[4:]) for w in head if _is_now(w)), None)
    gpus = _side(files, BOARD_FILE, from_board)
    nodes = _side(files, nodewire.BOARD_FILE, nodewire.from_board)
    return BoardView(
        small["status"], small["decision"], alive, parse_journal(journal), small["chain"], now,
        gpus=gpus[0], gpus_malformed=gpus[1], straggler=small["straggler"],
        notify=small["notify"], nodes=nodes[0], nodes_malformed=nodes[1],
    )  # fmt: skip


def _is_now(line: str) -> bool:
    w = line.split(" ")
    return len(w) == 2 and w[0] == "NOW" and w[1].isdigit() and len(w[1]) < 12


def _side(files: dict[str, str | None], name: str, read: Callable[[Any], tuple[Any, int]]) -> Any:
    """A file read by its own checker (the nodes' snapshots, their GPU readings): ({}, 0)
    when absent, ({}, 1) when cut or not JSON."""
    if name not in files:
        return {}, 0
    data = _json(files[name])
    return read(data) if data is not None else ({}, 1)


def _json(line: str | None) -> object:
    """The JSON of a file's line, or None: the coordinator's files are ASCII (a byte
    that was no UTF-8 arrives as U+FFFD: not a file of ours)."""
    if not line or not line.isascii():
        return None
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def parse_journal(lines: list[str]) -> tuple[dict[str, Any], ...]:
    """The journal's lines that parse as ours; the first, cut by `tail -c`, does not."""
    out = []
    for line in lines:
        if not line.isascii():  # a byte that was no UTF-8 (U+FFFD): not the coordinator's
            continue
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
