"""This machine standing by a run the cluster watches: `mntui watch` (and the app, which
hands over to it) looks at the main every interval and, when the main is lost or the
coordinator gave it up (mainloss.py), goes on with the chain from here (mainswap.py).

Why a process of its own, the supervisor's place: the cluster decides everything it
can while this machine may sleep; what it cannot do is replace its own main. A machine
that stays attached (a `mntui watch` in a tmux session here, the app's headless
hand-over) is the one place that can, so it holds the chain's lock as the supervisor
does (one stand-by a chain; `status` knows someone is there), writes what the
coordinator did into the records at each look (as `status` would), and judges nothing
the coordinator judges. Each look costs one `ssh` to the main; the workers are asked
only while the main is silent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mntui.sessions.config import JobConfig
from mntui.sessions.events import Event, Phase
from mntui.sessions.launch import guard_chain, heartbeat
from mntui.sessions.launch.board import BoardView
from mntui.sessions.runs import RunRecord
from mntui.sessions.watch import WatchEnd, WatchOutcome, fresh_steps, keep_steps
from mntui.sessions.watch.detached import note_watching
from mntui.sessions.watch.fromcluster import coordinator_done
from mntui.sessions.watch.mirror import sync
from mntui.sessions.watch.standbyhint import say_waiting

from .chainstate import head, stopped
from .mainlook import read_lost, read_main
from .mainloss import Call, Look, judge_main
from .mainswap import take_over

EventSink = Callable[[Event], None]
LOOK_TIMEOUT = 5.0  # seconds one look at a node may take, its handshake included


class Standby:
    def __init__(self, cfg: JobConfig, record: RunRecord, on_event: EventSink) -> None:
        self.cfg, self.record, self.on_event = cfg, record, on_event
        self.chain: dict[str, Any] | None = None  # chain.json as last read
        self.heard = time.monotonic()  # the main last answered with its coordinator alive
        self.noted = False
        self.waiting: str | None = ""  # what a silent main's look waits for, as last said
        # ("": nothing said yet, so the first look clears an earlier stand-by's reason)
        self.steps: dict[str, dict[str, Any]] = {}  # run id -> its clock, as last read

    def run(self) -> WatchEnd:
        with guard_chain(self.record) as guard:
            if guard is None:
                self._say(f"another process guards chain {self.record.chain}; not standing by")
                return WatchEnd(WatchOutcome.STOOD_DOWN)
            try:
                with heartbeat(guard):
                    return self._run()
            finally:  # its reason goes with it: a later stand-by's status says its own
                say_waiting(self.record, None)

    def _run(self) -> WatchEnd:
        if self.cfg.ssh.password is not None:
            self._say("the nodes need a password: this machine cannot stand by the main")
            return WatchEnd(WatchOutcome.STOOD_DOWN)
        from mntui.sessions.ssh.openssh import oneshot_argv

        ssh = oneshot_argv(self.cfg.ssh)
        main = self.record.main.node
        self._say(f"standing by: the cluster watches; if its main {main} is lost, "
                  "this machine restarts the job on a spare")  # fmt: skip
        while True:
            rec = self.record = head(self.record)
            if stopped(rec) or not (rec.status.is_live or rec.status.may_restart):
                self._say(f"the chain ended ({rec.status}): standing down")
                return WatchEnd(WatchOutcome.STOOD_DOWN)
            view = read_main(rec, ssh, LOOK_TIMEOUT)
            self._heard(view)
            if view is not None and view.status is not None:
                self.record = rec = sync(rec, view)
                self.steps.update(fresh_steps(rec, view))
            silent = time.monotonic() - self.heard
            look = self._look(rec, silent, ssh)
            verdict = judge_main(look)
            if not self.noted:  # the app's hand-over waits for this word (detached.confirm)
                note_watching(rec)
                self.noted = True
            if verdict.call is Call.WATCH:
                self._waiting(rec, verdict.why if look.silent is not None else None)
                time.sleep(max(0.5, self.cfg.watch.interval))
                continue
            if verdict.call is Call.OVER or (verdict.call is Call.LOST and not rec.status.is_live):
                self._say(f"standing down ({rec.status}): {verdict.why}")
                return WatchEnd(WatchOutcome.STOOD_DOWN)
            self._waiting(rec, None)
            self._say(f"the main {main} must be replaced: {verdict.why}")
            lost = main if verdict.call is Call.LOST else None
            if lost is not None:  # no later look will read its clock
                keep_steps(rec, self.steps)
            # given up: the main answers, and every node of the attempt is cleaned again
            heard = [*look.lost, *([main] if view is not None else [])]
            reached = heard if lost is not None else [n.node for n in rec.nodes]
            new = take_over(self.cfg, rec, self.chain, lost, reached, self.on_event)
            if new is None:
                return WatchEnd(WatchOutcome.FAILED)
            self.record, self.chain, self.heard = new, None, time.monotonic()
            main = new.main.node

    def _waiting(self, rec: RunRecord, why: str | None) -> None:
        """Said once a reason (the workers it waits for, one not reached, a malformed
        lost.json), in its log and where `status` reads it (standbyhint.py): a stand-by
        that waits on a silent main says on what, not only that it is there."""
        what = why.split("; ", 1)[-1] if why is not None and "; " in why else None
        if what != self.waiting:
            if what is not None:
                self._say(f"the main is silent, not replaced yet: {what}")
            say_waiting(rec, what)
        self.waiting = what

    def _heard(self, view: BoardView | None) -> None:
        if view is None:
            return
        if view.chain is not None:
            self.chain = view.chain
        if (view.alive and view.fresh) or coordinator_done(view):
            self.heard = time.monotonic()

    def _look(self, rec: RunRecord, silent: float, ssh: list[str]) -> Look:
        after = self.cfg.watch.unreachable_after
        main = rec.main
        workers = sorted((n for n in rec.nodes if n is not main), key=lambda n: n.rank)
        lost, bad = read_lost(rec, workers, ssh, LOOK_TIMEOUT) if silent >= after else ({}, [])
        return Look(
            main=main.node,
            workers=tuple(n.node for n in workers),
            started_at=rec.finished_launch_at or rec.created_at,
            unreachable_after=after,
            silent=silent if silent >= 1.0 else None,
            chain=self.chain,
            lost=lost,
            malformed=tuple(bad),
        )

    def _say(self, text: str) -> None:
        self.on_event(Event(None, None, Phase.NOTICE, text))
