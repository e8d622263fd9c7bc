"""The first failure of an attempt: which node and rank broke first, and why.

Why a rule of its own, on the node side: when one rank raises, every other rank then
fails too (a closed gloo socket, an NCCL timeout, torchrun tearing its workers down),
and whichever torchrun exits first is only the first the watch happened to see. The
coordinator names the culprit when it decides, with the manager asleep, so the
decision, the webhook, `status`, the app and the report all say the same node; the
manager's report (report/failure.py) calls the same rule. Each node's part is read
where its log is (`node_cause`, by its sentinel after the kill: every rank has written
its last line by then) and travels as plain, bounded values (`NodeCause.to_wire`,
`from_wire`: node text is data).

The rule: the earliest node whose log's first error is a primary one (a cause, not a
consequence: classify.py); else the earliest node with a problem; else the node the
judge decided on. "Earliest" is the node's own clock where it wrote its exit code,
else when the watch first saw the node in trouble; ties go to the lower node rank.
"""

from __future__ import annotations

import math
import os
import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mntui.sessions.node.files import plainfile

from .classify import first_error
from .logrules import Cause
from .termsafe import one_line

LOG_BYTES = 512 * 1024  # the first error is rarely further back than this from the end
MAX_TEXT = 300  # a summary's characters, on the wire and in every file
_CAUSES = {c.value: c for c in Cause}


def exit_text(code: int) -> str:
    """`exit code 137 (SIGKILL)`: shells report a signal as 128+N, torchrun as -N."""
    sig = code - 128 if code > 128 else -code if code < 0 else 0
    try:
        name = signal.Signals(sig).name if sig else ""
    except ValueError:
        name = ""
    return f"exit code {code}" + (f" ({name})" if name else "")


@dataclass(frozen=True)
class NodeCause:
    """One node's part of an attempt's end, as its log and exit code say."""

    node: str
    node_rank: int  # the node's place in the attempt's layout (0: the main)
    at: float | None  # when it broke: its exit code's time (node clock), else first seen
    exit_code: int | None
    rank: int | None  # the global rank its log's first error names
    cause: Cause | None
    summary: str | None  # one line for a person, terminal-safe
    secondary: bool = False  # the first error is only a consequence of another's
    mistake: bool = False  # the job's own mistake (classify's MISTAKES), not the node's

    @property
    def troubled(self) -> bool:
        """It broke: an error in its log, or an end that is no clean exit (a node that
        exited 0 first, its peer failing after, finished: it is no failure)."""
        return (
            self.summary is not None
            or bool(self.exit_code)
            or (self.at is not None and self.exit_code is None)
        )

    @property
    def why(self) -> str:
        """What broke, in a few words: the log's first error, else the exit code."""
        if self.summary is not None:
            return self.summary
        if self.exit_code:
            return exit_text(self.exit_code)
        return "no error in its log"

    @property
    def who(self) -> str:
        return f"{self.node} rank {self.rank}" if self.rank is not None else self.node

    def to_wire(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "exit_code": self.exit_code,
            "rank": self.rank,
            "cause": self.cause.value if self.cause is not None else None,
            "summary": self.summary,
            "secondary": self.secondary,
            "mistake": self.mistake,
        }


def node_cause(run_dir: str, node: str = "", node_rank: int = 0) -> NodeCause:
    """This node's part, read from the attempt's run dir: `exit_code` (and its time)
    as launch.sh wrote it, and the first error in the tail of `output.log`."""
    code, at = _exit_code(run_dir)
    finding = first_error(_tail(os.path.join(run_dir, "output.log")))
    if finding is None:
        return NodeCause(node, node_rank, at, code, None, None, None)
    return NodeCause(
        node, node_rank, at, code, finding.rank, finding.cause,
        one_line(finding.summary, MAX_TEXT), finding.secondary, finding.mistake,
    )  # fmt: skip


def _exit_code(run_dir: str) -> tuple[int | None, float | None]:
    try:
        with open(
            os.path.join(run_dir, "exit_code"), "rb", buffering=0, opener=plainfile.plain
        ) as f:
            st = os.fstat(f.fileno())
            text = f.read(32).decode("ascii", "replace").strip()
    except OSError:
        return None, None
    if not re.fullmatch(r"-?[0-9]{1,9}", text):
        return None, None
    return int(text), st.st_mtime


def _tail(path: str) -> list[str]:
    """The log's last LOG_BYTES, from its first whole line; nothing when it is not a
    plain file (plainfile.py: a FIFO the job put there would block the reader for ever)."""
    try:
        with open(path, "rb", buffering=0, opener=plainfile.plain) as f:
            start = max(0, os.fstat(f.fileno()).st_size - LOG_BYTES)
            f.seek(start)
            data = f.read(LOG_BYTES)
    except OSError:
        return []
    if start > 0:
        data = data[data.find(b"\n") + 1 :] if b"\n" in data else b""
    return data.decode("utf-8", "replace").splitlines()


def from_wire(node: str, node_rank: int, data: object, seen: float | None) -> NodeCause | None:
    """A node's part as its sentinel sent it, strictly: None when it is not what a
    sentinel of ours sends (the caller counts it malformed). `seen`: when the watch
    first saw the node in trouble, for a node that wrote no exit code."""
    if not isinstance(data, dict):
        return None
    at, code, rank = data.get("at"), data.get("exit_code"), data.get("rank")
    cause, summary = data.get("cause"), data.get("summary")
    flags = (data.get("secondary"), data.get("mistake"))
    ok = (
        (at is None or (_number(at) and math.isfinite(at)))
        and (code is None or (type(code) is int and -(1 << 16) < code < 1 << 16))
        and (rank is None or (type(rank) is int and 0 <= rank < 1 << 24))
        and (cause is None or cause in _CAUSES)
        and (summary is None or (isinstance(summary, str) and len(summary) <= 4 * MAX_TEXT))
        and all(type(f) is bool for f in flags)
    )
    if not ok:
        return None
    text = one_line(summary, MAX_TEXT) if isinstance(summary, str) else None
    when = float(at) if at is not None else seen
    return NodeCause(
        node, node_rank, when, code, rank, _CAUSES.get(cause) if cause else None, text,
        bool(flags[0]), bool(flags[1]),
    )  # fmt: skip


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def first_failure(causes: Sequence[NodeCause], decided: str | None) -> NodeCause | None:
    """The node that broke first (the module's rule); None when nothing broke and the
    judge decided on no node of these."""

    def when(c: NodeCause) -> tuple[float, int]:
        return (c.at if c.at is not None else math.inf, c.node_rank)

    primary = [c for c in causes if c.summary is not None and not c.secondary]
    if primary:
        return min(primary, key=when)
    troubled = [c for c in causes if c.at is not None and c.troubled]
    if troubled:
        return min(troubled, key=when)
    return next((c for c in causes if c.node == decided), None)


def plain(first: NodeCause) -> dict[str, Any]:
    """The first failure as the coordinator's files keep it (decision.json, chain.json,
    the journal) and the manager reads it (`read`)."""
    return {"node": first.node, **first.to_wire(), "why": first.why}


def read(data: object, nodes: Mapping[str, int] | None = None) -> NodeCause | None:
    """A kept first failure, read back strictly; None when absent or not ours.
    `nodes`: the attempt's node ranks, when known (a node outside them is refused)."""
    if not isinstance(data, dict):
        return None
    node = data.get("node")
    if not isinstance(node, str) or not node or len(node) > 255:
        return None
    if nodes is not None and node not in nodes:
        return None
    rank = nodes.get(node, 0) if nodes is not None else 0
    return from_wire(one_line(node, 255), rank, data, None)
