"""One injected hang of bench/hangs.py: launch the job, hang one rank, wait for the
coordinator's decision and the report the first look after it saves, and score it.

The job is tests/jobs/hang_train.py under real torchrun (gloo, CPU, one rank a node) on
real sshd nodes (tests/fakecluster.py), watched by the cluster (its sentinels and its
coordinator, `mntui launch --no-ui`), with short watch settings so a hang takes
seconds. In-job hangs (sleep, busy, lock, barrier) print `hang: <how> at <time>` just
before; SIGSTOP is done here. (A node's sshd stopped is no hang to the cluster's watch:
only this machine loses the node.) Everything of the job is cleaned up by tag
afterwards (chaos_job).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from benchlib import Deadline, torchrun_job
from fakecluster import FakeCluster, alive, cmdline, free_port, pids_with_env, tagged

from mntui.sessions.errors import state_dir
from mntui.sessions.runs import RunRecord, load_run

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "tests" / "jobs" / "hang_train.py"
IN_JOB = ("sleep", "busy", "lock", "barrier")
KINDS = (*IN_JOB, "sigstop")
CLI = [sys.executable, "-m", "mntui.tui.cli"]
INTERVAL = 0.3  # the job's sleep between steps
STALL = 10  # watch.stall_after when not auto: seconds without output (the sentinels judge
# from the ranks' start: torch's init on a loaded machine outlasted 4 s)


T = TypeVar("T")


def until(cond: Callable[[], T], timeout: float, dl: Deadline, interval: float = 0.2) -> T | None:
    """`cond`'s first truthy value within `timeout` (and the hang's own deadline)."""
    end = min(time.monotonic() + timeout, dl.end)
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= end:
            return None
        time.sleep(interval)


@dataclass(frozen=True)
class Plan:
    index: int
    kind: str
    nodes: int  # 2 or 4
    rank: int  # the culprit (one rank a node: its node is node<rank>)
    step: int  # the step at which an in-job hang starts
    auto: bool  # watch.stall_after: auto instead of STALL

    def describe(self) -> str:
        return (
            f"#{self.index} {self.kind} rank {self.rank}/{self.nodes}{' auto' if self.auto else ''}"
        )


@dataclass
class Result:
    plan: Plan
    job: str = ""  # the job's name: its run records are under the state dir by it
    named: bool = False  # the report's first culprit is exactly the injected rank and node
    named_as: str = ""
    decided_s: float | None = None  # injection -> the coordinator's decision
    report_s: float | None = None  # decision -> its evidence saved (the sentinels' stacks)
    final_s: float | None = None  # decision -> the kill ended (decision.json's ended_at)
    capture_s: float | None = None  # stacks and Flight Recorder dumps, before the kill
    kill_s: float | None = None  # the kill, after the capture
    threshold: float | None = None  # the stall threshold in force (auto: learnt)
    headline: str = ""
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    retried: str | None = None  # a first try's harness error before the injection


def job_yaml(fc: FakeCluster, work: Path, job: str, plan: Plan) -> str:
    names = [n.name for n in fc.nodes[: plan.nodes]]
    args = f"--interval {INTERVAL} --timeout 600"
    if plan.kind in IN_JOB:
        args += f" --hang-rank {plan.rank} --hang-step {plan.step} --how {plan.kind}"
    stall = "auto" if plan.auto else STALL
    return "\n".join([
        *torchrun_job(job, names, work, f"hang_train.py {args}"),
        f"watch: {{where: cluster, port: {free_port()}, stall_after: {stall}, on_stall: kill_all,"
        " frozen_after: 2, unreachable_after: 4, capture_budget: 10}",
        f"ssh: {{config: {fc.ssh_config}, connect_timeout: 5}}",
    ]) + "\n"  # fmt: skip


class HarnessError(RuntimeError):
    """The job could not be brought to the point of the hang (a launch that failed on a
    loaded machine): not a verdict on mntui, so the campaign tries that hang once more."""


class HangRun:
    def __init__(self, fc: FakeCluster, root: Path, plan: Plan, retry: bool = False) -> None:
        self.fc, self.plan = fc, plan
        self.job = f"h{plan.index:02d}{plan.kind.replace('-', '')[:5]}{'r' if retry else ''}"
        work = root / "work"
        work.mkdir(exist_ok=True)
        shutil.copy(JOB, work / "hang_train.py")
        self.cfg = root / f"{self.job}.yaml"
        self.cfg.write_text(job_yaml(fc, work, self.job, plan))
        self.node = fc.nodes[plan.rank].name
        self.out = Result(plan, self.job)
        self.harness = False  # the error was the harness's, before any hang

    def mntui(self, *args: str, timeout: float = 150) -> int:
        import subprocess

        res = subprocess.run([*CLI, "-c", str(self.cfg), *args], capture_output=True, text=True,
                             timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip
        if res.returncode != 0:
            self.out.notes.append(f"mntui {args[0]} exited {res.returncode}: {res.stderr[-300:]}")
        return res.returncode

    def record(self) -> RunRecord | None:
        try:
            run_id = (state_dir() / self.job / "latest").read_text().strip()
        except OSError:
            return None
        return load_run(self.job, run_id)

    def run_dir(self, rec: RunRecord, node: str) -> Path:
        return self.fc.node(node).home / ".mntui" / "runs" / self.job / rec.run_id / node

    def log(self, rec: RunRecord, node: str) -> str:
        try:
            return (self.run_dir(rec, node) / "output.log").read_text(errors="replace")
        except OSError:
            return ""

    def decision(self, rec: RunRecord) -> dict[str, Any] | None:
        """The coordinator's decision on the main, once its kill ended (`ended_at`)."""
        d = _read_json(self.run_dir(rec, rec.main.node) / "coord" / "decision.json")
        return d if d is not None and "ended_at" in d else None

    def saved(self, rec: RunRecord) -> dict[str, Any] | None:
        """The report a look saves once the coordinator ended (watch/mirror.py)."""
        self.mntui("report")
        return _read_json(rec.dir / "report.json")

    def training(self, steps: int = 2) -> RunRecord | None:
        rec = self.record()
        if rec is None or rec.status.value != "running":
            return None
        counts = [len(re.findall(r"(?m)^step \d+ ", self.log(rec, n.node))) for n in rec.nodes]
        return rec if all(c >= steps for c in counts) else None

    def where(self) -> str:
        """For a harness error: the run's status and each node's steps so far."""
        rec = self.record()
        if rec is None:
            return "no run record"
        steps = {
            n.node: len(re.findall(r"(?m)^step \d+ ", self.log(rec, n.node))) for n in rec.nodes
        }
        return f"run {rec.status.value}, steps {steps}"

    def inject(self, rec: RunRecord, dl: Deadline) -> float:
        """The moment the hang began (wall clock)."""
        if self.plan.kind in IN_JOB:
            pat = re.compile(r"(?m)^hang: \w+ at (\d+\.\d+)$")
            found = until(lambda: pat.search(self.log(rec, self.node)), 60, dl, 0.1)
            if found is None:
                raise RuntimeError(f"rank {self.plan.rank} never reached its hang")
            return float(found[1])
        if self.plan.kind == "sigstop":
            tag = re.escape(f"{self.job}/{rec.run_id}/{self.node}")
            pids = [p for p in alive(pids_with_env(f"MNTUI_RUN={tag}"))
                    if "hang_train.py" in cmdline(p) and "torch.distributed.run" not in cmdline(p)]  # fmt: skip
            if not pids:
                raise RuntimeError(f"no worker on {self.node}")
            os.kill(pids[0], signal.SIGSTOP)
            return time.time()
        raise RuntimeError(f"no such hang: {self.plan.kind}")

    def run(self, limit: float) -> Result:
        dl = Deadline(limit)
        try:
            if self.mntui("launch", "--no-ui") != 0:
                raise HarnessError("launch failed: " + " ".join(self.out.notes[-1:]))
            rec = until(self.training, 120, dl, 0.3)
            if rec is None:
                raise HarnessError(f"the job never trained: {self.where()}")
            injected = self.inject(rec, dl)
            decision = until(lambda: self.decision(rec), limit, dl, 0.2)
            if decision is None:
                raise RuntimeError("no decision")
            report = until(lambda: self.saved(rec), 60, dl, 0.5)
            if report is None:
                raise RuntimeError("no report")
            self.score(rec, report, decision, injected)
        except Exception as exc:  # a harness failure: logged, cleaned up, next hang
            self.out.error = f"{type(exc).__name__}: {exc}"
            self.harness = isinstance(exc, HarnessError)
        finally:
            self.cleanup()
        return self.out

    def score(
        self, rec: RunRecord, report: dict[str, Any], decision: dict[str, Any], injected: float
    ) -> None:
        out = self.out
        out.headline = str(report.get("headline", ""))
        culprits = report.get("culprits") or []
        first = culprits[0] if culprits else {}
        ranks, nodes = list(first.get("ranks", [])), list(first.get("nodes", []))
        out.named_as = f"ranks {ranks} nodes {nodes} ({first.get('role', 'none')})"
        out.named = ranks == [self.plan.rank] and nodes == [self.node]
        decided = float(decision["decided_at"])
        out.decided_s = decided - injected
        out.final_s = float(decision["ended_at"]) - decided
        took = [_read_json(self.run_dir(rec, n.node) / "stacks.json") for n in rec.nodes]
        seconds = [float(t["seconds"]) for t in took if t and isinstance(t.get("seconds"), float)]
        out.capture_s = max(seconds) if seconds else None
        out.report_s = out.capture_s  # the evidence the report reads, saved before the kill
        out.kill_s = out.final_s - out.capture_s if out.capture_s is not None else None
        out.threshold = self.learnt(rec)

    def learnt(self, rec: RunRecord) -> float | None:
        """The stall threshold the coordinator journaled last (`stall_after: auto`)."""
        try:
            lines = (self.run_dir(rec, rec.main.node) / "coord" / "journal.jsonl").read_text()
        except OSError:
            return None
        seen = None
        for line in lines.splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if isinstance(e, dict) and e.get("kind") == "stall-threshold":
                seen = e.get("data", {}).get("seconds")
        return float(seen) if isinstance(seen, (int, float)) else None

    def cleanup(self) -> None:
        self.mntui("kill")  # the coordinator's too, if it still runs
        for pid in tagged(self.job):
            _signal(pid, signal.SIGCONT)
            _signal(pid, signal.SIGKILL)
        for node in self.fc.nodes:
            for name in node.sessions():
                if name.startswith(f"mntui-{self.job}") or self.job in name:
                    node.tmux("kill-session", "-t", f"={name}")
        end = time.monotonic() + 10
        while tagged(self.job) and time.monotonic() < end:
            time.sleep(0.1)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
