"""The coordinator's notifications: sent from the main node when it decides, the
webhook posted and the user's `notify.command` run here.

Why here: the coordinator decides while the machine that launched the run may sleep
for hours; its notice must not wait for that machine. A notice is a courtesy and a
teardown is not, so nothing here may delay the judge or the kill: `send` only queues
(a bounded queue: a flood is cut, never queued for hours), one daemon thread delivers,
the command running while the webhook is posted, both within the rules' deadline
whatever the server or the command does (webhookpost.py, notifycommand.py: its group
killed at the deadline, its last words in the coordinator's log). What became of each
notice is kept in `coord/notify.json` (the latest KEEP, atomic) and journaled: the
manager reads it at its next contact and posts, once, the webhook that could not be
posted from here (a main that cannot reach the webhook's host; a coordinator that died
first) (watch/clusternotify.py). A command runs here or not at all: the manager may
be a laptop asleep, and the line is the main node's now (docs/watchdog.md). A notice
keeps one id from here to there: the manager's claim on it is what makes it posted
exactly once. The id is the decision's (its run, attempt and event), not a random one:
a coordinator started again that takes the same decision again finds its id kept and
sends nothing, and the manager's claim on that id holds for both.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

from mntui.sessions.node.rules.notifyhook import NotifyRules, redact, webhook_body
from mntui.sessions.node.rules.notifytext import (
    ABANDONED,
    DROPPED,
    ENTRY_TEXT,
    FAILED,
    OFF,
    PENDING,
    SENT,
    Notice,
    NotifyEvent,
    WebhookState,
    clean,
    entry_of,
    failed_summary,
    one_line,
)
from mntui.sessions.node.rules.restarts import AttemptEnd, Decision
from mntui.sessions.node.rules.termsafe import clean as plain
from mntui.sessions.node.rules.webhookpost import post_once

from . import notifycommand
from .chainnotices import Ended, said
from .notifykept import FILE, KEEP, WHY_TEXT, earlier

QUEUE = 8  # notices waiting at most, fewer than KEEP; one more is dropped (the manager sends it)
RETRY_DELAY = 1.0


class Writer(Protocol):
    """What the outbox needs of the coordinator's board (coordstate.Board)."""

    out: str
    run: str  # the current attempt's run id
    attempt: int  # and its number in the chain

    def write(self, name: str, data: dict[str, Any]) -> None: ...
    def journal(self, kind: str, node: str | None, **data: Any) -> None: ...


