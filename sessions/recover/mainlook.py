"""One look at a run the cluster watches, from this machine: the main's board, and when
the main is silent, the workers' `lost.json`; the inputs of mainloss.judge_main.

Why one fresh `ssh` a node a look (ssh/oneshot.py) and never the cluster's persistent
connections: the main this looks for may be a stopped host, whose connection would
hang a reused channel without a word; a fresh one is bounded by its timeout, handshake
included. The workers are asked only while the main is silent, so a healthy run costs
one connection a look, as a cold `status` does.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from mntui.sessions.launch.board import BoardView, board_script, coord_run, parse_board
from mntui.sessions.procs import node_lines, run_dir_word
from mntui.sessions.results import NodeError
from mntui.sessions.runs import NodeRecord, RunRecord
from mntui.sessions.ssh.oneshot import OneShotNode

LOST_MAX = 65536  # bytes of a lost.json read (a few hundred: the kill's report is apart)
MALFORMED = "malformed"  # parse_lost's word for a lost.json there that did not parse
T = TypeVar("T")


def node_dir(record: RunRecord, node: NodeRecord) -> str:
    """`node`'s sentinel dir: its run dir under the run its coordinator writes in."""
    parts = node.run_dir.split("/")  # .mntui/runs/<job>/<run>/<node>
    parts[-2] = coord_run(record)
    return "/".join(parts)


def ask(ssh: Sequence[str], node: NodeRecord, script: str, timeout: float) -> str | None:
    """The script's output, or None: the node did not answer (or its shell failed)."""
    try:
        one = OneShotNode(node.node, node.host, ssh)
    except OSError:
        return None
    try:
        res = one.run(script, timeout=timeout)
    except NodeError:
        return None
    finally:
        one.close()
    return res.stdout if res.ok else None


def read_main(record: RunRecord, ssh: Sequence[str], timeout: float) -> BoardView | None:
    """The coordinator's board on the main, or None when the main did not answer."""
    main = record.main
    out = ask(ssh, main, board_script(node_dir(record, main)), timeout)
    return parse_board(out) if out is not None else None


def lost_script(d: str) -> str:
    return (
        f"d={run_dir_word(d)}\n"
        f'if [ -f "$d/lost.json" ]; then printf "LOST "; '
        f'head -c {LOST_MAX} "$d/lost.json" | base64 -w0; echo; else echo NONE; fi\n'
    )


def parse_lost(out: str) -> tuple[bool, dict[str, Any] | str | None]:
    """(answered, lost.json): strictly one line, `NONE` or `LOST <base64 of a JSON map>`;
    a node's answer is data: anything else is no answer. A lost.json there that is not
    a JSON map (cut, garbled) is MALFORMED, never "none there": the worker wrote one."""
    lines = node_lines(out)
    if lines == ["NONE"]:
        return True, None
    if len(lines) != 1 or not lines[0].startswith("LOST "):
        return False, None
    try:
        data = json.loads(base64.b64decode(lines[0][5:], validate=True))
    except (ValueError, TypeError, RecursionError):
        return True, MALFORMED
    return True, data if isinstance(data, dict) else MALFORMED


def read_lost(
    record: RunRecord, workers: Sequence[NodeRecord], ssh: Sequence[str], timeout: float
) -> tuple[dict[str, dict[str, Any] | None], list[str]]:
    """Each worker that answered -> its lost.json (None: none there), and the workers
    whose lost.json is malformed (answered, so present in the map as None); one that
    did not answer is absent."""

    def one(n: NodeRecord) -> tuple[bool, dict[str, Any] | str | None]:
        out = ask(ssh, n, lost_script(node_dir(record, n)), timeout)
        return parse_lost(out) if out is not None else (False, None)

    got = dict(zip((n.node for n in workers), fan_out(one, workers), strict=True))
    lost = {w: (d if isinstance(d, dict) else None) for w, (ok, d) in got.items() if ok}
    return lost, [w for w, (ok, d) in got.items() if ok and d == MALFORMED]


def answering(nodes: Sequence[NodeRecord], ssh: Sequence[str], timeout: float) -> set[str]:
    """The nodes that answer now (a spare the next attempt may run on)."""
    got = fan_out(lambda n: ask(ssh, n, "echo up\n", timeout), nodes)
    answered = zip(nodes, got, strict=True)  # a whole line, not "up" within a login's noise
    return {n.node for n, out in answered if out is not None and "up" in node_lines(out)}


def fan_out(fn: Callable[[NodeRecord], T], nodes: Sequence[NodeRecord]) -> list[T]:
    if not nodes:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(nodes))) as pool:
        return list(pool.map(fn, nodes))
