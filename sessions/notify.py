"""Telling the user that a job ended or needs a look: a webhook POST and/or their command.

A notification is a courtesy and a teardown is not, so nothing here may delay or break
the watchdog: `send` only queues, one daemon thread per Notifier delivers in order, every
attempt is bounded by the policy's timeout, and a failure becomes one line in the notify
log. The summary carries node data (a log's error text): it reaches the user's command
through the environment only, never through the shell line, and chat webhooks get it
with @-mentions defused, so a line printed by a job cannot ping a whole channel.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

from .procs import TAG_VAR

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


class NotifyEvent(StrEnum):
    TEARDOWN = "teardown"  # the watchdog took the job down
    FAILED = "failed"  # a node failed, or the job ended with a non-zero code
    FINISHED = "finished"  # every node exited 0
    RESTART = "restart"  # the job is being relaunched
    GAVE_UP = "gave-up"  # no restarts left
    SLOW = "slow"  # a straggler: below the median rate for a while


ALL_EVENTS = frozenset(NotifyEvent)
MAX_TEXT = 4000  # summary and detail values, in the environment and the JSON
CHAT_TEXT = 1900  # `text`/`content`: Discord refuses more than 2000 characters
MAX_PENDING = 100  # a flood of notices (64 slow nodes) is cut, not queued for hours
RETRY_DELAY = 1.0
KILL_WAIT = 5.0
# A command started from inside a job's pane must not carry the job's tag, or the next
# kill of that job would count it as one of the job's processes.
_NOT_FOR_COMMANDS = frozenset({TAG_VAR.encode(), f"{TAG_VAR}_DIR".encode()})
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


@dataclass(frozen=True)
class NotifyPolicy:
    webhook: str | None = None
    command: str | None = None  # the user's own shell line, run with `sh -c`
    on: frozenset[NotifyEvent] = ALL_EVENTS
    timeout: float = 5.0  # per attempt: one POST, or the whole command

    @property
    def active(self) -> bool:
        return bool(self.webhook or self.command) and bool(self.on)


@dataclass(frozen=True)
class Notice:
    event: NotifyEvent
    job: str
    run_id: str
    summary: str  # one line; may hold node data
    report_path: str | None = None
    details: Mapping[str, str] = field(default_factory=dict)


def check_webhook_url(url: str) -> str | None:
    """None if `url` can be posted to, else why not. The reason never repeats the URL:
    a chat webhook's URL is its password."""
    if _CONTROL.search(url) or any(c.isspace() for c in url):
        return "the URL contains spaces or control characters"
    try:
        parts = urlsplit(url)
        _port = parts.port  # raises on a bad port
    except ValueError as exc:
        return f"not a usable URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return "only http:// and https:// URLs are supported"
    if not parts.hostname:
        return "the URL has no host"
    return None


def _redact(url: str) -> str:
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(unusable URL)"
    return f"{parts.scheme}://{parts.hostname}{port}/…"


def _raw(text: str) -> bytes:
    """Node text back to its bytes (undecodable bytes arrive surrogate-escaped); NUL,
    which no environment can hold, becomes U+FFFD."""
    try:
        data = text[:MAX_TEXT].encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        data = text[:MAX_TEXT].encode("utf-8", "replace")
    return data.replace(b"\0", "\ufffd".encode())


def _clean(text: str) -> str:
    return _raw(text).decode("utf-8", "replace")


def _one_line(text: str, limit: int = 300) -> str:
    return _CONTROL.sub(" ", _clean(text))[:limit]


def _defuse(text: str) -> str:
    """`@everyone`, `@channel`, `<!here>`, `<@U123>` stay readable but ping nobody."""
    return text.replace("@", "@\u200b").replace("<!", "<\u200b!")


def webhook_body(notice: Notice) -> bytes:
    """Slack and Mattermost read `text`, Discord `content`; the rest is for scripts."""
    summary = _clean(notice.summary)
    chat = summary if len(summary) <= CHAT_TEXT else summary[: CHAT_TEXT - 1] + "…"
    body: dict[str, object] = {
        "text": _defuse(chat),
        "content": _defuse(chat),
        "allowed_mentions": {"parse": []},
        "event": str(notice.event),
        "job": _clean(notice.job),
        "run_id": _clean(notice.run_id),
        "summary": summary,
        "report": _clean(notice.report_path) if notice.report_path is not None else None,
        "details": {_clean(k): _clean(v) for k, v in notice.details.items()},
    }
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def command_env(notice: Notice, base: Mapping[bytes, bytes]) -> dict[bytes, bytes]:
    env = {k: v for k, v in base.items() if k not in _NOT_FOR_COMMANDS}
    env[b"MNTUI_EVENT"] = str(notice.event).encode()
    env[b"MNTUI_JOB"] = _raw(notice.job)
    env[b"MNTUI_RUN_ID"] = _raw(notice.run_id)
    env[b"MNTUI_SUMMARY"] = _raw(notice.summary)
    env[b"MNTUI_REPORT"] = _raw(notice.report_path or "")
    return env


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
    return f": {_one_line(text)}" if text else ""


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
            self._log(notice, f"webhook {_redact(url)}: {failed[0]}")

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
            f"{stamp} {notice.event} job {_one_line(notice.job)} run "
            f"{_one_line(notice.run_id)}: {_one_line(problem, 1000)}\n"
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
