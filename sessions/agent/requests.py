"""What the agent's requests do on the run's nodes (log reads, a kill, a live report,
a subscriber's backlog), and the checks of their arguments.

A request comes from another process, so each field is checked (and refused with the
reason) before it reaches a node. These work on the run the agent holds while the agent
keeps that run attached (sessions/agent/server.py's `_using`): they never outlive it.
"""

from __future__ import annotations

import base64
import contextlib
import math
import os
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mntui.sessions.config import JobConfig
from mntui.sessions.errors import UsageError
from mntui.sessions.runs import RunRecord
from mntui.sessions.ssh import Cluster, Node
from mntui.sessions.wire import encode, message

from .listener import Refused


@dataclass(frozen=True)
class Target:
    """The run the agent serves: what a request acts on."""

    cfg: JobConfig
    record: RunRecord
    cluster: Cluster


def serve_logs(conn: socket.socket, t: Target, want: Mapping[str, tuple[str, int]]) -> bytes:
    """The answer is returned, and sent once the request has let go of the run."""
    from mntui.sessions.launch import last_lines, read_new

    dirs = {n.node: n.run_dir for n in t.record.nodes}
    if set(want) - set(dirs):
        raise Refused(f"unknown node(s): {', '.join(sorted(set(want) - set(dirs)))}")
    conn.sendall(message(ok=True, accepted=True))  # at once: the nodes may take a while

    def one(node: Node) -> dict[str, Any]:
        kind, n = want[node.name]
        if kind == "lines":
            lines, size = last_lines(node, dirs[node.name], n)
            return {"lines": lines, "offset": size}
        c = read_new(node, dirs[node.name], n)
        data = base64.b64encode(c.data).decode()
        return {"data": data, "offset": c.offset, "size": c.size}

    res = t.cluster.map(one, list(want))
    out = {n: o.value if o.value is not None else {"error": o.error} for n, o in res.items()}
    return message(kind="done", nodes=out)


def serve_kill(
    conn: socket.socket, t: Target, names: list[str] | None, grace: float | None
) -> None:
    from mntui.sessions.launch import stop_job, summarize

    send = threading.Lock()

    def tell(data: bytes) -> None:
        with send, contextlib.suppress(OSError):  # a client that left: the kill goes on
            conn.sendall(data)

    tell(message(ok=True, accepted=True, pid=os.getpid()))
    try:
        results = stop_job(
            t.cfg,
            t.cluster,
            names=names,
            grace=grace,
            on_event=lambda e: tell(message(kind="event", event=encode(e))),
        )
    except UsageError as exc:  # a partial kill in the backoff: the user's one line, no bug
        raise Refused(str(exc)) from None
    clean, text = summarize(t.cfg.job, results)
    tell(message(kind="done", clean=clean, text=text))


def serve_report(conn: socket.socket, t: Target) -> None:
    from mntui.sessions.report import render, report_now, to_json

    conn.sendall(message(ok=True, accepted=True, pid=os.getpid()))
    built = report_now(t.cfg, t.record, t.cluster)
    conn.sendall(message(kind="done", text=render(built), report=to_json(built)))


def backlog(t: Target, offsets: Mapping[str, int], back: int) -> dict[str, str]:
    """Each node's log bytes [offset - back, offset): what came before the stream."""
    from mntui.sessions.launch import parse_read, read_script

    dirs = {n.node: n.run_dir for n in t.record.nodes}

    def one(node: Node) -> str:
        end = offsets.get(node.name, 0)
        start = max(0, end - back)
        if end <= start:
            return ""
        out = node.run(read_script(dirs[node.name], start, end - start)).stdout
        return base64.b64encode(parse_read(out, start).data).decode()

    got = t.cluster.map(one, list(dirs))
    return {n: v for n, v in got.succeeded.items() if v}


def log_requests(nodes: object) -> dict[str, tuple[str, int]]:
    if not isinstance(nodes, dict) or not nodes:
        raise Refused("nodes: an object of node -> {offset: n} or {lines: n}")
    out = {}
    for name, want in nodes.items():
        if not isinstance(want, dict) or len(want) != 1:
            raise Refused(f"nodes.{name}: {{offset: n}} or {{lines: n}}")
        (kind, n), *_ = want.items()
        if kind not in ("offset", "lines") or not isinstance(n, int) or isinstance(n, bool):
            raise Refused(f"nodes.{name}: {{offset: n}} or {{lines: n}}")
        if not 0 <= n < 1 << 62:
            raise Refused(f"nodes.{name}: {kind} out of range")
        out[name] = (kind, n)
    return out


def kill_args(msg: dict[str, Any]) -> tuple[list[str] | None, float | None]:
    names, grace = msg.get("nodes"), msg.get("grace")
    if names is not None and not (
        isinstance(names, list) and names and all(isinstance(n, str) for n in names)
    ):
        raise Refused("nodes: a list of node names, or null for all")
    if grace is not None and (
        not isinstance(grace, int | float)
        or isinstance(grace, bool)
        or not math.isfinite(grace)
        or not 0 <= grace <= 3600
    ):
        raise Refused("grace: seconds from 0 to 3600, or null")
    return names, grace
