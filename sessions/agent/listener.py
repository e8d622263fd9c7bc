"""The agent's listening socket: private to its user, and one thread per client.

Kept apart from what the agent serves (sessions/agent/server.py) because the socket's rules hold
whatever is asked: the socket lives in a 0700 directory and is 0600 itself, a peer of
another uid is refused before it is read, a stale socket of the same job is replaced (the
newest agent serves), and stopping unlinks the path only while it is still ours.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Self

from mntui.sessions.errors import log_exception
from mntui.sessions.wire import WireError, message, read_messages

from .place import SUN_PATH_MAX, AgentUnavailable, make_private, peer_uid

IDLE_CLOSE = 60.0  # a connection that sends nothing for this long is closed

Handler = Callable[[socket.socket, dict[str, Any]], bool]  # False: the connection is done


class Refused(Exception):
    """A request this agent cannot serve; the reason goes back to the client."""


class AgentSocket:
    """Serves `ops` (a request's `op` -> its handler) to clients of `uid` on `path`."""

    def __init__(self, path: Path, uid: int, ops: Mapping[str, Handler]) -> None:
        self.path, self.uid = path, uid
        self._ops = ops
        self._listener: socket.socket | None = None
        self._ino: int | None = None

    def start(self) -> Self:
        """Bind the socket (a stale one of this job is replaced: the newest agent serves)."""
        make_private(self.path.parent)
        if len(str(self.path)) > SUN_PATH_MAX:
            raise AgentUnavailable(f"socket path too long: {self.path}")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        try:
            sock.bind(str(self.path))
            os.chmod(self.path, 0o600)
            sock.listen(64)
        except OSError as exc:
            sock.close()
            raise AgentUnavailable(f"cannot serve on {self.path}: {exc.strerror}") from None
        self._ino = os.stat(self.path).st_ino
        self._listener = sock
        threading.Thread(target=self._accept, args=(sock,), name="mntui-agent", daemon=True).start()
        return self

    def stop(self) -> None:
        sock, self._listener = self._listener, None
        if sock is None:
            return
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # wakes the accept loop
        sock.close()
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == self._ino:  # not a newer agent's socket
                self.path.unlink()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn: socket.socket) -> None:
        """One client: its requests in order, until it closes (or subscribes)."""
        with conn:
            conn.settimeout(IDLE_CLOSE)
            try:
                uid = peer_uid(conn)
                if uid != self.uid:
                    conn.sendall(message(ok=False, error=f"refused: peer uid {uid}"))
                    return
                for msg in read_messages(conn):
                    if not self._answer(conn, msg):
                        return
            except WireError as exc:
                with contextlib.suppress(OSError):
                    conn.sendall(message(ok=False, error=str(exc)))
            except OSError:
                return

    def _answer(self, conn: socket.socket, msg: dict[str, Any]) -> bool:
        """One request; every one is answered, a bug included: its traceback goes to the
        error log and the client gets one `ok: false` line saying where (a client reads
        that as the end of a stream too), and the connection serves the next request."""
        handler = self._ops.get(str(msg.get("op")))
        try:
            if handler is None:
                raise Refused(f"unknown op {msg.get('op')!r}")
            return handler(conn, msg)
        except Refused as exc:
            conn.sendall(message(ok=False, error=str(exc)))
            return True
        except (ConnectionError, TimeoutError):
            return False  # the client went away or stopped reading: no one to tell
        except Exception as exc:
            op = repr(msg.get("op"))[:60]
            logged = log_exception(f"agent request {op}", exc)
            where = f"; traceback in {logged}" if logged else ""
            with contextlib.suppress(OSError):
                conn.sendall(message(ok=False, error=f"internal error in {op}{where}"))
            return True
