"""The user's `notify.command`, run for one notice: its environment, its deadline, its
last words.

Why in the node package: the coordinator runs it on the main node when it decides
(notifysend.py), while the machine that launched the run may sleep; the manager's own
notifier (sessions/notify/notifier.py) runs a command by the same steps. The notice
reaches the command through its environment only (MNTUI_EVENT, MNTUI_JOB,
MNTUI_RUN_ID, MNTUI_SUMMARY, MNTUI_REPORT), never through its shell line, which is the
user's own; without the job's tag (the next kill of the job would count it as one of
the job's processes) and the run dir's. It runs in a session of its own, so a deadline
kills all it started, and what it printed is kept to its last OUTPUT bytes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO

from mntui.sessions.node.rules.notifytext import Notice, raw

OUTPUT = 2000  # bytes of a command's output kept: its last words
KILL_WAIT = 5.0  # seconds for a command's group to go after its SIGKILL
_NOT_FOR_COMMANDS = frozenset({b"MNTUI_RUN", b"MNTUI_RUN_DIR"})


def command_env(notice: Notice, base: Mapping[bytes, bytes]) -> dict[bytes, bytes]:
    env = {k: v for k, v in base.items() if k not in _NOT_FOR_COMMANDS}
    env[b"MNTUI_EVENT"] = str(notice.event).encode()
    env[b"MNTUI_JOB"] = raw(notice.job)
    env[b"MNTUI_RUN_ID"] = raw(notice.run_id)
    env[b"MNTUI_SUMMARY"] = raw(notice.summary)
    env[b"MNTUI_REPORT"] = raw(notice.report_path or "")
    return env


@dataclass(frozen=True)
class Running:
    proc: subprocess.Popen[bytes]
    out: IO[bytes]  # its stdout and stderr, a temp file: read back at the end


@dataclass(frozen=True)
class Ended:
    problem: str | None  # None: it exited 0
    output: str  # its last OUTPUT bytes, as text (node data: the reader bounds and strips)


def start(command: str, env: Mapping[bytes, bytes], cwd: str | None = None) -> Running | str:
    """`sh -c COMMAND` started; or why it did not, in one line."""
    out = tempfile.TemporaryFile()  # noqa: SIM115 - closed by finish, or below
    try:
        proc = subprocess.Popen(
            ["sh", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,  # its own process group: a deadline kills it all
        )
    except (OSError, ValueError) as exc:
        out.close()
        return f"command did not start: {exc}"
    return Running(proc, out)


def finish(running: Running, left: float, timeout: float) -> Ended:
    """Waits `left` s at most, then kills the command's group (`timeout`: the deadline's
    length, said); what became of it. Closes its output."""
    proc = running.proc
    try:
        try:
            code = proc.wait(timeout=max(0.0, left))
        except subprocess.TimeoutExpired:
            try:  # not reaped yet, so its pid is still its group's id: killpg hits only it
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                proc.wait(timeout=KILL_WAIT)
            except subprocess.TimeoutExpired:
                return Ended(f"command pid {proc.pid} did not die after SIGKILL", _tail(running))
            return Ended(f"command still running after {timeout:g}s: killed", _tail(running))
        if code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
            return Ended(f"command {how}", _tail(running))
        return Ended(f"command exited {code}" if code else None, _tail(running))
    finally:
        running.out.close()


def _tail(running: Running) -> str:
    out = running.out
    try:
        end = out.seek(0, os.SEEK_END)
        out.seek(max(0, end - OUTPUT))
        return out.read().decode("utf-8", "replace")
    except OSError:
        return ""
