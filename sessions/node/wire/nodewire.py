"""A node's snapshot as it travels: from its sentinel to the coordinator, and on the board
(coord/nodes.json) that the manager reads for `status`.

Why: a run the cluster watches is not polled, yet its `status --json` must give every
key a polled run's gives (poll/snapshot.py snapshot_dict). The sentinel sends what a
poll would read (nodesnap.py builds it), in snapshot_dict's own names, so the manager
decodes each entry into the same NodeSnapshot. It is node data: the coordinator and the
manager check it with the one `check` (every field typed and bounded, no unknown or
missing key, no control character in a command line) or count it malformed.

The board is bounded: an entry is cut to fit ENTRY_MAX bytes (`fit`: command lines
shortened, then emptied, then processes beyond what fits dropped), and each node gets
BOARD_MAX over the nodes when that is less: 128 nodes fit whole (128 x 60 KiB), more
nodes have their command lines cut first.
"""

from __future__ import annotations

import json
from typing import Any

from mntui.sessions.node.rules.termsafe import (
    one_line,  # what the sentinel sends is already its output
)

from .facts import MAX_PID, Malformed, _flag, _int  # the facts' own checks

MAX_PROCS = 256  # processes in one snapshot (a torch node: ranks, workers, shells)
CMD_MAX = 300  # bytes of a command line read (as the poller's mntui_b64)
MAX_PORTS = 256
ENTRY_MAX = 60 * 1024  # bytes of one node's entry as JSON
BOARD_FILE = "nodes.json"  # in coord/, beside status.json and gpus.json
BOARD_MAX = 8 << 20  # bytes of it the manager reads (launch/board.py)
SHORT_CMD = 64  # a command line's characters kept when an entry must shrink
PROC_KEYS = ("pid", "ppid", "state", "cpu_percent", "rss_mib", "cmdline")
FACT_KEYS = ("session", "pane_dead", "pane_pid", "exit_code", "log_size", "output_age")
HOST_KEYS = ("ports", "load", "ncpu", "mem_total_mib", "mem_available_mib", "node_time")
KEYS = frozenset(("procs", *FACT_KEYS, *HOST_KEYS, "malformed"))


def _num(v: object, lo: float, hi: float, none: bool = True) -> float | None:
    if v is None and none:
        return None
    if type(v) not in (int, float) or not lo <= v <= hi:  # type: ignore[operator]
        raise Malformed(f"not a number in [{lo:g}, {hi:g}]")  # NaN is in no range
    return float(v)  # type: ignore[arg-type]


def _proc(p: object) -> dict[str, Any]:
    if type(p) is not dict or p.keys() != set(PROC_KEYS):
        raise Malformed("a process is an object of " + ", ".join(PROC_KEYS))
    state, cmd = p["state"], p["cmdline"]
    if type(state) is not str or len(state) != 1 or not state.isalpha():
        raise Malformed("a process state is one letter")
    if type(cmd) is not str or len(cmd) > CMD_MAX or one_line(cmd) != cmd:
        raise Malformed("a command line is bounded text without controls")
    return {
        "pid": _int(p["pid"], 1, MAX_PID, none=False),
        "ppid": _int(p["ppid"], 0, MAX_PID, none=False),
        "state": state,
        "cpu_percent": _num(p["cpu_percent"], 0, 1e6),
        "rss_mib": _num(p["rss_mib"], 0, 1e9, none=False),
        "cmdline": cmd,
    }


def check(d: object, when: str) -> dict[str, Any]:
    """The snapshot, every field checked (`when`: "age" from a sentinel, "at" on the
    board: the number beside the fields), or Malformed."""
    if type(d) is not dict or d.keys() != KEYS | {when}:
        raise Malformed("a node snapshot is an object of exactly our keys")
    procs, ports, load = d["procs"], d["ports"], d["load"]
    if type(procs) is not list or len(procs) > MAX_PROCS:
        raise Malformed("procs is a bounded list")
    if type(ports) is not list or len(ports) > MAX_PORTS:
        raise Malformed("ports is a bounded list")
    if load is not None and (type(load) is not list or len(load) != 3):
        raise Malformed("load is three numbers or null")
    return {
        "procs": [_proc(p) for p in procs],
        "ports": [_int(p, 1, 65535, none=False) for p in ports],
        "load": None if load is None else [_num(x, 0, 1e7, none=False) for x in load],
        "ncpu": _int(d["ncpu"], 1, 1 << 24),
        "mem_total_mib": _num(d["mem_total_mib"], 0, 1e12),
        "mem_available_mib": _num(d["mem_available_mib"], 0, 1e12),
        "node_time": _num(d["node_time"], 0, 1e11),
        "session": _flag(d["session"]),
        "pane_dead": _flag(d["pane_dead"]),
        "pane_pid": _int(d["pane_pid"], 1, MAX_PID),
        "exit_code": _int(d["exit_code"], -(1 << 31), 1 << 31),
        "log_size": _int(d["log_size"], 0, 1 << 62),
        "output_age": _num(d["output_age"], 0, 1e12),
        "malformed": _int(d["malformed"], 0, 1 << 62, none=False),
        when: _num(d[when], 0, 1e11, none=False),
    }


def fit(entry: dict[str, Any], limit: int) -> tuple[dict[str, Any], str]:
    """`entry` and its JSON within `limit` bytes: command lines shortened, then emptied,
    then the processes beyond what fits dropped (the numbers of the node stay)."""
    text = json.dumps(entry)
    for short in (SHORT_CMD, 0):
        if len(text) <= limit:
            return entry, text
        procs = [{**p, "cmdline": p["cmdline"][:short]} for p in entry["procs"]]
        entry = {**entry, "procs": procs}
        text = json.dumps(entry)
    while len(text) > limit and entry["procs"]:
        keep = len(entry["procs"]) * limit // len(text) - 1  # each pass drops some
        entry = {**entry, "procs": entry["procs"][: max(0, keep)]}
        text = json.dumps(entry)
    return entry, text


def board_entry(d: object, now: float) -> str:
    """A sentinel's snapshot as the board keeps it, as JSON: checked (or Malformed), its
    age made a time on the main's wall clock (`at`, `now` being that clock's), fitted."""
    entry = check(d, "age")
    entry["at"] = round(now - entry.pop("age"), 3)
    return fit(entry, ENTRY_MAX)[1]


def board_text(at: float, texts: dict[str, str]) -> str:
    """coord/nodes.json from each node's entry as JSON (made once, when it came):
    within BOARD_MAX, each node's share of it refitted only when the whole is over."""
    total = sum(len(t) + len(n) + 8 for n, t in texts.items())
    if total > BOARD_MAX - 256:
        share = (BOARD_MAX - 256) // max(1, len(texts)) - 300
        texts = {
            n: t if len(t) <= share else fit(json.loads(t), share)[1] for n, t in texts.items()
        }
    nodes = ", ".join(f"{json.dumps(n)}: {t}" for n, t in texts.items())
    return f'{{"at": {round(at, 3)}, "nodes": {{{nodes}}}}}'


def from_board(data: object) -> tuple[dict[str, dict[str, Any]], int]:
    """The entries of coord/nodes.json by node, checked, and how many were malformed."""
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, dict):
        return {}, int(data is not None)
    out, bad = {}, 0
    for node, entry in nodes.items():
        try:
            out[str(node)] = check(entry, "at")
        except Malformed:
            bad += 1
    return out, bad
