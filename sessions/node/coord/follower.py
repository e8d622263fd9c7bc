"""`feed RUN_DIR`: the live stream of a run the cluster watches, on the main node, written
on stdout for the manager that started it over ssh (the app: tui/app/streaming.py).

Why a verb of the bundle: the app follows every node over ONE ssh connection to the main
instead of polling each node. This process joins the coordinator on this node, as a
sentinel does (the run's secret, the HMAC handshake, `role: feed` in its hello), and
gets every node's new log bytes (feedserve.py); every second it adds the board the
coordinator writes beside it (coord/status.json, nodes.json, gpus.json: each node's
state, step, rate, its snapshot and GPUs), each node's entry only when it changed. A
coordinator started again (respawn.py) is joined again, with backoff; one that said
goodbye ends the stream (`end`). Every line is feedwire.line: base64 of JSON, whatever
the nodes printed. The manager going away closes stdout: the next write ends this.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from typing import Any, BinaryIO

from mntui.sessions.node.files.plainfile import read_plain
from mntui.sessions.node.proc import respawn
from mntui.sessions.node.wire import feedwire, frames
from mntui.sessions.node.wire.watchcfg import WatchConfig, load_for

from . import feedserve

EVERY = 1.0  # seconds between two boards
STATUS_MAX = 256 * 1024
FILES_MAX = 8 << 20  # nodes.json and gpus.json are bounded by their writers to this
SILENCE = 10.0  # seconds without a frame: the coordinator is stopped, or gone
RETRY_MAX = 5.0


class Out:
    """stdout, one whole line at a time from any thread; a closed pipe ends the process."""

    def __init__(self, out: BinaryIO) -> None:
        self.out, self.lock = out, threading.Lock()

    def send(self, obj: dict[str, Any]) -> None:
        try:
            with self.lock:
                self.out.write(feedwire.line(obj))
                self.out.flush()
        except (BrokenPipeError, OSError):
            os._exit(0)  # the manager is gone: so is its stream


class Boards:
    """What of the board files changed since the last frame."""

    def __init__(self, coord: str) -> None:
        self.coord = coord
        self.seen: dict[str, dict[str, object]] = {"nodes.json": {}, "gpus.json": {}}
        self.mtimes: dict[str, int] = {}

    def frame(self) -> dict[str, Any]:
        raw = read_plain(os.path.join(self.coord, "status.json"), STATUS_MAX)
        status = _json(raw)
        return {
            "k": "board",
            "now": round(time.time(), 3),
            "status": status if isinstance(status, dict) else None,
            "nodes": self.changed("nodes.json", "at"),
            "gpus": self.changed("gpus.json", "read_at"),
        }

    def changed(self, name: str, stamp: str) -> dict[str, Any]:
        """The file's entries whose `stamp` moved since sent (the file re-read only when
        its mtime did: at 64 nodes it is a megabyte)."""
        path = os.path.join(self.coord, name)
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError:
            return {}
        if self.mtimes.get(name) == mtime:
            return {}
        self.mtimes[name] = mtime
        data = _json(read_plain(path, FILES_MAX))
        nodes = data.get("nodes") if isinstance(data, dict) else None
        out, seen = {}, self.seen[name]
        for node, entry in (nodes if isinstance(nodes, dict) else {}).items():
            at = entry.get(stamp) if isinstance(entry, dict) else None
            if seen.get(node) != at or at is None:
                seen[node] = at
                out[node] = entry
        return out


def link(cfg: WatchConfig, secret: bytes, out: Out, stop: threading.Event) -> None:
    """The coordinator's log chunks, passed on; joined again after a loss."""
    backoff = 0.25
    while not stop.is_set():
        why = ""
        try:
            ch = connect(cfg, secret)
            out.send({"k": "link", "up": True, "why": f"joined the coordinator :{cfg.coord_port}"})
            backoff = 0.25
            with_ch(ch, out)
        except (OSError, frames.Refused) as exc:
            why = str(exc) or type(exc).__name__
        except feedwire.Malformed as exc:
            why = f"a malformed frame from the coordinator: {exc}"
        out.send({"k": "link", "up": False, "why": why[:300] or "the coordinator left"})
        stop.wait(backoff)
        backoff = min(RETRY_MAX, backoff * 2)


def connect(cfg: WatchConfig, secret: bytes) -> frames.Channel:
    sock = socket.create_connection(("localhost", cfg.coord_port), timeout=2.0)
    hello = {"node": feedserve.FOLLOWER, "chain": cfg.run, "role": "feed", "pid": os.getpid()}
    try:
        return frames.client_handshake(sock, secret, hello, kinds=feedserve.TO_FOLLOWER)
    except BaseException:
        sock.close()
        raise


def with_ch(ch: frames.Channel, out: Out) -> None:
    try:
        while True:
            msg = ch.recv(timeout=SILENCE)
            chunks, epoch = feedwire.check_logs(msg)
            if chunks:  # one line a frame, every node's news in it
                out.send({"k": "logs", **feedwire.logs_fields(chunks, epoch)})
    finally:
        ch.close()


def ended(run_dir: str) -> str | None:
    """Why the coordinator left of its own will (its goodbye), or None while it may run."""
    raw = read_plain(os.path.join(run_dir, "coord.pid"), 64) or b""
    pid = raw.strip()
    if not pid.isdigit() or not respawn.said_goodbye(run_dir, "coord", int(pid)):
        return None
    data = _json(read_plain(respawn.exited_path(run_dir, "coord"), 4096))
    why = data.get("why") if isinstance(data, dict) else None
    return why if isinstance(why, str) else "the coordinator ended"


def main(argv: list[str]) -> int:
    loaded = load_for(argv, "feed")
    if isinstance(loaded, int):
        return loaded
    run_dir, cfg, secret = loaded
    out = Out(sys.stdout.buffer)
    out.send({"k": "hello", "run": cfg.run, "nodes": list(cfg.nodes), "pid": os.getpid()})
    stop = threading.Event()
    threading.Thread(target=link, args=(cfg, secret, out, stop), daemon=True).start()
    boards = Boards(os.path.join(run_dir, "coord"))
    while True:
        out.send(boards.frame())
        why = ended(run_dir)
        if why is not None:
            out.send({"k": "end", "why": why[:300]})
            stop.set()
            return 0
        time.sleep(EVERY)


def _json(raw: bytes | None) -> object:
    try:
        return json.loads(raw) if raw else None
    except (ValueError, RecursionError):
        return None
