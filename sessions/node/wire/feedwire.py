"""The live stream's wire: a node's log bytes from its sentinel to the coordinator (`log`
frames), the coordinator's word to ship them (`follow`), the coordinator's chunks to a
follower (`logs`), and the follower's lines to the manager (`MNTUIFEED1 <base64 JSON>`).

Why one module: every hop checks the same shapes with the same bounds, and the log is
the job's output, so it is data on every hop: base64 inside JSON, never a marker nor a
line of the protocol. A frame of another shape raises Malformed (the caller counts it);
no field is believed for more than its type and bound. Shipping is bounded at its
source: RATE bytes a second per node at most, CHUNK_MAX a frame, and a follow is a lease
(LEASE seconds, renewed every RENEW while someone follows) so a coordinator that died
without saying "off" leaves no sentinel shipping for nobody. A `log` frame says where
its bytes lie in the node's log (`at`): a shipping that starts again (a new follow, a
sentinel reconnected or respawned) starts near the end, over bytes the coordinator may
hold already or past some it never got, and only their place tells which.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from mntui.sessions.node.rules.runid import RUN_ID

RATE = 64 * 1024  # bytes a second a sentinel ships at most
CHUNK_MAX = 16 * 1024  # bytes of log in one `log` frame
B64_MAX = 4 * ((CHUNK_MAX + 2) // 3)
LOGS_MAX = 256 * 1024  # bytes of one node's log in one `logs` frame to a follower
# bytes of one `logs` frame, all nodes together (their logs and names): its log is base64
# in JSON, and the follower's line base64 of that again (16/9 of it), so a frame stays
# far under frames.MAX_FRAME and its line under LINE_MAX (both 16 MiB) at any node count
FRAME_DATA = 4 << 20
NODE_COST = 64  # bytes a node's chunk costs a frame besides its name and its log
SKIP_MAX = 1 << 62
LEASE = 15.0  # seconds a `follow` lasts unless said again
RENEW = 5.0  # seconds between two `follow` words while someone follows
RUN_MAX = 200  # characters of a run id
NODE_MAX = 200
PREFIX = b"MNTUIFEED1 "
LINE_MAX = 16 << 20  # bytes of one line to the manager
_FRAME = frozenset({"v", "k", "s"})


class Malformed(ValueError):
    """A frame or line of no shape of ours."""


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: object, most: int) -> bytes:
    """`text` as base64 of at most `most` bytes, strictly, or Malformed."""
    if type(text) is not str or len(text) > 4 * ((most + 2) // 3):
        raise Malformed("data is bounded base64 text")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise Malformed("data is not base64") from None


def count(v: object, most: int = SKIP_MAX) -> int:
    if type(v) is not int or not 0 <= v <= most:
        raise Malformed(f"not a count in [0, {most}]")
    return v


def name(v: object, most: int) -> str:
    if type(v) is not str or not v or len(v) > most or not v.isprintable():
        raise Malformed("not a bounded printable name")
    return v


def _keys(msg: dict[str, Any], keys: frozenset[str]) -> None:
    if msg.keys() != _FRAME | keys:
        raise Malformed(f"a {msg.get('k')!r} frame has exactly {sorted(keys)}")


def log_fields(run: str, data: bytes, at: int, fresh: bool = False) -> dict[str, Any]:
    """A sentinel's `log` frame: `data` the log's bytes from offset `at`; `fresh`: the
    shipper chose that start itself (near the end: a new follow, channel or process),
    else it goes on from its last frame's end (past it: bytes it passed over, behind
    RATE; before it: the log shrank, another file)."""
    return {"run": run, "data": b64(data), "at": at, "fresh": fresh}


LOG_KEYS = frozenset({"run", "data", "at", "fresh"})


def check_log(msg: dict[str, Any]) -> tuple[str, bytes, int, bool]:
    """(run, data, at, fresh) of a sentinel's `log` frame, or Malformed."""
    _keys(msg, LOG_KEYS)
    if type(msg["fresh"]) is not bool:
        raise Malformed("fresh is a boolean")
    data = unb64(msg["data"], CHUNK_MAX)
    run = name(msg["run"], RUN_MAX)
    if not RUN_ID.match(run):  # a run id, not any word: it keys the backlogs kept aside
        raise Malformed("run is a run id")
    return run, data, count(msg["at"]), msg["fresh"]


def check_follow(msg: dict[str, Any]) -> float:
    """The lease of a `follow` frame in seconds (0: stop now), or Malformed."""
    _keys(msg, frozenset({"lease"}))
    lease = msg["lease"]
    if type(lease) not in (int, float) or not 0 <= lease <= 600:
        raise Malformed("lease is seconds in [0, 600]")
    return float(lease)


def logs_fields(chunks: dict[str, tuple[bytes, int, bool]], epoch: int) -> dict[str, Any]:
    """The coordinator's `logs` frame to a follower: per node (data, skipped, first);
    `first`: the node's backlog, from which its pane starts over."""
    nodes = {n: {"data": b64(d), "skip": s, "first": f} for n, (d, s, f) in chunks.items()}
    return {"nodes": nodes, "epoch": epoch}


def check_logs(msg: dict[str, Any]) -> tuple[dict[str, tuple[bytes, int, bool]], int]:
    """A `logs` frame's chunks by node and its epoch (the attempt's), or Malformed."""
    _keys(msg, frozenset({"nodes", "epoch"}))
    return check_chunks(msg["nodes"]), count(msg["epoch"])


def check_chunks(nodes: object) -> dict[str, tuple[bytes, int, bool]]:
    """The chunks of a `logs` frame (or of the follower's `logs` line) by node."""
    if type(nodes) is not dict or len(nodes) > 4096:
        raise Malformed("nodes is a bounded object")
    out = {}
    for node, c in nodes.items():
        if type(c) is not dict or c.keys() != {"data", "skip", "first"}:
            raise Malformed("a chunk is data, skip and first")
        if type(c["first"]) is not bool:
            raise Malformed("first is a boolean")
        out[name(node, NODE_MAX)] = (unb64(c["data"], LOGS_MAX), count(c["skip"]), c["first"])
    return out


def line(obj: dict[str, Any]) -> bytes:
    """One line to the manager: ASCII JSON in base64, so nothing in it is a newline."""
    text = json.dumps(obj, allow_nan=False, separators=(",", ":")).encode("ascii")
    return PREFIX + base64.b64encode(text) + b"\n"


def read_line(raw: bytes) -> dict[str, Any] | None:
    """A line from the follower as an object with a string "k"; None: not a line of ours
    (a shell's greeting before the follower started); Malformed: ours, but broken."""
    if not raw.startswith(PREFIX):
        return None
    if len(raw) > LINE_MAX or not raw.endswith(b"\n"):
        raise Malformed("a line is whole and bounded")
    try:
        text = base64.b64decode(raw[len(PREFIX) : -1], validate=True)
        obj = json.loads(text.decode("ascii"), parse_constant=_no_constant)
    except (binascii.Error, ValueError, RecursionError):
        raise Malformed("a line is base64 of JSON") from None
    if type(obj) is not dict or type(obj.get("k")) is not str:
        raise Malformed('a line is an object with a "k"')
    return obj


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")
