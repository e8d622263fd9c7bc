"""Delivering notifications: a webhook POST and/or the user's command, in the background.

A notification is a courtesy and a teardown is not, so nothing here may delay or break
the watchdog: `send` only queues, one daemon thread per Notifier delivers in order, every
attempt is bounded by the policy's timeout, and a failure becomes one line in the notify
log. What a notice says, and how, is `notices.py`.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from typing import IO

from .notices import (
    ALL_EVENTS,
    Notice,
    NotifyEvent,
    NotifyPolicy,
    check_webhook_url,
    command_env,
    one_line,
    redact,
    webhook_body,
)

__all__ = [
    "ALL_EVENTS",
    "Notice",
    "Notifier",
    "NotifyEvent",
    "NotifyPolicy",
    "check_webhook_url",
    "command_env",
    "webhook_body",
]

MAX_PENDING = 100  # a flood of notices (64 slow nodes) is cut, not queued for hours
RETRY_DELAY = 1.0
KILL_WAIT = 5.0


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirected POST turns into a GET without its body: report it, do not follow."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _why(exc: object, timeout: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g}s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if isinstance(exc, BaseException) else text


def _post_once(url: str, body: bytes, timeout: float) -> tuple[str, bool] | None:
    """None on a 2xx answer, else (why, worth one retry): only when no connection could
    be made or the request could not be sent, so a processed POST is never repeated."""
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "mntui"},
    )
    try:
        with urllib.request.build_opener(_NoRedirect()).open(req, timeout=timeout) as resp:
            resp.read(4096)
    except urllib.error.HTTPError as exc:
        exc.close()
        return f"HTTP {exc.code} {exc.reason}", False
    except urllib.error.URLError as exc:
        return _why(exc.reason, timeout), isinstance(exc.reason, ConnectionError)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return _why(exc, timeout), False
    return None


def _tail(out: IO[bytes], size: int = 300) -> str:
    try:
        end = out.seek(0, os.SEEK_END)
        out.seek(max(0, end - size))
        text = out.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return f": {one_line(text)}" if text else ""


class Notifier:
    """Delivers notices in the background, in the order sent; one per watchdog or app."""

    def __init__(self, policy: NotifyPolicy, log_path: Path | None) -> None:
        self.policy, self.log_path = policy, log_path
        self._cond = threading.Condition()
        self._queue: deque[Notice] = deque()
        self._pending = 0  # queued + being delivered
        self._worker: threading.Thread | None = None

    def send(self, notice: Notice) -> None:
        """Returns at once; never raises."""
        if notice.event not in self.policy.on or not self.policy.active:
            return
        problem: str | None = None
        with self._cond:
            if self._pending >= MAX_PENDING:
                problem = "dropped: too many notifications pending"
            else:
                self._queue.append(notice)
                self._pending += 1
                problem = self._ensure_worker()
        if problem:
            self._log(notice, problem)

    def _ensure_worker(self) -> str | None:
        if self._worker is not None:
            return None
        worker = threading.Thread(target=self._work, name="mntui-notify", daemon=True)
        try:
            worker.start()
        except RuntimeError as exc:  # no thread to be had: drop rather than block
            self._queue.clear()
            self._pending = 0
            self._cond.notify_all()
            return f"dropped: {exc}"
        self._worker = worker
        return None

    def drain(self, timeout: float) -> bool:
        """Wait at most `timeout` s for pending notices; True if none is left."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _work(self) -> None:
        while True:
            with self._cond:
                if not self._queue:
                    self._worker = None
                    return
                notice = self._queue.popleft()
            try:
                self._deliver(notice)
            except Exception as exc:  # a bug here must not kill later notices
                self._log(notice, f"notifier error: {type(exc).__name__}: {exc}")
            finally:
                with self._cond:
                    self._pending -= 1
                    self._cond.notify_all()

    def _deliver(self, notice: Notice) -> None:
        """The command runs while the webhook is posted; both within the timeout."""
        deadline = time.monotonic() + self.policy.timeout
        with contextlib.ExitStack() as stack:
            running = self._start_command(notice, stack) if self.policy.command else None
            if self.policy.webhook:
                self._post(notice, self.policy.webhook)
            if running is not None:
                self._finish_command(notice, *running, deadline)

    def _post(self, notice: Notice, url: str) -> None:
        reason = check_webhook_url(url)
        if reason is not None:
            self._log(notice, f"webhook not used: {reason}")
            return
        body = webhook_body(notice)
        failed = _post_once(url, body, self.policy.timeout)
        if failed is not None and failed[1]:
            time.sleep(RETRY_DELAY)
            failed = _post_once(url, body, self.policy.timeout)
            if failed is not None:
                failed = (f"{failed[0]} (retried once)", False)
        if failed is not None:
            self._log(notice, f"webhook {redact(url)}: {failed[0]}")

    def _start_command(
        self, notice: Notice, stack: contextlib.ExitStack
    ) -> tuple[subprocess.Popen[bytes], IO[bytes]] | None:
        try:
            out = stack.enter_context(tempfile.TemporaryFile())  # noqa: SIM115 - stack closes it
            proc = subprocess.Popen(
                ["sh", "-c", self.policy.command or ""],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=command_env(notice, os.environb),
                start_new_session=True,  # its own process group: a timeout kills it all
            )
        except (OSError, ValueError) as exc:
            self._log(notice, f"command did not start: {exc}")
            return None
        return proc, out

    def _finish_command(
        self, notice: Notice, proc: subprocess.Popen[bytes], out: IO[bytes], deadline: float
    ) -> None:
        try:
            code = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            # Not reaped yet, so its PID is still its group's id: killpg hits only it.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                proc.wait(timeout=KILL_WAIT)
            except subprocess.TimeoutExpired:
                self._log(notice, f"command pid {proc.pid} did not die after SIGKILL")
                return
            self._log(notice, f"command still running after {self.policy.timeout:g}s: killed")
            return
        if code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
            self._log(notice, f"command {how}{_tail(out)}")
        elif code:
            self._log(notice, f"command exited {code}{_tail(out)}")

    def _log(self, notice: Notice, problem: str) -> None:
        if self.log_path is None:
            return
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        line = (
            f"{stamp} {notice.event} job {one_line(notice.job)} run "
            f"{one_line(notice.run_id)}: {one_line(problem, 1000)}\n"
        )
        try:
            self.log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, line.encode("utf-8", "replace"))
            finally:
                os.close(fd)
        except (OSError, ValueError):
            pass
