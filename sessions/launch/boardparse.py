"""The coordinator's board as the manager reads it: its shape (BoardView) and the reader
of the board script's answer (launch/board.py writes the script).

Why apart from the script: reading is where node data meets this machine, and it is
strict on its own terms (each file one line under its own header, in order; ASCII
JSON; the journal decoded only as far back as a status needs), testable without a node.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mntui.sessions.node.wire import nodewire
from mntui.sessions.node.wire.gpuwire import BOARD_FILE, GpuText, from_board
from mntui.sessions.procs import node_lines

SMALL = ("status", "decision", "chain", "straggler", "notify")  # coord/<name>.json
SMALL_MAX = 262144  # bytes read of each of them, and of the journal's end
JOURNAL = "journal.jsonl"
JOURNAL_SLACK = 60.0  # seconds a journal line may be out of time order
# the files in the order the script reads them (files_of checks it)
ORDER = (*(f"{n}.json" for n in SMALL), BOARD_FILE, nodewire.BOARD_FILE, JOURNAL)


STALE = 10.0  # seconds: a coordinator that wrote no status for this long is not watching


@dataclass(frozen=True)
class BoardView:
    """What the coordinator last wrote: its status, and its decision if it made one."""

    status: dict[str, Any] | None
    decision: dict[str, Any] | None
    alive: bool  # the coordinator's pid is a live process on the main
    lines: tuple[str, ...] = ()  # the journal's last lines (up to 256 KiB), oldest first, raw
    chain: dict[str, Any] | None = None  # coord/chain.json: the attempts it ran
    now: float | None = None  # the main's clock when it answered
    gpus: Mapping[str, GpuText] = field(default_factory=dict)  # coord/gpus.json, if asked
    gpus_malformed: int = 0  # its entries (or itself) not a reading of ours
    straggler: dict[str, Any] | None = None  # coord/straggler.json (node/coord/slowness.py)
    notify: dict[str, Any] | None = (
        None  # coord/notify.json: its notices (node/notice/notifysend.py)
    )
    nodes: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # coord/nodes.json
    nodes_malformed: int = 0  # its entries (or itself) not a snapshot of ours
    rtt: float | None = None  # seconds the read took, connecting included

    @property
    def journal(self) -> tuple[dict[str, Any], ...]:
        """Every line of the journal's end that parses as ours."""
        return parse_journal(self.lines)

    def journal_since(self, t: float) -> tuple[dict[str, Any], ...]:
        """Its lines after `t`, decoded from the end back: a status every few seconds
        decodes a few lines, not the 256 KiB (at 128 nodes a `steps` line is ~3 KB, and
        decoding them all was half of reading the board). The file is in time order but
        for small steps (the coordinator stamps a line before it takes the file's lock,
        and the main's sentinel appends lines of its own): JOURNAL_SLACK covers them. A
        clock stepped back by more than that on the main hides what came before the
        step from this look (the journal is what happened while away: said, not acted on)."""
        out: list[dict[str, Any]] = []
        for line in reversed(self.lines):
            item = _journal_item(line)
            if item is None:
                continue
            if item["t"] < t - JOURNAL_SLACK:
                break
            if item["t"] > t:
                out.append(item)
        return tuple(reversed(out))

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
        small["status"], small["decision"], alive, tuple(journal), small["chain"], now,
        gpus=gpus[0], gpus_malformed=gpus[1], straggler=small["straggler"],
        notify=small["notify"], nodes=nodes[0], nodes_malformed=nodes[1],
    )  # fmt: skip


def _is_now(line: str) -> bool:
    w = line.split(" ")
    return len(w) == 2 and w[0] == "NOW" and w[1].isascii() and w[1].isdigit() and len(w[1]) < 12


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


def parse_journal(lines: Sequence[str]) -> tuple[dict[str, Any], ...]:
    """The journal's lines that parse as ours; the first, cut by `tail -c`, does not."""
    return tuple(item for item in map(_journal_item, lines) if item is not None)


def _journal_item(line: str) -> dict[str, Any] | None:
    if not line.isascii():  # a byte that was no UTF-8 (U+FFFD): not the coordinator's
        return None
    try:
        item = json.loads(line)
    except (ValueError, RecursionError):
        return None
    t = item.get("t") if isinstance(item, dict) else None
    return item if isinstance(t, (int, float)) and math.isfinite(t) else None
