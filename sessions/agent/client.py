"""Talking to a run's agent: the client, and its answers decoded.

The agent is the run's watchdog process: it holds a connection to every node already,
so `mntui status` through it is one local round trip instead of N SSH handshakes.
Where it listens and who may talk to it is place.py's.

Anything wrong (no agent.json, a stale socket, an agent that does not answer within a
second, one that serves another run) is AgentUnavailable: the caller falls back to
direct connections and can say why.
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mntui.sessions.events import Event
from mntui.sessions.poll import NodeProgress, NodeSnapshot, Verdict, snapshot_from_wire
from mntui.sessions.wire import WireError, decode, message, read_messages

from .place import AgentUnavailable, check_private, peer_uid, read_agent_file

CONNECT_TIMEOUT = 1.0  # a live agent answers at once; a stale socket is refused at once
FIRST_REPLY = 1.0  # every request's first reply (the answer, or an acknowledgement)


class AgentClient:
    """One connection to an agent; requests one after another, replies in order."""

    def __init__(self, sock: socket.socket, pid: int, path: Path) -> None:
        self.sock, self.pid, self.path = sock, pid, path
        self._replies = read_messages(sock)

    @classmethod
    def connect(cls, run_dir: Path, timeout: float = CONNECT_TIMEOUT) -> AgentClient:
        path, pid = read_agent_file(run_dir)
        check_private(path.parent)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
            if peer_uid(sock) != os.getuid():
                raise AgentUnavailable(f"{path} is served by another user: not used")
        except OSError as exc:
            sock.close()
            stale = exc.errno in (errno.ECONNREFUSED, errno.ENOENT)
            reason = "stale socket, the agent is gone" if stale else exc.strerror
            raise AgentUnavailable(f"agent pid {pid}: {reason or exc}") from None
        except AgentUnavailable:
            sock.close()
            raise
        return cls(sock, pid, path)

    def describe(self) -> str:
        return f"agent pid {self.pid} ({self.path})"

    def send(self, op: str, **fields: Any) -> None:
        try:
            self.sock.sendall(message(op=op, **fields))
        except OSError as exc:
            raise AgentUnavailable(f"agent pid {self.pid}: {exc.strerror or exc}") from None

    def reply(self, timeout: float | None) -> dict[str, Any]:
        """The next reply; one that says `ok: false` is AgentUnavailable (its reason)."""
        self.sock.settimeout(timeout)
        try:
            msg = next(self._replies)
        except StopIteration:
            raise AgentUnavailable(f"agent pid {self.pid} closed the connection") from None
        except TimeoutError:
            raise AgentUnavailable(f"agent pid {self.pid} did not answer in time") from None
        except (OSError, WireError) as exc:
            raise AgentUnavailable(f"agent pid {self.pid}: {exc}") from None
        if msg.get("ok") is False:
            raise AgentUnavailable(f"agent pid {self.pid}: {msg.get('error', 'refused')}")
        return msg

    def request(self, op: str, timeout: float = FIRST_REPLY, **fields: Any) -> dict[str, Any]:
        self.send(op, **fields)
        return self.reply(timeout)

    def stream(self, first: float, timeout: float | None) -> Iterator[dict[str, Any]]:
        """Replies of a long request (kill, subscribe): the first within `first` seconds
        (the agent acknowledges at once), each later one within `timeout`."""
        yield self.reply(first)
        while True:
            yield self.reply(timeout)

    def close(self) -> None:
        self.sock.close()

    def shutdown(self) -> None:
        """Wake a thread that waits for a reply (from another thread): it sees the end."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Via:
    """How a command reached the nodes: through the agent, or directly (and why)."""

    agent: bool
    detail: str

    @property
    def name(self) -> str:
        return "agent" if self.agent else "direct"

    def describe(self) -> str:
        if self.agent:
            return f"via the run's agent: {self.detail}"
        return f"direct connections to every node ({self.detail})"


def try_connect(run_dir: Path) -> tuple[AgentClient | None, Via]:
    try:
        client = AgentClient.connect(run_dir)
    except AgentUnavailable as exc:
        return None, Via(False, str(exc))
    return client, Via(True, client.describe())


# -- requests, decoded -------------------------------------------------------------


@dataclass(frozen=True)
class AgentStatus:
    """The agent's latest poll of the run, as the same objects a direct poll makes."""

    snaps: dict[str, NodeSnapshot]
    verdicts: dict[str, Verdict]
    progress: dict[str, NodeProgress]
    summary: str
    at: float  # local time of that poll