class Outbox:
    def __init__(self, rules: NotifyRules | None, job: str, most: int, board: Writer) -> None:
        """`most`: restart.max (a restart's "attempt k/most")."""
        self.rules, self.job, self.most_restarts, self.board = rules, job, most, board
        self.lock = threading.Lock()
        self.entries: list[dict[str, Any]] = earlier(os.path.join(board.out, FILE))
        self.queue: queue.Queue[tuple[str, Notice]] = queue.Queue(QUEUE)
        self.idle = threading.Event()  # nothing queued or being posted
        self.idle.set()
        self.saving = threading.Lock()  # one write of the file at a time, the latest last
        self.worker: threading.Thread | None = None
        if self.entries:
            self._save()  # a predecessor's pending notices: abandoned, the manager's now

    def send(self, event: NotifyEvent, run: str, summary: str, k: int, key: str = "") -> str | None:
        """Keeps the notice and queues its POST; returns its id (None: not for the
        rules' events). `k`: the attempt of `run` it is about; `key`: what tells apart
        two notices of one event in one attempt. A notice whose id is kept already (a
        coordinator started again, deciding again) is not sent again. Returns at once
        and never raises."""
        r = self.rules
        if r is None or str(event) not in r.on:
            return None
        nid = notice_id(run, k, event, key)
        notice = Notice(event, self.job, run, clean(summary)[:ENTRY_TEXT])  # as kept
        state = PENDING if r.webhook else OFF
        if not self._record(entry_of(notice, nid, time.time()), state):
            return nid
        if r.webhook or r.command:
            try:
                self.queue.put_nowait((nid, notice))
            except queue.Full:
                self._not_delivered(nid, notice, DROPPED, f"more than {QUEUE} notices waiting")
                return nid
            self._ensure_worker()
        return nid

    def _ensure_worker(self) -> None:
        with self.lock:
            self.idle.clear()
            if self.worker is not None:
                return  # it takes this one before it leaves (`_work`, under the lock)
            self.worker = threading.Thread(target=self._work, name="notify", daemon=True)
            try:
                self.worker.start()
            except RuntimeError:  # no thread: the manager sends them
                self.worker = None
                self.idle.set()
                started = False
            else:
                started = True
        if not started:
            self._drain_unsent("no thread to send with")
            self._abandon_pending("no thread to send with")

    def _work(self) -> None:
        while True:
            try:
                nid, notice = self.queue.get(timeout=0.2)
            except queue.Empty:
                with self.lock:
                    if self.queue.empty():
                        self.worker = None
                        self.idle.set()
                        return
                continue
            try:
                self._deliver(nid, notice)
            except Exception as exc:  # a bug here must not end the later notices
                self._not_delivered(nid, notice, FAILED, f"{type(exc).__name__}: {exc}")

    def _deliver(self, nid: str, notice: Notice) -> None:
        """The command runs while the webhook is posted, both within the rules' timeout."""
        r = self.rules
        assert r is not None
        deadline = time.monotonic() + r.timeout
        running: notifycommand.Running | str | None = None
        if r.command:
            env = notifycommand.command_env(notice, os.environb)
            running = notifycommand.start(r.command, env, os.path.expanduser("~"))
        if r.webhook:
            try:
                why = self._post(notice)
            except Exception as exc:  # the command is still finished below
                why = f"{type(exc).__name__}: {exc}"
            self._outcome(nid, SENT if why is None else FAILED, why)
        if isinstance(running, str):
            self._ran(nid, notice, running, "")
        elif running is not None:
            ended = notifycommand.finish(running, deadline - time.monotonic(), r.timeout)
            self._ran(nid, notice, ended.problem, ended.output)

    def _ran(self, nid: str, notice: Notice, problem: str | None, output: str) -> None:
        """What became of a notice's command: journaled, and in the coordinator's log
        with its last words (node text: controls stripped, bounded by notifycommand)."""
        said = one_line(problem, WHY_TEXT) if problem is not None else None
        self.board.journal("notify-command", None, id=nid, event=str(notice.event), why=said)
        print(f"notify: command for {notice.event} ({nid}): {said or 'exited 0'}", flush=True)
        for line in plain(output).strip("\n").split("\n") if output.strip() else ():
            print(f"notify: | {line}", flush=True)

    def _not_delivered(self, nid: str, notice: Notice, state: WebhookState, why: str) -> None:
        """A notice that was never delivered: its webhook's state, and its command said."""
        self._outcome(nid, state, why)
        if self.rules is not None and self.rules.command:
            self._ran(nid, notice, f"command not run: {why}", "")

    def _post(self, notice: Notice) -> str | None:
        """One POST, and one retry when no connection could be made and time is left,
        both within the rules' timeout; None when it was answered 2xx."""
        r = self.rules
        assert r is not None and r.webhook is not None
        deadline = time.monotonic() + r.timeout
        body = webhook_body(notice)
        failed = post_once(r.webhook, body, r.timeout)
        if failed is not None and failed[1] and deadline - time.monotonic() > RETRY_DELAY:
            time.sleep(RETRY_DELAY)
            failed = post_once(r.webhook, body, deadline - time.monotonic())
            if failed is not None:
                failed = (f"{failed[0]} (retried once)", False)
        return None if failed is None else f"webhook {redact(r.webhook)}: {failed[0]}"

    def close(self, timeout: float | None = None) -> None:
        """Before the coordinator exits (its daemon thread with it): waits at most
        `timeout` s (default: two deliveries, a teardown's and its chain's end); what
        never started is then abandoned, the manager's to send, and the POST under way
        is waited for (its own deadline bounds it): a POST cut off by the exit might
        have arrived, and the manager's would be a second."""
        r = self.rules
        if timeout is None:
            timeout = 2 * r.timeout + 1.0 if r is not None else 0.0
        self.idle.wait(timeout)
        self._drain_unsent(f"still waiting when the coordinator exited ({timeout:g} s)")
        if r is not None and not self.idle.wait(r.timeout + 1.0):
            self._abandon_pending("still being posted when the coordinator exited")

    def _drain_unsent(self, why: str) -> None:
        """The notices queued and not started: abandoned."""
        while True:
            try:
                nid, notice = self.queue.get_nowait()
            except queue.Empty:
                return
            self._not_delivered(nid, notice, ABANDONED, why)

    def _abandon_pending(self, why: str) -> None:
        with self.lock:
            pending = [e["id"] for e in self.entries if e.get("webhook") == PENDING]
        for nid in pending:
            self._outcome(nid, ABANDONED, why)

    def _record(self, entry: dict[str, Any], state: WebhookState) -> bool:
        """A new notice kept; False (nothing kept) when its id is kept already."""
        with self.lock:
            if any(e["id"] == entry["id"] for e in self.entries):
                return False
            self.entries = [*self.entries, {**entry, "webhook": state.value, "why": None}][-KEEP:]
        self.board.journal("notice", None, id=entry["id"], event=entry["event"], webhook=state)
        self._save()
        return True

    def _outcome(self, nid: str, state: WebhookState, why: str | None) -> None:
        why = one_line(why, WHY_TEXT) if why is not None else None
        with self.lock:
            for e in self.entries:
                if e["id"] == nid and e.get("webhook") in (PENDING, None):
                    e.update(webhook=state.value, why=why, done_at=time.time())
                    event = e.get("event")  # which notice: `status` says it
                    break
            else:
                return
        self.board.journal("notified", None, id=nid, webhook=state, why=why, event=event)
        self._save()

    def _save(self) -> None:
        with self.saving:
            with self.lock:
                data = {"v": 1, "notices": [dict(e) for e in self.entries]}
            self.board.write(FILE, data)

    def decided(
        self,
        out: Ended,
        end: AttemptEnd,
        d: Decision | None,
        k: int,
        held: Sequence[tuple[str, str]] = (),
        stop: str | None = None,
    ) -> None:
        """Attempt `k`'s end, told as chainnotices.said words it (for the attempt's run)."""
        for event, text, key in said(self.job, self.most_restarts, out, end, d, k, held, stop):
            self.send(event, self.board.run, text, k, key)

    def slow(self, text: str) -> None:
        """A straggler named, or a node slow for `slow_after`: told once, never a kill
        (the same words again in the attempt, from a coordinator started again: once)."""
        self.send(NotifyEvent.SLOW, self.board.run, text, self.board.attempt, key=text)

    def not_started(self, why: str, k: int) -> None:
        """A restart that did not start ends the chain on the cluster: a failure."""
        self.send(NotifyEvent.FAILED, self.board.run, failed_summary(why), k)


def notice_id(run: str, k: int, event: NotifyEvent, key: str = "") -> str:
    """A notice's id, from what it is about: one decision, one id, whoever takes it."""
    what = "\0".join((run, str(k), event.value, key)).encode("utf-8", "surrogateescape")
    return hashlib.sha256(what).hexdigest()[:16]
