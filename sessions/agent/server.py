"""The run's agent: its watchdog process answers on a local socket.

The watchdog already holds one connection per node and polls every `interval`. Serving
what it has (the latest snapshots and verdicts) and acting on those connections (log
reads, a kill, a live report) turns every `mntui status` from N SSH handshakes into one
local round trip, and lets the app subscribe to the same poll stream instead of polling
every node a second time. The protocol is newline-delimited JSON, versioned (wire.py):
a request `{"v": 1, "op": ...}`, then one reply (status), or an acknowledgement at once
and the answer after it (logs, kill, report, subscribe): a client gives up within a
second on an agent that does not answer (a stopped one, or a socket that outlives a
killed agent for a moment), and goes direct.

One agent serves a whole restart chain: the supervisor attaches each attempt's run and
detaches it when the attempt ends; detaching waits for requests that are using the
run's connections (a kill through the agent ends the watch, and must finish first).
The socket is sessions/agent/listener.py's; what the requests that reach the nodes do is
sessions/agent/requests.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, Full, Queue
from typing import Any

from mntui.sessions.config import JobConfig
from mntui.sessions.events import Event, Phase
from mntui.sessions.poll import NodeProgress, NodeSnapshot, Verdict, snapshot_wire
from mntui.sessions.runs import RunRecord
from mntui.sessions.ssh import Cluster
from mntui.sessions.wire import encode, message

from .listener import AgentSocket, Refused
from .place import AGENT_FILE, AgentUnavailable
from .place import socket_path as agent_socket_path
from .requests import Target, backlog, kill_args, log_requests, serve_kill, serve_logs, serve_report

FIRST_SNAPSHOT_WAIT = 0.5  # a request right after attach waits for the first poll
DETACH_WAIT = 120.0  # at most, for requests still using the run's connections
QUEUE = 16  # snapshots a subscriber may be behind before it is let go
MAX_BACK = 1 << 20  # bytes of each log a subscriber may ask for up front


@dataclass(frozen=True)
class Latest:
    """The last poll, encoded once for every client."""

    payload: dict[str, Any]  # run_id, at, nodes (wire form), verdicts, progress, summary
    offsets: Mapping[str, int]  # where each log's next poll reads from
    stream: bytes  # the subscribers' message: log bytes included


def _status_form(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload without the poll's log bytes: status has no use for them."""
    nodes = {n: {**d, "new_output": ""} for n, d in payload["nodes"].items()}
    return {**payload, "nodes": nodes}


