"""How a sentinel (or the coordinator) leaves the shell that started it and stays up.

`launch` starts it from the node's persistent shell, inside a command substitution that
waits for EOF on its stdout; the tmux server, the pane and sshd may all die while the job
runs. So it double-forks (fork, setsid, fork): the grandchild is in a session of its own,
is no session leader (it can never gain a controlling terminal, so no SIGHUP reaches it),
and holds none of the shell's descriptors: stdin is /dev/null, stdout and stderr go to its
log, and every descriptor it inherited from the shell is closed (descriptors Python opened
itself are not inheritable, so "inheritable" names exactly the shell's).

The first parent waits on a pipe and exits only once the daemon says how it went, so the
shell's answer is the truth, not a hope: one line `SENTINEL <pid> <message>` and exit 0
once the daemon calls `ready`, or one line on stderr and exit 1 when it fails first (an
error in the setup here, `Ready.fail`, an uncaught exception, an exit, or no word within
`timeout`).
"""

from __future__ import annotations

import os
import select
import selectors
import subprocess
import sys
import time
import types
from collections.abc import Callable, Mapping
from enum import Enum
from typing import NoReturn

from mntui.sessions.node.files.plainfile import plain
from mntui.sessions.node.rules.termsafe import one_line

_DROP = ("TMUX", "TMUX_PANE")


def clean_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a process the sentinel spawns: no `MNTUI_*` (a tmux server it started
    would carry the sentinel's tag, and `mntui kill` would take the user's tmux), no
    `TMUX`/`TMUX_PANE` (a tmux client would drive the pane's server, not the node's)."""
    return {k: v for k, v in env.items() if not k.startswith("MNTUI_") and k not in _DROP}


def _one_line(text: str) -> str:
    """The daemon's word as one clean line: it reaches a shell's answer, and a terminal."""
    return " ".join(one_line(text, 500).split())


class Ready:
    """The daemon's side of the pipe: say once that it is up (`ready`) or why not (`fail`)."""

    def __init__(self, fd: int, label: str) -> None:
        self._fd: int | None = fd
        self._label = label

    @property
    def pending(self) -> bool:
        return self._fd is not None

    def __call__(self, message: str = "") -> None:
        words = [self._label, str(os.getpid()), _one_line(message)]
        self._send("OK " + " ".join(w for w in words if w))

    def fail(self, why: str) -> None:
        self._send("ERR " + (_one_line(why) or "failed"))

    def _send(self, line: str) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.write(fd, (line + "\n").encode())
        except OSError:
            pass  # the first parent gave up waiting (timeout): nobody to tell
        finally:
            os.close(fd)


def daemonize(
    log_path: str,
    pid_path: str,
    *,
    max_log: int = 1 << 20,
    label: str = "SENTINEL",
    timeout: float = 30.0,
) -> Ready:
    """Returns in the daemon only; the caller's process exits (see the module's doc).
    The daemon runs in the pid file's directory, with umask 077. Call it before any
    thread starts: a fork copies only the thread that forks."""
    log_path, pid_path = os.path.abspath(log_path), os.path.abspath(pid_path)
    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    first = os.fork()
    if first:
        os.close(w)
        _first_parent(r, first, log_path, timeout, label.lower())
    os.close(r)
    try:
        os.setsid()
        if os.fork():
            os._exit(0)  # the session leader goes: the daemon can never get a terminal
    except OSError as e:
        os.write(w, f"ERR cannot detach: {e}\n".encode())
        os._exit(1)
    ready = Ready(w, label)
    try:
        _settle(log_path, pid_path, max_log, keep=w)
    except OSError as e:
        ready.fail(f"cannot start: {e}")
        os._exit(1)
    _report_crash(ready)
    return ready


def leave(code: int = 0) -> NoReturn:
    """The daemon's end once its work is done: its threads that are no daemons (a kill
    under way) finish first, then the process exits without the interpreter's teardown:
    64 sentinels tearing their interpreters down at once after a user's kill (one host's
    fake nodes) held the kill's answer back 0.7 s (0.9 -> 0.2 s from the coordinator's
    answer to `mntui kill` returning). Its output was flushed line by line."""
    import threading

    me = threading.current_thread()
    for t in threading.enumerate():
        if t is not me and not t.daemon:
            t.join()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a full disk, a closed log: leaving anyway
            pass
    os._exit(code)


def _first_parent(r: int, child: int, log_path: str, timeout: float, name: str) -> NoReturn:
    """Wait for the daemon's word, say it in one line, exit."""
    os.waitpid(child, 0)  # the middle child exits at once: reap it
    data = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([r], [], [], left)[0]:
            data = f"ERR not ready within {timeout:g}s: see {log_path}\n".encode()
            break
        chunk = os.read(r, 4096)
        if not chunk:
            data = f"ERR exited before it was ready: see {log_path}\n".encode()
            break
        data += chunk
    line = data.split(b"\n", 1)[0].decode(errors="replace")
    if line.startswith("OK "):
        os.write(1, line[3:].encode() + b"\n")
        os._exit(0)
    os.write(2, f"{name}: {line[4:]}\n".encode())
    os._exit(1)


def _settle(log_path: str, pid_path: str, max_log: int, keep: int) -> None:
    os.umask(0o077)
    os.chdir(os.path.dirname(pid_path))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        if os.path.getsize(log_path) > max_log:
            os.replace(log_path, log_path + ".1")
    except FileNotFoundError:
        pass
    log = plain(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # 0600: umask 077
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    _close_inherited(keep)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (the process's own)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    tmp = f"{pid_path}.{os.getpid()}.tmp"
    with open(tmp, "w", opener=plain) as f:
        f.write(f"{os.getpid()}\n")
    os.replace(tmp, pid_path)


def _close_inherited(keep: int) -> None:
    """Close what the shell passed down (a pipe held open keeps an SSH answer waiting)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > 2 and fd != keep:
            try:
                if os.get_inheritable(fd):
                    os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, gone by now


def _report_crash(ready: Ready) -> None:
    """An exception that ends the daemon before `ready` is its one-line error."""
    previous: Callable[..., object] = sys.excepthook

    def hook(
        kind: type[BaseException], value: BaseException, tb: types.TracebackType | None
    ) -> None:
        if ready.pending:
            ready.fail(f"{kind.__name__}: {value}")
        previous(kind, value, tb)

    sys.excepthook = hook


class Overran(str, Enum):
    """How a child's output was cut short (read_output)."""

    TIME = "time"  # nothing for the rest of its deadline
    SIZE = "size"  # more than its limit

    def __str__(self) -> str:
        return self.value


def read_output(
    proc: subprocess.Popen[bytes], deadline: float, limit: int
) -> tuple[bytes, Overran | None]:
    """A child's stdout until it closes it, `deadline` (monotonic) or more than `limit`
    bytes: what came (the caller cuts it), and how it overran, if it did. What a program
    on a node prints is data and may never end; the caller kills what overran."""
    assert proc.stdout is not None
    chunks: list[bytes] = []
    size = 0
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return b"".join(chunks), Overran.TIME
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                return b"".join(chunks), None
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                return b"".join(chunks), Overran.SIZE
