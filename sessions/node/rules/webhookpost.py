"""One webhook POST within a deadline, whatever the server does: the coordinator's on
the main node and this machine's notifier alike (standard library alone).

urllib's `timeout` bounds each socket operation, not the request: a server that answers
a byte a second never trips it and held the notifier's only thread for 30 s against a
2 s timeout. So the POST runs in a helper thread that the notifier stops waiting for at
the deadline, and the sockets it opened are shut then, which ends the helper too.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import urllib.error
import urllib.request
from typing import Any

__all__ = ["post_once"]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirected POST turns into a GET without its body: report it, do not follow."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _why(exc: object, timeout: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {round(timeout, 1):g}s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if isinstance(exc, BaseException) else text


class _Sockets:
    """The sockets one POST opened, so that its deadline can cut them off from outside:
    urllib's timeout bounds each read, and a server trickling bytes never trips it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._expired = False

    def opened(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.append(sock)
            if self._expired:
                _cut(sock)

    def expire(self) -> None:
        with self._lock:
            self._expired = True
            for sock in self._open:
                _cut(sock)


def _cut(sock: socket.socket) -> None:
    # socket.socket's own shutdown, also for TLS: the reader in the other thread gets
    # an error at once, and the SSL object stays its to drop.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Conn(http.client.HTTPConnection):
    sockets: _Sockets

    def connect(self) -> None:
        super().connect()
        self.sockets.opened(self.sock)


class _TLSConn(http.client.HTTPSConnection):
    sockets: _Sockets

    def connect(self) -> None:
        super().connect()
        self.sockets.opened(self.sock)


class _Tracked(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
    """urllib's own handlers (proxies from the environment included), whose connections
    tell `sockets` what they open."""

    def __init__(self, sockets: _Sockets) -> None:
        urllib.request.HTTPHandler.__init__(self)
        urllib.request.HTTPSHandler.__init__(self)
        self.sockets = sockets

    def do_open(self, http_class: Any, req: urllib.request.Request, **kw: Any) -> Any:
        tls = isinstance(http_class, type) and issubclass(http_class, http.client.HTTPSConnection)

        def make(host: str, **args: Any) -> http.client.HTTPConnection:
            conn = _TLSConn(host, **args) if tls else _Conn(host, **args)
            conn.sockets = self.sockets
            return conn

        return super().do_open(make, req, **kw)


def _attempt(url: str, body: bytes, timeout: float, sockets: _Sockets) -> tuple[str, bool] | None:
    """None on a 2xx answer, else (why, worth one retry): only when no connection could
    be made or the request could not be sent, so a processed POST is never repeated."""
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "mntui"},
    )
    try:
        opener = urllib.request.build_opener(_NoRedirect(), _Tracked(sockets))
        with opener.open(req, timeout=timeout) as resp:
            resp.read(4096)
    except urllib.error.HTTPError as exc:
        exc.close()
        return f"HTTP {exc.code} {exc.reason}", False
    except urllib.error.URLError as exc:
        return _why(exc.reason, timeout), isinstance(exc.reason, ConnectionError)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return _why(exc, timeout), False
    return None


def post_once(url: str, body: bytes, timeout: float) -> tuple[str, bool] | None:
    """`_attempt` within `timeout` in all: it runs in a helper thread, and at the deadline
    its sockets are shut and its answer no longer waited for (DNS and a TLS handshake,
    done before a socket is ours to shut, end in that thread alone)."""
    sockets = _Sockets()
    got: list[tuple[str, bool] | None] = []
    helper = threading.Thread(
        target=lambda: got.append(_attempt(url, body, timeout, sockets)),
        name="mntui-webhook",
        daemon=True,
    )
    try:
        helper.start()
    except RuntimeError as exc:
        return f"no thread to post with: {exc}", False
    helper.join(timeout)
    if got:
        return got[0]
    sockets.expire()
    return _why(TimeoutError(), timeout), False
