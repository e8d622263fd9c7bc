"""Python stacks of a hung job's ranks, taken with py-spy (a live `mntui report`; the
sentinels run the same script before a teardown's kill: stackscript.py).

A hang killed without a trace comes back: the evidence (which rank waits in which
collective, which one is stopped) exists only while the processes do. So before a
teardown for a frozen, stalled or unreachable-peer job, every live rank of every
reachable node is dumped in parallel, within a time budget; a node without py-spy, or
where ptrace is not permitted, says so and the teardown goes on.

The script is launch/stackscript.py's (the cluster's sentinels run the same one, rendered
at launch, and save its output for `parse_capture` here). Everything the node prints is data:
markers carry a nonce, py-spy's output travels base64-encoded and is parsed strictly,
within bounds, its names and errors made terminal-safe (termsafe.py): the job's PATH
picks the `py-spy` that runs, and its function names reach the report's headline.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
from dataclasses import dataclass

from mntui.sessions.launch import stackscript
from mntui.sessions.node.rules import waits
from mntui.sessions.node.rules.waits import LIBRARY, Frame
from mntui.sessions.results import GroupResult
from mntui.sessions.ssh import Cluster, Node
from mntui.sessions.termsafe import one_line

from .frdump import Asked, parse_asked

# The frame, its parser and the library test are the sentinels' too (node/rules/waits.py):
# the report reads a stack as the cluster's straggler rule does.
_frames = waits.main_frames

__all__ = [
    "COLLECTIVES", "LIBRARY", "Frame", "NodeStacks", "RankStack", "capture", "capture_script",
    "parse_capture",
]  # fmt: skip

# The one capture script, the launch's (it renders it for the cluster's sentinels too).
capture_script = stackscript.capture_script

# Frames whose function names say "this rank is waiting for the others".
COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "_all_gather_base",
    "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all",
    "all_to_all_single", "broadcast", "broadcast_object_list", "barrier", "monitored_barrier",
    "reduce", "gather", "scatter", "send", "recv", "isend", "irecv", "wait", "synchronize",
    "batch_isend_irecv", "_wait_for_workers", "next_rendezvous",
})  # fmt: skip


@dataclass(frozen=True)
class RankStack:
    node: str
    pid: int
    rank: int
    state: str  # /proc state letter when dumped: R S D T t
    frames: tuple[Frame, ...]  # the main thread, innermost first; () when py-spy failed
    error: str | None = None

    @property
    def summary(self) -> str:
        """One phrase: "waiting in `all_reduce` (train.py:41)", "stopped (state T) in ..."."""
        stopped = self.state in ("T", "t")
        head = "stopped (state T)" if stopped else "running"
        if not self.frames:
            return f"{head}; no stack: {self.error or 'py-spy gave none'}"
        user = next((f for f in self.frames if not LIBRARY.search(f.file)), self.frames[0])
        waiting = next((f for f in self.frames if f.name in COLLECTIVES), None)
        if waiting is not None:
            what = f"waiting in `{waiting.name}` ({user.where})"
        else:
            what = f"in `{self.frames[0].name}` ({user.where})"
        return f"stopped (state T), {what}" if stopped else what


@dataclass(frozen=True)
class NodeStacks:
    node: str
    stacks: tuple[RankStack, ...]
    missing: str | None = None  # why no stack could be taken on this node at all
    malformed: int = 0
    asked: Asked | None = None  # Flight Recorder dumps asked for (None: no pipes set up)


_RANK = re.compile(r"RANK (\d{1,9}) (\d{1,6}) ([A-Za-z])\Z")
_STACK = re.compile(r"STACK (\d{1,9}) (\d{1,3}) ([A-Za-z0-9+/=]*) ([A-Za-z0-9+/=]*)\Z")


def parse_capture(node: str, out: str, nonce: str) -> NodeStacks:
    m = f"@{nonce}"
    ranks: dict[int, tuple[int, str]] = {}
    dumps: dict[int, tuple[int, str, str]] = {}
    bad, nospy, asked = 0, False, None
    for line in out.splitlines():
        if not line.startswith(m):
            continue
        body = line[len(m) :]
        if body == "NOSPY":
            nospy = True
        elif body.startswith("ASKED "):
            got = parse_asked(body)
            bad += got is None
            asked = got or asked
        elif r := _RANK.match(body):
            ranks[int(r[1])] = (int(r[2]), r[3])
        elif s := _STACK.match(body):
            dumps[int(s[1])] = (int(s[2]), _b64(s[3]), _b64(s[4]))
        else:
            bad += 1
    stacks = []
    for pid, (rank, state) in sorted(ranks.items(), key=lambda kv: kv[1][0]):
        rc, dump, err = dumps.get(pid, (-1, "", "no answer"))
        frames, problem = _frames(dump) if rc == 0 else ((), _why(rc, err))
        stacks.append(RankStack(node, pid, rank, state, frames, problem))
    if nospy:
        why = "py-spy not found on the node (PATH, or after `setup`)"
        return NodeStacks(node, (), why, bad, asked)
    return NodeStacks(node, tuple(stacks), None, bad, asked)


def _b64(text: str) -> str:
    try:
        return base64.b64decode(text, validate=True).decode(errors="replace")
    except (binascii.Error, ValueError):
        return ""


def _why(rc: int, err: str) -> str:
    if rc == 124:
        return "py-spy ran out of the time budget"
    text = " ".join(one_line(err).split())
    if "Permission denied" in text or "Operation not permitted" in text:
        return "ptrace not permitted (kernel.yama.ptrace_scope, or another user's process)"
    first = text.split(" Stack backtrace")[0].removeprefix("Error: ")
    return first[:200] or f"py-spy exited {rc}"


def capture(
    cluster: Cluster, targets: dict[str, tuple[str, str | None]], budget: float
) -> GroupResult[NodeStacks]:
    """Dump every rank on the given nodes at once (`targets`: node -> the run's process
    pattern, and its run directory to ask for Flight Recorder dumps); a node that does
    not answer within the budget is an error in its Outcome, never a delay for the
    teardown."""
    nonce = secrets.token_hex(4)

    def one(node: Node) -> NodeStacks:
        pattern, run_dir = targets[node.name]
        script = capture_script(pattern, budget, nonce, run_dir)
        out = node.run(script, timeout=budget + 4).stdout
        return parse_capture(node.name, out, nonce)

    return cluster.map(one, list(targets))
