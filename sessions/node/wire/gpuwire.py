"""A node's GPU reading as it travels: the queries that make it, its shape from a sentinel
to the coordinator, and on the board (coord/gpus.json) that the manager reads.

Why a module apart from the reader (gpus.py): a cold `status` (tui/cli/quickstatus.py)
checks the board's readings and must not load what spawns nvidia-smi; and the queries
live here, once, for both the sentinel and the manager's poller (poll/gpu.py re-exports
them). Both the coordinator and the manager check a reading with the one `check`: typed
and bounded, or Malformed (counted by the caller, never trusted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "power.draw",
    "power.limit",
)
APP_FIELDS = ("pid", "gpu_uuid", "used_memory", "process_name")
GPU_ARGS = ("--query-gpu=" + ",".join(GPU_FIELDS), "--format=csv")
APP_ARGS = ("--query-compute-apps=" + ",".join(APP_FIELDS), "--format=csv")
GPU_QUERY = " ".join(("nvidia-smi", *GPU_ARGS))  # shell words: the poller's script runs them
APP_QUERY = " ".join(("nvidia-smi", *APP_ARGS))

LIMIT = 16 * 1024  # bytes of one answer kept; past it nvidia-smi is killed
TEXT_MAX = LIMIT + 256  # characters of one answer on the wire: LIMIT and our own line
MAX_PIDS = 4096  # as facts.MAX_PROCS
BOARD_FILE = "gpus.json"  # in coord/, beside status.json
BOARD_MAX = 8 << 20  # bytes of it the manager reads (launch/board.py): the coordinator's bound


class Malformed(ValueError):
    """A GPU reading of another shape than ours."""


@dataclass(frozen=True)
class GpuText:
    """A node's reading as the coordinator keeps it and the manager reads it back: `csv`
    None when the node has no nvidia-smi (its GPUs counted 0, gpucount.py), text when it
    has one, our own lines among it when a run failed (counted unknown, never 0)."""

    csv: str | None
    apps: str
    own: tuple[int, ...]  # the PIDs the node's sentinel follows: the job's processes
    read_at: float  # the main node's wall clock


def check(d: object, when: str) -> tuple[str | None, str, tuple[int, ...], float]:
    """(csv, apps, own, the number `when` names) of a reading (`when`: "age" from a
    sentinel, "read_at" on the board), or Malformed: every field typed and bounded."""
    if not isinstance(d, dict):
        raise Malformed("a reading is an object")
    csv, apps, own, t = d.get("csv"), d.get("apps"), d.get("own"), d.get(when)
    if csv is not None and (not isinstance(csv, str) or len(csv) > TEXT_MAX):
        raise Malformed("csv is bounded text or null")
    if not isinstance(apps, str) or len(apps) > TEXT_MAX:
        raise Malformed("apps is bounded text")
    if not isinstance(own, list) or len(own) > MAX_PIDS:
        raise Malformed("own is a bounded list")
    if not all(type(p) is int and 0 < p < 1 << 31 for p in own):
        raise Malformed("own holds PIDs")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < 1e11:
        raise Malformed(f"{when} is a number")
    return csv, apps, tuple(own), float(t)


def board_entry(t: GpuText) -> dict[str, Any]:
    return {"csv": t.csv, "apps": t.apps, "own": list(t.own), "read_at": round(t.read_at, 3)}


def within_board(board: dict[str, Any]) -> dict[str, Any]:
    """`board` as written, unless its JSON is over BOARD_MAX: then each node's reading
    that is over its share (BOARD_MAX over the nodes) is replaced by a line saying so,
    so the file stays whole and readable (a cut one is no JSON at all)."""
    nodes: dict[str, dict[str, Any]] = board["nodes"]
    if sum(_most(e) for e in nodes.values()) <= BOARD_MAX or len(json.dumps(board)) <= BOARD_MAX:
        return board
    share = BOARD_MAX // max(1, len(nodes)) - 256
    kept = {}
    for node, entry in nodes.items():
        size = len(json.dumps(entry))
        if size > share:
            why = f"mntui: this node's GPU reading ({size} bytes) is over its share of the board\n"
            entry = {**entry, "csv": why, "apps": "", "own": []}
        kept[node] = entry
    return {**board, "nodes": kept}


def _most(entry: dict[str, Any]) -> int:
    """The most bytes an entry's JSON can take (an escaped character is at most 12, a
    surrogate pair's `\\uXXXX\\uXXXX`; the keys and the node's name, 300): the common case
    needs no trial serialization."""
    texts = len(entry.get("csv") or "") + len(entry.get("apps") or "")
    return 12 * texts + 12 * len(entry.get("own") or ()) + 300


def from_board(data: object) -> tuple[dict[str, GpuText], int]:
    """The readings of coord/gpus.json by node, and how many entries were malformed."""
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, dict):
        return {}, int(data is not None)
    out, bad = {}, 0
    for node, entry in nodes.items():
        try:
            out[str(node)] = GpuText(*check(entry, "read_at"))
        except Malformed:
            bad += 1
    return out, bad
