"""The headless watchdog: `mntui watch` in a detached local tmux session, started so it
finds the same run, and confirmed before anyone says it guards the job.

The session runs in the user's own tmux server, whose environment is the one that
server was started with, days ago perhaps (another HOME, no XDG_STATE_HOME): a watcher
started there looked for the run in another state dir, said `no recorded run` into its
log and exited, while the launch and the app said a watchdog guarded the job. So the
watcher gets the launcher's environment and directory whole (HOME, XDG_STATE_HOME made
absolute, TMUX_TMPDIR, SSH_AUTH_SOCK, what the config's `${VAR}`s read), through a
0600 file in the run dir that it deletes on reading (never on a command line, which
every user can read), and the launch waits until the watcher tells it, in the run dir,
that it holds the run's lock and has polled the nodes once; a watcher that dies first
is reported with its last words. A Ctrl+C never lands between creating the session and
knowing it (`signals_deferred`): a second watcher, or a half-known one, is what a
Ctrl+C there once left.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from mntui.sessions.config import JobConfig
from mntui.sessions.errors import MntuiError, state_dir
from mntui.sessions.runs import RunRecord
from mntui.sessions.termsafe import one_line

READY = "watch.ready"  # "<pid> <token>": written by the watchdog after its first poll
TOKEN = "MNTUI_WATCH_TOKEN"  # which start a watchdog answers (an older one may linger)
CONFIRM = 30.0  # seconds for Python to start, the nodes' connections and a first poll
TRIES = 5  # new-session right after the server's last session closed can meet it exiting
# The watcher's first program: Python in isolated mode (no PYTHON* of the tmux server's
# environment), the standard library only; it takes its environment from the file.
SHIM = (
    "import json, os, sys; p = sys.argv[1]; s = json.load(open(p)); os.unlink(p); "
    "os.chdir(s['cwd']); os.execve(s['argv'][0], s['argv'], s['env'])"
)


class WatcherFailed(MntuiError):
    """No watchdog is confirmed; `alive`: its session still runs (it may come up late)."""

    def __init__(self, message: str, session: str, alive: bool = False) -> None:
        super().__init__(message)
        self.session, self.alive = session, alive


@dataclass(frozen=True)
class Spawned:
    session: str
    pane_pid: int
    token: str
    log_from: int  # watch.log's size before: what this watcher says starts there
    spec: Path  # its environment, until it reads (and deletes) it


@dataclass(frozen=True)
class Watcher:
    session: str
    pid: int  # the watchdog process that polled


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Ctrl+C, SIGTERM and SIGHUP that come during the block reach their handlers after
    it. Handlers, not a signal mask: a mask holds one thread only, and Python runs a
    signal that another thread took in the main thread all the same. Off the main thread
    (the app's workers) no signal is delivered anyway."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        came.append(signum)

    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, hold) for s in sigs}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if came:
            signal.raise_signal(came[0])  # to the handler in place again


def note_watching(record: RunRecord) -> None:
    """The watchdog's word, after its first poll under the run's lock."""
    path = record.dir / READY
    tmp = record.dir / f".{READY}.{os.getpid()}"
    try:
        tmp.write_text(f"{os.getpid()} {os.environ.get(TOKEN, '')}\n")
        os.replace(tmp, path)
    except OSError:
        pass  # the launch then says it could not confirm the watchdog


def start_detached(cfg: JobConfig, record: RunRecord, timeout: float = CONFIRM) -> Watcher:
    """Start the run's headless watchdog and wait until it is up; WatcherFailed if not."""
    with signals_deferred():
        spawned = spawn(cfg, record)
    return confirm(record, spawned, timeout)


