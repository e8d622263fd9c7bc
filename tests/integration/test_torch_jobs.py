"""Real 2-node torchrun jobs (gloo, CPU) on real sshd nodes, launched and killed by the CLI."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

from fakecluster import (
    FakeCluster,
    alive,
    cmdline,
    pids_with_env,
    port_listening,
    proc_state,
    wait_for,
)
from helpers import Cfg, free_port, step_count, torch_job

TAG = "MNTUI_RUN={job}/[^/]+/{node}"


def job_pids(job: str, node: str) -> list[int]:
    return alive(pids_with_env(TAG.format(job=re.escape(job), node=node)))


class Watcher(threading.Thread):
    """Records, independently of mntui, when the master port first listened and when
    each node's tmux session first existed."""

    def __init__(self, fake: FakeCluster, port: int, sessions: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.fake, self.port, self.sessions = fake, port, sessions
        self.first: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set() and len(self.first) < len(self.sessions) + 1:
            now = time.time()
            if "port" not in self.first and port_listening(self.port):
                self.first["port"] = now
            for node, session in self.sessions.items():
                if node not in self.first and session in self.fake.node(node).sessions():
                    self.first[node] = now
            time.sleep(0.02)


def assert_gone(fake: FakeCluster, job: str, port: int) -> None:
    for node in ("node0", "node1"):
        assert job_pids(job, node) == [], f"tagged processes left on {node}"
        assert not [s for s in fake.node(node).sessions() if s.startswith(job)], (
            f"session left on {node}"
        )
    assert not port_listening(port)


def test_launch_orders_main_first_and_kill_is_clean(fake: FakeCluster, cfg: Cfg) -> None:
    job, port = "tlaunch", free_port()
    path = cfg.write(torch_job(job, cfg.workdir_with_train(), port))
    # An unrelated process of the same user, running a `train.py`: a kill must spare it.
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "train.py"])
    watcher = Watcher(fake, port, {"node0": f"{job}-node0", "node1": f"{job}-node1"})
    watcher.start()
    try:
        t0 = time.time()
        res = cfg.mntui(path, "launch", "--no-ui")
        assert res.returncode == 0, res.stdout + res.stderr
        launched = time.time() - t0
        wait_for(
            lambda: all(step_count(fake.node(n).log(job)) >= 2 for n in ("node0", "node1")),
            60,
            what="both nodes training",
        )
        training = time.time() - t0
        watcher.stop.set()
        # Order, observed from outside: main's session, then the port, then the worker.
        assert watcher.first["node0"] <= watcher.first["port"] <= watcher.first["node1"], (
            watcher.first
        )
        # ...and in mntui's own progress output.
        lines = res.stdout.splitlines()
        idx = {
            k: next(i for i, ln in enumerate(lines) if re.search(k, ln))
            for k in (r"node0\[0\]\s+started", r"node0\[0\]\s+ready", r"node1\[1\]\s+started")
        }
        assert (
            idx[r"node0\[0\]\s+started"] < idx[r"node0\[0\]\s+ready"] < idx[r"node1\[1\]\s+started"]
        )
        for node, rank in (("node0", 0), ("node1", 1)):
            env_line = next(
                ln for ln in fake.node(node).log(job).splitlines() if ln.startswith("ENV ")
            )
            assert env_line == (
                f"ENV node={node} NODE_RANK={rank} NNODES=2 MASTER_ADDR=127.0.0.1 "
                f"MASTER_PORT={port} WORLD_SIZE=2 MYVAR=hello world"
            )
            assert job_pids(job, node), f"no tagged processes on {node}"

        t1 = time.time()
        res = cfg.mntui(path, "kill")
        kill_s = time.time() - t1
        assert res.returncode == 0, res.stdout + res.stderr
        assert "clean:" in res.stdout
        assert_gone(fake, job, port)
        assert proc_state(bystander.pid) not in (None, "Z"), "the unrelated train.py was killed"
        print(
            f"\nMEASURED launch->returned {launched:.1f}s, launch->both training {training:.1f}s, "
            f"worker start {watcher.first['node1'] - watcher.first['port']:.2f}s after port, "
            f"kill (healthy) {kill_s:.2f}s"
        )

        again = cfg.mntui(path, "kill")
        assert again.returncode == 0 and "nothing to kill" in again.stdout
    finally:
        watcher.stop.set()
        bystander.kill()
        bystander.wait()


def test_frozen_node_hangs_the_job_and_kill_clears_it(fake: FakeCluster, cfg: Cfg) -> None:
    job, port = "tfrozen", free_port()
    path = cfg.write(torch_job(job, cfg.workdir_with_train(), port))
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    wait_for(
        lambda: all(step_count(fake.node(n).log(job)) >= 2 for n in ("node0", "node1")),
        60,
        what="both nodes training",
    )
    frozen = job_pids(job, "node1")
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    # tmux SIGCONTs the pane's process group (launch.sh, torchrun, tee); the workers, in
    # their own sessions, stay stopped, and a stopped worker is what hangs the others.
    workers = [
        p for p in frozen if "train.py" in cmdline(p) and "torch.distributed.run" not in cmdline(p)
    ]
    assert workers
    wait_for(
        lambda: all(proc_state(p) in ("T", None) for p in workers), 10, what="node1's worker frozen"
    )
    # The real hang: node0 stays alive but its steps stop (at most the one in flight).
    before = step_count(fake.node("node0").log(job))
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        assert step_count(fake.node("node0").log(job)) <= before + 1, "node0 kept training"
        time.sleep(0.2)
    assert job_pids(job, "node0"), "node0 should still be alive, hanging"

    t1 = time.time()
    res = cfg.mntui(path, "kill")
    kill_s = time.time() - t1
    assert res.returncode == 0, res.stdout + res.stderr
    assert_gone(fake, job, port)
    print(f"\nMEASURED kill with a frozen node {kill_s:.2f}s")


def test_orphaned_workers_are_found_and_killed(fake: FakeCluster, cfg: Cfg) -> None:
    job, port = "torphan", free_port()
    path = cfg.write(torch_job(job, cfg.workdir_with_train(), port))
    assert cfg.mntui(path, "launch", "--no-ui").returncode == 0
    wait_for(lambda: step_count(fake.node("node1").log(job)) >= 1, 60, what="node1 training")
    pids = job_pids(job, "node1")
    launcher = next(p for p in pids if "torch.distributed.run" in cmdline(p))
    worker = next(
        p for p in pids if "train.py" in cmdline(p) and "torch.distributed.run" not in cmdline(p)
    )
    os.kill(launcher, signal.SIGKILL)
    wait_for(lambda: proc_state(launcher) in (None, "Z"), 10, what="launcher dead")
    assert proc_state(worker) not in (None, "Z"), "the worker should be orphaned, not dead"
    assert f"{job}-node1" in fake.node("node1").sessions(), "the pane should still be alive"

    res = cfg.mntui(path, "kill")
    assert res.returncode == 0, res.stdout + res.stderr
    assert proc_state(worker) in (None, "Z")
    assert_gone(fake, job, port)
