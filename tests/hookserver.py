"""A real local HTTP server standing in for a chat webhook (Slack, Mattermost, Discord):
it records every POST, and answers with the status the test sets."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SECRET = "T000/B000/XXXXsecretXXXX"  # a webhook URL's path is its password


class _Hook(http.server.BaseHTTPRequestHandler):
    server: _HookServer

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with self.server.lock:
            self.server.posts.append((self.path, dict(self.headers), body))
        self.send_response(self.server.status)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


class _HookServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Hook)
        self.lock = threading.Lock()
        self.posts: list[tuple[str, dict[str, str], bytes]] = []
        self.status = 200

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hooks/{SECRET}"

    def bodies(self) -> list[dict[str, object]]:
        with self.lock:
            return [json.loads(b) for _, _, b in self.posts]


@contextmanager
def serving(port: int = 0) -> Iterator[_HookServer]:
    """`port`: a given one (a webhook whose host was down comes back), else any."""
    server = _HookServer(port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
