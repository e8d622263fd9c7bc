"""Delivering notifications: a webhook POST and/or the user's command, in the background.

A notification is a courtesy and a teardown is not, so nothing here may delay or break
the watchdog: `send` only queues, one daemon thread per Notifier delivers in order, every
delivery is bounded by the policy's timeout whatever the server does (a server that
answers a byte a second is cut off at the deadline, not after each byte), and a failure
becomes one line in the notify log. A notice still queued when mntui exits is said
there too (`close`), never lost silently. What a notice says, and how, is `notices.py`.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from pathlib import Path

from mntui.sessions.node.notice import notifycommand

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
from .webhookpost import post_once

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


class Notifier:
    """Delivers notices in the background, in the order sent; one per watchdog or app."""

    def __init__(self, policy: NotifyPolicy, log_path: Path | None) -> None:
        self.policy, self.log_path = policy, log_path
        self._cond = threading.Condition()
        self._queue: deque[Notice] = deque()
        self._pending = 0  # queued + being delivered
        self._worker: threading.Thread | None = None
        self._current: Notice | None = None  # being delivered
        self._closed = False

    def send(self, notice: Notice) -> None:
        """Returns at once; never raises."""
        if notice.event not in self.policy.on or not self.policy.active:
            return
        problem: str | None = None
        with self._cond:
            if self._closed:
                problem = "not sent: mntui was already exiting"
            elif self._pending >= MAX_PENDING:
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

    def close(self, timeout: float) -> list[Notice]:
        """The last drain, before mntui exits (and its daemon thread with it): waits at
        most `timeout` s, then every notice not delivered is said in the notify log and
        returned, and none is sent after. Without this, a `gave-up` queued behind a slow
        webhook would vanish with the process."""
        self.drain(timeout)
        with self._cond:
            self._closed = True
            left = list(self._queue)
            self._queue.clear()
            self._pending -= len(left)
            current = self._current
            self._cond.notify_all()
        if current is not None:
            self._log(current, f"abandoned: still being delivered at exit ({timeout:g}s drain)")
        for notice in left:
            self._log(notice, f"not delivered: still queued at exit ({timeout:g}s drain)")
        return ([current] if current is not None else []) + left

    def _work(self) -> None:
        while True:
            with self._cond:
                if not self._queue:
                    self._worker = None
                    return
                notice = self._current = self._queue.popleft()
            try:
                self._deliver(notice)
            except Exception as exc:  # a bug here must not kill later notices
                self._log(notice, f"notifier error: {type(exc).__name__}: {exc}")
            finally:
                with self._cond:
                    self._current = None
                    self._pending -= 1
                    self._cond.notify_all()

    def _deliver(self, notice: Notice) -> None:
        """The command runs while the webhook is posted; both within the timeout (the
        command's steps are the coordinator's too: node/notice/notifycommand.py)."""
        deadline = time.monotonic() + self.policy.timeout
        running: notifycommand.Running | None = None
        if self.policy.command:
            started = notifycommand.start(self.policy.command, command_env(notice, os.environb))
            if isinstance(started, str):
                self._log(notice, started)
            else:
                running = started
        if self.policy.webhook:
            self._post(notice, self.policy.webhook, deadline)
        if running is not None:
            left = deadline - time.monotonic()
            ended = notifycommand.finish(running, left, self.policy.timeout)
            if ended.problem is not None:
                said = one_line(ended.output[-300:].strip())
                self._log(notice, ended.problem + (f": {said}" if said else ""))

    def _post(self, notice: Notice, url: str, deadline: float) -> None:
        """One POST, and one retry if no connection could be made and time is left:
        both within the delivery's deadline."""
        reason = check_webhook_url(url)
        if reason is not None:
            self._log(notice, f"webhook not used: {reason}")
            return
        body = webhook_body(notice)
        failed = post_once(url, body, self.policy.timeout)
        if failed is not None and failed[1] and deadline - time.monotonic() > RETRY_DELAY:
            time.sleep(RETRY_DELAY)
            failed = post_once(url, body, deadline - time.monotonic())
            if failed is not None:
                failed = (f"{failed[0]} (retried once)", False)
        if failed is not None:
            self._log(notice, f"webhook {redact(url)}: {failed[0]}")

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
