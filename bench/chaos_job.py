"""The chaos campaign's job: its config, the CLI run on it, its run records, waits with
deadlines, and the cleanup by tag after each fault.

The job is tests/jobs/faulty_train.py under real torchrun (gloo, CPU, one rank a node) on
the first nodes of the fake cluster (the last is left out), watched by the cluster (the
one profile, `cluster`: no restart, unless the kind needs one, chaos_attack.RESTARTS). The quarantines a fault leaves (the state dir is the
campaign's) are released after it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

from benchlib import Deadline, torchrun_job
from fakecluster import FakeCluster, alive, cmdline, free_port, pids_with_env, tagged

from mntui.sessions.errors import state_dir
from mntui.sessions.launch import session_name
from mntui.sessions.runs import RunRecord, load_run

REPO = Path(__file__).resolve().parents[1]
FAULTY = REPO / "tests" / "jobs" / "faulty_train.py"
CLI = [sys.executable, "-m", "mntui.tui.cli"]
T = TypeVar("T")


class Profile(StrEnum):
    CLUSTER = "cluster"  # the watch on the cluster (issue 30): bench/chaos_cluster.py


# unreachable_after 5, frozen_after 2; the cluster does not restart (restart.max 0)
CLUSTER_WATCH = ("watch: {{where: cluster, port: {port}, capture_budget: 0, frozen_after: 2, "
                 "unreachable_after: 5}}")  # fmt: skip


class FaultTimeout(Exception):
    """The fault ran past its own deadline: a harness failure, cleaned up by tag."""


def until(cond: Callable[[], T], timeout: float, dl: Deadline, interval: float = 0.2) -> T | None:
    """`cond`'s first truthy value within `timeout`, else None; past the fault's own
    deadline, FaultTimeout."""
    end = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if dl.left() <= 0:
            raise FaultTimeout(f"the fault's {dl.seconds:.0f}s deadline passed")
        if time.monotonic() >= end:
            return None
        time.sleep(interval)


def job_yaml(fc: FakeCluster, work: Path, job: str, args: str, restart: str = "") -> str:
    names = [n.name for n in fc.nodes]
    nodes = names[:-1] if len(names) >= 3 else names
    lines = [
        *torchrun_job(job, nodes, work, f"faulty_train.py --interval 0.3 --timeout 600 {args}"),
        CLUSTER_WATCH.format(port=free_port()),
        f"restart: {{{restart or 'max: 0'}}}",  # a kind's own (chaos_attack.RESTARTS)
        f"ssh: {{config: {fc.ssh_config}, connect_timeout: 5}}",
    ]
    return "\n".join(lines) + "\n"


class Job:
    """One chain of runs of one job name (a fresh name per fault)."""

    def __init__(self, fc: FakeCluster, root: Path, job: str, profile: Profile, args: str = "",
                 restart: str = "") -> None:  # fmt: skip
        self.fc, self.job, self.profile = fc, job, profile
        work = root / "work"
        work.mkdir(exist_ok=True)
        shutil.copy(FAULTY, work / "faulty_train.py")
        self.cfg = root / f"{job}.yaml"
        self.cfg.write_text(job_yaml(fc, work, job, args, restart))
        self.port = int(re.search(r"master_port: (\d+)", self.cfg.read_text())[1])  # type: ignore[index]
        self.started: list[subprocess.Popen[bytes]] = []  # ours: killed by PID at the end
        self.stopped: list[int] = []  # SIGSTOPped sshd trees, SIGCONTed at the end

    # -- the CLI ------------------------------------------------------------------------
    def mntui(self, *args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run([*CLI, "-c", str(self.cfg), *args], capture_output=True,
                                  text=True, timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip
        except subprocess.TimeoutExpired as exc:  # run() has killed it
            out = (
                (exc.stdout or b"").decode(errors="replace")
                if isinstance(exc.stdout, bytes)
                else ""
            )
            return subprocess.CompletedProcess(exc.cmd, 124, out, f"timed out after {timeout}s")

    def popen(self, *args: str, log: Path | None = None) -> subprocess.Popen[bytes]:
        """In a process group of its own, as a terminal's foreground job is (Ctrl+C)."""
        out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - the child's
        proc = subprocess.Popen([*CLI, "-c", str(self.cfg), *args], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # fmt: skip
        self.started.append(proc)
        return proc

    # -- the chain ------------------------------------------------------------------------
    def records(self) -> list[RunRecord]:
        base = state_dir() / self.job
        runs = [load_run(self.job, p.parent.name) for p in base.glob("*/run.json")]
        return sorted((r for r in runs if r), key=lambda r: (r.attempt, r.created_at))

    def latest(self) -> RunRecord | None:
        recs = self.records()
        return max(recs, key=lambda r: r.created_at) if recs else None

    def log(self, rec: RunRecord, node: str) -> str:
        path = self.fc.node(node).home / ".mntui" / "runs" / self.job / rec.run_id / node
        try:
            return str((path / "output.log").read_text(errors="replace"))
        except OSError:
            return ""

    def training(self, min_attempt: int = 0, steps: int = 2) -> RunRecord | None:
        """The latest attempt (at least `min_attempt`) once every node logged `steps`."""
        rec = self.latest()
        if rec is None or rec.attempt < min_attempt or rec.status.value != "running":
            return None
        counts = [len(re.findall(r"(?m)^step \d+ ", self.log(rec, n.node))) for n in rec.nodes]
        return rec if all(c >= steps for c in counts) else None

    def procs(self, rec: RunRecord, node: str, launcher: bool) -> list[int]:
        """Torchrun (launcher) or its workers of `rec` on `node`, by the run's tag."""
        pids = alive(pids_with_env(f"MNTUI_RUN={re.escape(f'{self.job}/{rec.run_id}/{node}')}"))
        train = [p for p in pids if "faulty_train.py" in cmdline(p)]
        return [p for p in train if ("torch.distributed.run" in cmdline(p)) == launcher]

    def sessions(self) -> dict[str, list[str]]:
        """node -> the job's tmux sessions on it (any attempt's, by their recorded names)."""
        names = {session_name(self.job, n.name) for n in self.fc.nodes}
        names |= {nr.session for r in self.records() for nr in r.nodes}
        return {n.name: sorted(set(n.sessions()) & names) for n in self.fc.nodes}

    # -- cleanup by tag -----------------------------------------------------------------
    def cleanup(self) -> list[str]:
        """After the checks: whatever of this job is left, found by tag, PID or recorded
        name, never by process name. What it had to stop is returned for the log."""
        found = []
        for pid in self.stopped:
            _signal(pid, signal.SIGCONT)
        for proc in self.started:
            if proc.poll() is None:
                found.append(f"our mntui pid {proc.pid}")
                _signal(proc.pid, signal.SIGKILL)
                proc.wait(10)
        left = tagged(self.job)
        found += [f"{len(left)} tagged process(es)"] if left else []
        for pid in left:
            _signal(pid, signal.SIGCONT)
            _signal(pid, signal.SIGKILL)
        for node, names in self.sessions().items():
            for name in names:
                found.append(f"session {name} on {node}")
                self.fc.node(node).tmux("kill-session", "-t", f"={name}")
        end = time.monotonic() + 10
        while tagged(self.job) and time.monotonic() < end:
            time.sleep(0.1)
        return found + [f"quarantine of {n}" for n in release_quarantines()]


def release_quarantines() -> list[str]:
    """Every quarantine in the campaign's own state dir (a fault's, by the user or the
    policy): the next fault launches on all the nodes again."""
    from mntui.sessions.history import active_quarantines, release_node

    held = sorted(active_quarantines())
    for node in held:
        release_node(node)
    return held


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
