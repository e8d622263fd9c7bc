"""Errors and exit codes shared by the engine, the CLI and the app.

A person at 3 a.m. gets one line that says what is wrong and what to do, never a
traceback: every error meant for them is a MntuiError. A bug is different: its
traceback goes to a local log file (named in the one line), so it is neither lost nor
dumped on the terminal in the middle of a 64-node kill.
"""

from __future__ import annotations

import os
import time
from enum import IntEnum
from pathlib import Path


class ExitCode(IntEnum):
    """One set of numbers for every verb, so scripts can rely on them."""

    OK = 0
    FAILED = 1  # a node failed or is not clean; `status`: a node has a problem
    USAGE = 2  # bad config, flag or node name
    NOT_RUNNING = 3  # `status`: nothing of the job is running
    INTERRUPTED = 130  # Ctrl+C, SIGTERM, SIGHUP: like a shell's 128 + SIGINT
    # `doctor` shares the numbers: a warning is a soft failure, a failed check blocks use.
    DOCTOR_WARN = 1
    DOCTOR_FAIL = 2


class MntuiError(Exception):
    """Something mntui reports to a person as one line."""


class UsageError(MntuiError):
    """The user's input is wrong (a config, a flag, a node name): exit code 2."""


class LaunchError(MntuiError):
    def __init__(self, message: str, details: str = "") -> None:
        self.message, self.details = message, details
        super().__init__(message + ("\n" + details if details else ""))


class LaunchRefused(LaunchError):
    """A launch refused before anything started, for what the user must change (a node
    no sentinel can run on): one line, exit code 2, like a bad config."""


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "mntui"


def private_dir(path: Path) -> Path:
    """Create `path` (and parents) readable by the user alone: run records hold log lines
    and reports."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


def log_exception(where: str, exc: BaseException) -> Path | None:
    """Append `exc`'s traceback to the local error log; returns the log's path, or None
    when even that failed (a full disk must not turn a node's bug into a crash)."""
    import traceback  # a bug's way only: not every command's start

    path = state_dir() / "errors.log"
    try:
        private_dir(path.parent)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as fh:
            fh.write(f"--- {stamp} pid {os.getpid()} {where}\n{text}")
    except OSError:
        return None
    return path
