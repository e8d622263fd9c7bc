"""One injected hang of bench/hangs.py: launch the job, hang one rank (or stop its node's
sshd), wait for the watchdog's report, and score it.

The job is tests/jobs/hang_train.py under real torchrun (gloo, CPU, one rank a node) on
real sshd nodes (tests/fakecluster.py), watched by the detached watchdog `mntui launch
--no-ui` starts, with short watch settings so a hang takes seconds. In-job hangs (sleep,
busy, lock, barrier) print `hang: <how> at <time>` just before; SIGSTOP and the stopped
sshd are done here. Everything of the job is cleaned up by tag afterwards (chaos_job).
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
from fakecluster import FakeCluster, alive, cmdline, pids_with_env, process_tree, tagged

from mntui.sessions.errors import state_dir
from mntui.sessions.runs import RunRecord, load_run

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "tests" / "jobs" / "hang_train.py"
IN_JOB = ("sleep", "busy", "lock", "barrier")
KINDS = (*IN_JOB, "sigstop", "sshd-stop")
CLI = [sys.executable, "-m", "mntui.tui.cli"]
INTERVAL = 0.3  # the job's sleep between steps
STALL = 4  # watch.stall_after when not auto: seconds without output


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
    decided_s: float | None = None  # injection -> the watchdog's decision
    report_s: float | None = None  # decision -> report.txt written (the kill may still run)
    final_s: float | None = None  # decision -> the kill ended and the report completed with it
    capture_s: float | None = None  # stacks and Flight Recorder dumps, before the kill
    kill_s: float | None = None  # the kill, between the capture and the report
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
        f"watch: {{where: here, stall_after: {stall}, on_stall: kill_all, frozen_after: 2,"
        " unreachable_after: 4, interval: 0.5, capture_budget: 10}",
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
        self.stopped: list[int] = []
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

    def log(self, rec: RunRecord, node: str) -> str:
        path = self.fc.node(node).home / ".mntui" / "runs" / self.job / rec.run_id / node
        try:
            return (path / "output.log").read_text(errors="replace")
        except OSError:
            return ""

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
        sshd = self.fc.node(self.node).proc
        assert sshd is not None
        self.stopped = process_tree(sshd.pid)
        for pid in self.stopped:
            _signal(pid, signal.SIGSTOP)
        return time.time()

    def run(self, limit: float) -> Result:
        dl = Deadline(limit)
        try:
            if self.mntui("launch", "--no-ui") != 0:
                raise HarnessError("launch failed: " + " ".join(self.out.notes[-1:]))
            rec = until(self.training, 120, dl, 0.3)
            if rec is None:
                raise HarnessError(f"the job never trained: {self.where()}")
            injected = self.inject(rec, dl)
            report = until(lambda: _read_json(rec.dir / "report.json"), limit, dl, 0.2)
            if report is None:
                raise RuntimeError("no report")
            self.score(rec, report, injected)
        except Exception as exc:  # a harness failure: logged, cleaned up, next hang
            self.out.error = f"{type(exc).__name__}: {exc}"
            self.harness = isinstance(exc, HarnessError)
        finally:
            self.cleanup()
        return self.out

    def score(self, rec: RunRecord, report: dict[str, Any], injected: float) -> None:
        out = self.out
        out.headline = str(report.get("headline", ""))
        culprits = report.get("culprits") or []
        first = culprits[0] if culprits else {}
        ranks, nodes = list(first.get("ranks", [])), list(first.get("nodes", []))
        out.named_as = f"ranks {ranks} nodes {nodes} ({first.get('role', 'none')})"
        out.named = ranks == [self.plan.rank] and nodes == [self.node]
        end = until(lambda: _teardown_note(self.record()), 30, Deadline(40), 0.2)
        if end is not None:
            out.decided_s = float(end["decided_at"]) - injected
            out.report_s = float(end["report_at"]) - float(end["decided_at"])
            if isinstance(end.get("killed_at"), (int, float)):
                out.final_s = float(end["killed_at"]) - float(end["decided_at"])
            out.capture_s = end.get("stack_seconds")
            out.kill_s = end.get("kill_seconds")
        now = self.record()
        notes = [h for h in (now.history if now else []) if h.get("what") == "stall-threshold"]
        out.threshold = float(notes[-1]["seconds"]) if notes else None

    def cleanup(self) -> None:
        for pid in self.stopped:
            _signal(pid, signal.SIGCONT)
        self.stopped = []
        for pid in tagged(self.job):
            _signal(pid, signal.SIGCONT)
            _signal(pid, signal.SIGKILL)
        for node in self.fc.nodes:
            for name in node.sessions():
                if name.startswith(f"mntui-{self.job}") or self.job in name:
                    node.tmux("kill-session", "-t", f"={name}")
        import subprocess

        from mntui.sessions.launch import watch_session_name

        subprocess.run(["tmux", "kill-session", "-t", f"={watch_session_name(self.job)}"],
                       capture_output=True)  # fmt: skip
        end = time.monotonic() + 10
        while tagged(self.job) and time.monotonic() < end:
            time.sleep(0.1)


def _teardown_note(rec: RunRecord | None) -> dict[str, Any] | None:
    if rec is None:
        return None
    return next((h for h in rec.history if h.get("what") == "watchdog-teardown"), None)


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
