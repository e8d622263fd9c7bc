"""One fault of the chaos campaign: the steps every kind shares (launch, wait for
training, what happened, the files of every node's home) and its outcome.

What each kind does and checks in between is bench/chaos_cluster.py's.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from chaos_checks import Entry, Violation, check_files, snapshot_tree
from chaos_job import Deadline, FaultTimeout, Job, Profile, until
from fakecluster import FakeCluster

from mntui.sessions.runs import RunRecord


class HarnessError(Exception):
    """The harness could not set the fault up (a launch that failed, a job that never
    trained...)."""


@dataclass(frozen=True)
class FaultPlan:
    """One fault, drawn from the seed before the campaign starts."""

    index: int
    kind: str
    profile: Profile
    pick: float  # which node of the attempt: int(pick * len(nodes))
    delay: float  # seconds: into a partition, before a fault's second step
    moment: str = ""  # a kind's moment, when it has several (chaos_attack.MOMENTS)
    then: str = ""  # what a kind does after it, when it may do several (none has now)
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
        """Launch, wait until the run trains, and pick its node."""
        self.launch()
        rec = until(lambda: self.job.training(0), 150, self.dl, 0.3)
        if rec is None:
            now = self.job.latest()
            where = f"{now.attempt} {now.status.value}" if now else "none"
            raise HarnessError(f"the run never trained (latest: {where})")
        names = [n.node for n in rec.nodes]
        return rec, names[min(len(names) - 1, int(self.plan.pick * len(names)))]

    def check_files(self) -> None:
        for node in self.fc.nodes:
            found = check_files(node.name, self.homes[node.name], snapshot_tree(node.home))
            self.bad(found, "at the end of the fault")


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