class Agent(AgentSocket):
    """The run it serves, its latest poll, and the subscribers to its poll stream."""

    def __init__(self, job: str, uid: int | None = None) -> None:
        self.job = job
        self._lock = threading.Condition()
        self._target: Target | None = None
        self._latest: Latest | None = None
        self._inflight = 0
        self._subs: list[Queue[bytes | None]] = []
        ops = {
            "hello": self._hello,
            "status": self._status,
            "logs": self._logs,
            "kill": self._kill,
            "report": self._report,
            "subscribe": self._subscribe,
        }
        super().__init__(agent_socket_path(job), os.getuid() if uid is None else uid, ops)

    # -- lifecycle --------------------------------------------------------------------
    def stop(self) -> None:
        self.detach()
        super().stop()

    def attach(self, cfg: JobConfig, record: RunRecord, cluster: Cluster) -> None:
        with self._lock:
            self._target, self._latest = Target(cfg, record, cluster), None
        data = {"socket": str(self.path), "pid": os.getpid(), "run_id": record.run_id}
        _write_private(record.dir / AGENT_FILE, json.dumps(data))

    def detach(self, wait: float = DETACH_WAIT) -> None:
        """No new requests; wait for those using the run's connections; end the streams."""
        with self._lock:
            target, self._target, self._latest = self._target, None, None
            deadline = time.monotonic() + wait
            while self._inflight and (left := deadline - time.monotonic()) > 0:
                self._lock.wait(left)
            subs, self._subs = self._subs, []
        for q in subs:
            _end(q, message(kind="end", why="the run is no longer watched"))
        if target is not None:
            with contextlib.suppress(OSError):
                (target.record.dir / AGENT_FILE).unlink()

    def publish(
        self,
        snaps: Mapping[str, NodeSnapshot],
        verdicts: Mapping[str, Verdict],
        progress: Mapping[str, NodeProgress],
        summary: str,
        offsets: Mapping[str, int],
    ) -> None:
        """One poll's results, for status requests and every subscriber."""
        target = self._target
        if target is None:
            return
        payload = {
            "run_id": target.record.run_id,
            "at": time.time(),
            "nodes": {n: snapshot_wire(s) for n, s in snaps.items()},
            "verdicts": {n: encode(v) for n, v in verdicts.items()},
            "progress": {n: encode(p) for n, p in progress.items()},
            "summary": summary,
        }
        latest = Latest(payload, dict(offsets), message(kind="snapshot", **payload))
        with self._lock:
            self._latest = latest
            self._lock.notify_all()
            subs = list(self._subs)
        for q in subs:
            try:
                q.put_nowait(latest.stream)
            except Full:  # a subscriber that cannot keep up is let go, never waited for
                self._drop(q)

    # -- serving ----------------------------------------------------------------------
    @contextlib.contextmanager
    def _using(self, run: object = None) -> Iterator[Target]:
        """The attached run, held until the request is done (detach waits for it)."""
        with self._lock:
            t = self._target
            if t is None:
                raise Refused("no run attached (between two attempts of a restart chain)")
            if run is not None and run != t.record.run_id:
                raise Refused(f"the agent watches run {t.record.run_id}, not {run}")
            self._inflight += 1
        try:
            yield t
        finally:
            with self._lock:
                self._inflight -= 1
                self._lock.notify_all()

    def _wait_latest(self) -> Latest:
        deadline = time.monotonic() + FIRST_SNAPSHOT_WAIT
        with self._lock:
            while self._latest is None and (left := deadline - time.monotonic()) > 0:
                self._lock.wait(left)
            if self._latest is None:
                raise Refused("no poll yet")
            return self._latest

    def _hello(self, conn: socket.socket, msg: dict[str, Any]) -> bool:
        t = self._target
        run = t.record.run_id if t is not None else None
        conn.sendall(message(ok=True, pid=os.getpid(), job=self.job, run_id=run))
        return True

    def _status(self, conn: socket.socket, msg: dict[str, Any]) -> bool:
        with self._using(msg.get("run")):
            latest = self._wait_latest()
        conn.sendall(message(ok=True, pid=os.getpid(), **_status_form(latest.payload)))
        return True

    def _logs(self, conn: socket.socket, msg: dict[str, Any]) -> bool:
        """`nodes`: {node: {"offset": n}} (bytes from there) or {node: {"lines": n}}."""
        want = log_requests(msg.get("nodes"))
        with self._using(msg.get("run")) as t:
            done = serve_logs(conn, t, want)
        conn.sendall(done)
        return True

    def _kill(self, conn: socket.socket, msg: dict[str, Any]) -> bool:
        names, grace = kill_args(msg)
        with self._using() as t:
            serve_kill(conn, t, names, grace)
        return True

    def _report(self, conn: socket.socket, msg: dict[str, Any]) -> bool:
        with self._using(msg.get("run")) as t:
            serve_report(conn, t)
        return True

    def _subscribe(self, conn: socket.socket, msg: dict[str, Any]) -> bool:
        """The poll stream: the last `back` bytes of each log, the latest snapshot, then
        every poll's snapshots, log bytes included, in order."""
        back = msg.get("back", 0)
        if not isinstance(back, int) or isinstance(back, bool) or not 0 <= back <= MAX_BACK:
            raise Refused(f"back: a number of bytes from 0 to {MAX_BACK}")
        q: Queue[bytes | None] = Queue(QUEUE)
        with self._using(msg.get("run")) as t:
            latest = self._wait_latest()
            with self._lock:
                latest = self._latest or latest  # registered with the offsets it names
                self._subs.append(q)
            conn.sendall(message(ok=True, pid=os.getpid(), run_id=t.record.run_id))
            if back:
                conn.sendall(message(kind="backlog", logs=backlog(t, latest.offsets, back)))
            conn.sendall(message(kind="snapshot", **_status_form(latest.payload)))
        conn.settimeout(None)
        try:
            while (item := q.get()) is not None:
                conn.sendall(item)
        finally:
            self._drop(q)
        return False

    def _drop(self, q: Queue[bytes | None]) -> None:
        with self._lock:
            if q in self._subs:
                self._subs.remove(q)
        _end(q, None)


def _end(q: Queue[bytes | None], last: bytes | None) -> None:
    """Make room and end a subscriber's stream (its thread sends `last`, then stops)."""
    while True:
        try:
            q.get_nowait()
        except Empty:
            break
    with contextlib.suppress(Full):
        if last is not None:
            q.put_nowait(last)
        q.put_nowait(None)


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def start_agent(job: str, on_event: Callable[[Event], None]) -> Agent | None:
    """The watchdog serves when it can; when it cannot, it still watches (and says why)."""
    try:
        return Agent(job).start()
    except AgentUnavailable as exc:
        on_event(Event(None, None, Phase.NOTICE, f"agent: not serving: {exc}"))
        return None
