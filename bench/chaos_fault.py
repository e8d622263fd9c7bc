"""One fault of the chaos campaign, from launch to the checks: the steps every kind shares
(launch, wait for training, let the chain settle, a user's kill, the invariants).

What each kind does in between is bench/chaos_kinds.py's. A fault that ends by itself is
checked as it ended ("at the end"), before anything of ours touches it: a self-failure
that leaves sessions behind must show. If anything is left, the user's next step follows
(`mntui kill`) and everything is checked again ("after mntui kill").
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from chaos_checks import (
    TERMINAL,
    Entry,
    Violation,
    check_chain,
    check_files,
    check_no_restart_after,
    check_port,
    check_processes,
    check_sessions,
    snapshot_tree,
)
from chaos_job import Deadline, FaultTimeout, Job, Profile, until
from fakecluster import FakeCluster

from mntui.sessions.runs import RunRecord

SETTLE = 120.0  # seconds for a chain to end or come back after a fault
ENDED = 45.0  # seconds for a chain to end after a user's kill


class HarnessError(Exception):
    """The harness could not set the fault up (a launch that failed, no supervisor...)."""


@dataclass(frozen=True)
class FaultPlan:
    """One fault, drawn from the seed before the campaign starts."""

    index: int
    kind: str
    profile: Profile
    pick: float  # which node of the attempt: int(pick * len(nodes))
    delay: float  # seconds: Ctrl+C after the launch starts; into the backoff
    moment: str = ""  # supervisor-kill: watching | backoff | relaunch; client-drop: how
    then: str = ""  # supervisor-kill: kill | resume
    fail_step: int = 4

    def describe(self) -> str:
        extra = "/".join(x for x in (self.moment, self.then) if x)
        return f"#{self.index} {self.kind} ({self.profile.value}{', ' + extra if extra else ''})"


@dataclass
class Outcome:
    plan: FaultPlan
    job: str
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    runs: int = 0
    took: float = 0.0
    error: str | None = None
    times: dict[str, float] = field(default_factory=dict)  # seconds: decision, down, ...


class Fault:
    def __init__(self, fc: FakeCluster, root: Path, plan: FaultPlan, job: Job, limit: float):
        self.fc, self.root, self.plan, self.job = fc, root, plan, job
        self.dl = Deadline(limit)
        self.out = Outcome(plan, job.job)
        self.no_restart_since: tuple[float, str] | None = None
        self.homes: dict[str, dict[str, Entry]] = {n.name: snapshot_tree(n.home) for n in fc.nodes}

    # -- what happened ------------------------------------------------------------------
    def say(self, text: str) -> None:
        self.out.notes.append(text)
        print(f"    {self.plan.index}: {text}", file=sys.stderr, flush=True)

    def bad(self, found: list[Violation], phase: str) -> None:
        for v in found:
            v = Violation(v.invariant, v.node, v.detail, phase)
            self.out.violations.append(v)
            print(f"    {self.plan.index}: VIOLATION {v.line()}", file=sys.stderr, flush=True)

    # -- shared steps -------------------------------------------------------------------
    def launch(self) -> None:
        res = self.job.mntui("launch", "--no-ui")
        if res.returncode != 0:
            raise HarnessError(f"launch exited {res.returncode}: {last_line(res.stderr)}")

    def target(self) -> tuple[RunRecord, str]:
        """Launch, wait until the attempt to hit trains (the spare's, in a spare chain),
        and pick its node."""
        self.launch()
        first = 2 if self.plan.profile is Profile.SPARE else 0
        rec = until(lambda: self.job.training(first), 150 + 60 * first, self.dl, 0.3)
        if rec is None:
            now = self.job.latest()
            where = f"{now.attempt} {now.status.value}" if now else "none"
            raise HarnessError(f"attempt {first} never trained (latest: {where})")
        names = [n.node for n in rec.nodes]
        return rec, names[min(len(names) - 1, int(self.plan.pick * len(names)))]

    def reach(self, moment: str) -> RunRecord:
        """`watching`: the attempt to hit trains. `backoff`: `delay` s into the first
        backoff (the job fails by itself; delay < backoff). `relaunch`: `delay / 3` s
        past the backoff's end, in the relaunch (about a second here)."""
        if moment not in ("backoff", "relaunch"):
            return self.target()[0]
        self.launch()

        def restarting() -> RunRecord | None:
            rec = self.job.latest()
            return rec if rec is not None and rec.status.value == "restarting" else None

        rec = until(restarting, 180, self.dl, 0.05)
        if rec is None:
            raise HarnessError(f"the chain never reached its backoff: {self.where()}")
        wait = self.plan.delay if moment == "backoff" else self.job.backoff + self.plan.delay / 3
        until(lambda: False, wait, self.dl, 0.02)
        return rec

    def settle(self, attempt: int) -> str:
        """`ended` (latest run terminal, its supervisor gone), `recovered` (a later
        attempt trains) or `stuck`."""

        def state() -> str | None:
            rec = self.job.latest()
            if rec is None:
                return None
            if rec.status in TERMINAL and self.job.supervisor() is None:
                return "ended"
            return "recovered" if self.job.training(attempt + 1) else None

        return until(state, SETTLE, self.dl, 0.3) or "stuck"

    def finish(self, attempt: int, exempt: str | None = None) -> None:
        """After a fault: let the chain settle; if it ended by itself, check it as it
        is; then, if anything is left or it goes on, the user's kill, and check again."""
        state = self.settle(attempt)
        self.say(f"chain {state}: {self.where()}")
        if state == "stuck":
            self.bad([Violation("settle", None, f"neither ended nor recovered in {SETTLE:g}s: "
                                f"{self.where()}")], "after the fault")  # fmt: skip
        if state == "ended" and not self.check("at the end", exempt=exempt) and exempt is None:
            return  # (an exempt node's leftovers are the user's kill's: README)
        self.user_kill()

    def user_kill(self, *nodes: str, need_record: bool = True) -> None:
        """`need_record`: False where the fault may have come before the launch recorded
        its run (a Ctrl+C): no record is then what a right launch leaves."""
        t0 = time.time()
        res = self.job.mntui("kill", *nodes)
        what = f"`mntui kill{' ' + ' '.join(nodes) if nodes else ''}`"
        self.say(f"{what} exit {res.returncode}: {last_line(res.stdout + res.stderr)}")
        if nodes:
            return
        self.no_restart_since = self.no_restart_since or (time.time(), what)
        self.after_kill(t0, need_record)

    def after_kill(self, t0: float, need_record: bool = True) -> None:
        """The chain ends, and stays ended through a backoff's length."""
        ok = until(self.ended, ENDED, self.dl, 0.3)
        if ok is None:
            self.say(f"not ended {ENDED:g}s after the kill: {self.where()}")
        if self.plan.profile is not Profile.PLAIN:  # a restart would come after its backoff
            since = self.no_restart_since[0] if self.no_restart_since else t0
            until(lambda: [r for r in self.job.records() if r.created_at > since], 6, self.dl)
        self.check("after mntui kill", need_record=need_record)

    def check(self, phase: str, exempt: str | None = None, need_record: bool = True) -> bool:
        """The invariants now; True if any failed. `exempt`: a node whose leftovers are
        documented (a teardown could not reach it: `mntui kill` finishes it there)."""
        recs = self.job.records()
        nodes = [n.name for n in self.fc.nodes if n.name != exempt]
        found = check_processes(self.job.job, nodes)
        found += check_port(self.job.port) if exempt is None else []
        found += check_sessions({n: s for n, s in self.job.sessions().items() if n != exempt})
        found += check_chain(recs) if recs or need_record else []
        if self.no_restart_since is not None:
            found += check_no_restart_after(recs, *self.no_restart_since)
        if exempt is not None:
            self.say(f"{phase}: {exempt} not checked (unreachable at the teardown)")
        self.bad(found, phase)
        return bool(found)

    def check_files(self) -> None:
        for node in self.fc.nodes:
            found = check_files(node.name, self.homes[node.name], snapshot_tree(node.home))
            self.bad(found, "at the end of the fault")

    def ended(self) -> bool:
        rec = self.job.latest()
        return rec is None or (rec.status in TERMINAL and self.job.supervisor() is None)

    def where(self) -> str:
        rec = self.job.latest()
        if rec is None:
            return "no run"
        sup = self.job.supervisor()
        return (f"attempt {rec.attempt} {rec.status.value} on "
                f"{','.join(n.node for n in rec.nodes)}, supervisor {sup or 'gone'}")  # fmt: skip


def signal_each(pids: list[int], sig: int) -> None:
    """`sig` to each of these PIDs (the fault's own targets), one already gone skipped."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "-"


__all__ = ["Fault", "FaultPlan", "FaultTimeout", "HarnessError", "Outcome"]