def decode_status(msg: dict[str, Any], nodes: Sequence[str]) -> AgentStatus:
    """A status reply or a subscriber's snapshot; AgentUnavailable if it is not one
    for exactly these nodes."""
    try:
        raw_nodes, raw_verdicts = msg["nodes"], msg["verdicts"]
        raw_progress, summary, at = msg.get("progress", {}), msg["summary"], msg["at"]
        if not all(isinstance(x, dict) for x in (raw_nodes, raw_verdicts, raw_progress)):
            raise WireError("nodes, verdicts and progress are objects")
        if set(raw_nodes) != set(nodes) or set(raw_verdicts) != set(nodes):
            raise WireError("not this run's nodes")
        if not isinstance(summary, str) or not isinstance(at, int | float):
            raise WireError("summary, at")
        snaps = {n: snapshot_from_wire(raw_nodes[n]) for n in nodes}
        verdicts = {n: decode(Verdict, raw_verdicts[n], f"verdicts.{n}") for n in nodes}
        progress = {
            n: decode(NodeProgress, p, f"progress.{n}")
            for n, p in raw_progress.items()
            if n in nodes
        }
    except (KeyError, WireError) as exc:
        raise AgentUnavailable(f"unreadable answer from the agent: {exc}") from None
    return AgentStatus(snaps, verdicts, progress, summary, float(at))


def fetch_status(client: AgentClient, run_id: str, nodes: Sequence[str]) -> AgentStatus:
    return decode_status(client.request("status", run=run_id), nodes)


def kill(
    client: AgentClient,
    names: Sequence[str] | None,
    grace: float,
    on_event: Callable[[Event], None],
) -> tuple[bool, str]:
    """A kill on the agent's open connections: (clean, summary), events as they come.
    If the agent goes away midway, AgentUnavailable: a direct kill may follow (a kill
    is safe to repeat)."""
    client.send("kill", nodes=list(names) if names else None, grace=grace)
    for msg in client.stream(first=FIRST_REPLY, timeout=grace + 90):
        kind = msg.get("kind")
        try:
            if kind == "event":
                on_event(decode(Event, msg.get("event"), "event"))
            elif kind == "done":
                clean, text = msg["clean"], msg["text"]
                if isinstance(clean, bool) and isinstance(text, str):
                    return clean, text
                raise WireError("done: clean, text")
        except (KeyError, WireError) as exc:
            raise AgentUnavailable(f"unreadable answer from the agent: {exc}") from None
    raise AgentUnavailable("unreachable")  # the stream only ends by raising


def read_logs(
    client: AgentClient, run_id: str, want: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, Any]]:
    """Per node: {"lines", "offset"} for {"lines": n}, {"data" (bytes), "offset",
    "size"} for {"offset": n}, or {"error"}; read on the agent's connections."""
    client.send("logs", run=run_id, nodes={n: dict(w) for n, w in want.items()})
    replies = client.stream(first=FIRST_REPLY, timeout=60)
    next(replies)  # accepted
    msg = next(replies)
    out: dict[str, dict[str, Any]] = {}
    try:
        for name in want:
            got = msg["nodes"][name]
            if not isinstance(got, dict):
                raise WireError(f"nodes.{name}")
            out[name] = _log_answer(name, got)
    except (KeyError, TypeError, WireError) as exc:
        raise AgentUnavailable(f"unreadable answer from the agent: {exc}") from None
    return out


def _log_answer(name: str, got: dict[str, Any]) -> dict[str, Any]:
    if isinstance(got.get("error"), str):
        return {"error": got["error"]}
    if not isinstance(got.get("offset"), int):
        raise WireError(f"nodes.{name}.offset")
    if "lines" in got:
        lines = got["lines"]
        if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
            raise WireError(f"nodes.{name}.lines")
        return {"lines": lines, "offset": got["offset"]}
    data = got.get("data")
    if not isinstance(data, str) or not isinstance(got.get("size"), int):
        raise WireError(f"nodes.{name}.data")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise WireError(f"nodes.{name}.data: not base64") from None
    return {"data": raw, "offset": got["offset"], "size": got["size"]}


def live_report(client: AgentClient, run_id: str, timeout: float) -> tuple[str, dict[str, Any]]:
    """(text, JSON) of a report taken now by the agent, on its connections."""
    client.send("report", run=run_id)
    for msg in client.stream(first=FIRST_REPLY, timeout=timeout):
        if msg.get("kind") == "done":
            text, data = msg.get("text"), msg.get("report")
            if isinstance(text, str) and isinstance(data, dict):
                return text, data
            raise AgentUnavailable("unreadable answer from the agent: done: text, report")
    raise AgentUnavailable("unreachable")