def spawn(cfg: JobConfig, record: RunRecord) -> Spawned:
    """A new session (an earlier one of the job's is replaced) whose watcher gets this
    process' environment and directory. Call it under `signals_deferred`."""
    from mntui.sessions.launch import watch_session_name

    name, token = watch_session_name(cfg.job), secrets.token_hex(8)
    # -P: `-m` would put the launch's directory (a project's, a shared one) first on
    # sys.path, and a statistics.py there would run inside the watchdog
    argv = [sys.executable, "-P", "-m", "mntui.tui.cli", "-c", os.path.abspath(cfg.path)]
    argv += ["watch", "--run", record.run_id]
    env = {**os.environ, TOKEN: token, "XDG_STATE_HOME": str(state_dir().parent.absolute())}
    fd, spec = tempfile.mkstemp(dir=record.dir, prefix="watch.", suffix=".env")  # 0600
    with os.fdopen(fd, "w") as fh:
        json.dump({"argv": argv, "env": env, "cwd": os.getcwd()}, fh)
    log = record.dir / "watch.log"
    log_from = log.stat().st_size if log.exists() else 0
    (record.dir / READY).unlink(missing_ok=True)
    shim = shlex.join([sys.executable, "-I", "-c", SHIM, spec])
    command = f"{shim} 2>&1 | tee -a {shlex.quote(str(log))}"
    try:
        pid = _new_session(name, command)
    except BaseException:  # the spec holds the whole environment: never left behind
        Path(spec).unlink(missing_ok=True)
        raise
    return Spawned(name, pid, token, log_from, Path(spec))


def _new_session(name: str, command: str) -> int:
    """The session's pane PID. Retried: a server whose last session just closed exits,
    and a client that reaches it meanwhile hears `server exited unexpectedly`."""
    import libtmux
    from libtmux.exc import LibTmuxException

    server = libtmux.Server()
    error = ""
    for attempt in range(TRIES):
        if attempt:
            time.sleep(0.1 * attempt)
        try:
            server.cmd("kill-session", "-t", f"={name}")  # an earlier watcher of the job
            res = server.cmd("new-session", "-d", "-s", name, "-P", "-F", "#{pane_pid}", command)
        except (OSError, LibTmuxException) as exc:  # no tmux here (only the nodes need it)
            raise WatcherFailed(f"tmux could not start: {one_line(str(exc))}", name) from None
        out = res.stdout[0].strip() if res.stdout else ""
        if res.returncode == 0 and out.isdigit():
            return int(out)
        error = " ".join(res.stderr).strip() or f"tmux exited {res.returncode}"
    raise WatcherFailed(f"tmux could not start session {name}: {one_line(error)}", name)


def confirm(record: RunRecord, spawned: Spawned, timeout: float) -> Watcher:
    """Until the watcher says it polled, or dies, or `timeout` runs out."""
    deadline = time.monotonic() + timeout
    while True:
        pid = _ready(record, spawned.token)
        if pid is not None:
            return Watcher(spawned.session, pid)
        if not _alive(spawned.pane_pid):
            pid = _ready(record, spawned.token)  # it may have polled, and ended with the job
            if pid is not None:
                return Watcher(spawned.session, pid)
            spawned.spec.unlink(missing_ok=True)  # never read: a pane that died at once
            said = last_words(record.dir / "watch.log", spawned.log_from)
            raise WatcherFailed(f"it exited at start ({said or _silent()})", spawned.session)
        if time.monotonic() >= deadline:
            said = last_words(record.dir / "watch.log", spawned.log_from)
            raise WatcherFailed(
                f"it has not polled the nodes after {timeout:g}s"
                + (f" (last said: {said})" if said else ""),
                spawned.session,
                alive=True,
            )
        time.sleep(0.05)


def _silent() -> str:
    """A pane that died before the pipe to the log ran: the shell tmux runs it with
    (`default-shell`: a nologin, a shell since removed) is the usual reason."""
    import libtmux

    res = libtmux.Server().cmd("show-options", "-gv", "default-shell")
    shell = one_line(res.stdout[0].strip()) if res.returncode == 0 and res.stdout else ""
    said = "its tmux pane closed before it wrote a line"
    return f"{said}; the tmux server runs panes with default-shell {shell}" if shell else said


def _ready(record: RunRecord, token: str) -> int | None:
    try:
        pid, said = (record.dir / READY).read_text().split()
    except (OSError, ValueError):
        return None
    return int(pid) if said == token and pid.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] not in (["Z"], ["X"])


def last_words(log: Path, start: int) -> str:
    """The last line the watcher wrote, bounded and printable: its reason, mostly."""
    try:
        with open(log, "rb") as fh:
            fh.seek(max(start, log.stat().st_size - 4096))
            data = fh.read(4096)
    except OSError:
        return ""
    lines = [ln.strip() for ln in data.decode(errors="replace").splitlines() if ln.strip()]
    return one_line(lines[-1], 300) if lines else ""
