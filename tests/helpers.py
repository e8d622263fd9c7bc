"""Fixtures and job builders shared by the integration and app tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import libtmux
import pytest
from fakecluster import FakeCluster, free_port, wait_for
from libtmux.exc import LibTmuxException

REPO = Path(__file__).resolve().parents[1]
DEMO_JOB = REPO / "sessions" / "jobs" / "ddp_demo.py"


@pytest.fixture(scope="session")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeCluster]:
    cluster = FakeCluster(tmp_path_factory.mktemp("fake"), 3).start()
    yield cluster
    cluster.stop()


@pytest.fixture(autouse=True)
def _stop_jobs(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "fake" in request.fixturenames:
        request.getfixturevalue("fake").stop_jobs()


class Cfg:
    """Writes job configs that reach the fake nodes, and runs the real CLI on them."""

    def __init__(self, fake: FakeCluster, tmp: Path) -> None:
        self.fake, self.tmp = fake, tmp

    def write(self, body: str, name: str = "job.yaml", ssh: str = "") -> Path:
        path = self.tmp / name
        ssh_block = ssh or f"ssh: {{config: {self.fake.ssh_config}, connect_timeout: 5}}"
        path.write_text(textwrap.dedent(body).strip() + "\n" + ssh_block + "\n")
        return path

    def mntui(
        self, cfg: Path, *args: str, timeout: float = 120, watch: bool = False, **kw: object
    ) -> subprocess.CompletedProcess[str]:
        """Runs the CLI; `launch` goes without the watch unless the test asks for it."""
        if args and args[0] == "launch" and not watch and "--dry-run" not in args:
            args = (*args, "--no-watch")
        return subprocess.run(
            [sys.executable, "-m", "mntui.tui.cli", "-c", str(cfg), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            **kw,
        )  # type: ignore[call-overload]

    def workdir_with_train(self) -> Path:
        work = self.tmp / "work"
        work.mkdir(exist_ok=True)
        shutil.copy(DEMO_JOB, work / "train.py")
        return work


@pytest.fixture
def cfg(fake: FakeCluster, tmp_path: Path) -> Cfg:
    return Cfg(fake, tmp_path)


def torch_job(
    job: str, work: Path, port: int, nodes: str = "[node0, node1]", extra: str = ""
) -> str:
    """A real 2-node torchrun job (gloo, CPU) that prints its env, then trains."""
    return f"""
    job: {job}
    nodes: {nodes}
    workdir: {work}
    master_port: {port}
    env: {{OMP_NUM_THREADS: "1", MYVAR: "hello world"}}
    command: >-
      printf 'ENV node=%s NODE_RANK=%s NNODES=%s MASTER_ADDR=%s MASTER_PORT=%s WORLD_SIZE=%s MYVAR=%s\\n'
      {{node}} "$NODE_RANK" "$NNODES" "$MASTER_ADDR" "$MASTER_PORT" "$WORLD_SIZE" "$MYVAR";
      exec python3 -m torch.distributed.run --nnodes={{nnodes}} --node_rank={{node_rank}}
      --nproc_per_node={{nproc_per_node}} --master_addr={{master_addr}} --master_port={{master_port}}
      train.py --interval 0.3 --timeout 600
    launch: {{ready_timeout: 90}}
    kill: {{grace: 3}}
    {extra}
    """


def listener_job(job: str, port: int, nodes: str = "[node0, node1]", extra: str = "") -> str:
    """A light job: the main listens on the master port, every node sleeps."""
    return f"""
    job: {job}
    nodes: {nodes}
    master_port: {port}
    command: >-
      echo "node {{node}} rank {{node_rank}} up";
      exec python3 -c "import socket, sys, time; r = int(sys.argv[1]);
      s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);
      r == 0 and (s.bind(('127.0.0.1', {port})), s.listen());
      print('serving', flush=True); time.sleep(600)" {{node_rank}}
    launch: {{ready_timeout: 20}}
    kill: {{grace: 2}}
    {extra}
    """


def steps_job(
    job: str, port: int, nodes: str = "[node0, node1]", extra: str = "", steps: int = 0
) -> str:
    """A light job that trains without torch: the main listens on the master port, every
    node prints `step N` ten times a second (exits 0 after `steps`, if given). For tests of
    the watch itself, where a real torchrun only costs seconds of CPU."""
    return f"""
    job: {job}
    nodes: {nodes}
    master_port: {port}
    command: >-
      exec python3 -c "import itertools, socket, sys, time; r = int(sys.argv[1]);
      n = int(sys.argv[2]); s = socket.socket();
      s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);
      r == 0 and (s.bind(('127.0.0.1', {port})), s.listen());
      [(print('step', i, flush=True), time.sleep(0.1))
      for i in (range(1, n + 1) if n else itertools.count(1))];
      print('done after', n, 'steps', flush=True)" {{node_rank}} {steps}
    launch: {{ready_timeout: 20}}
    kill: {{grace: 2}}
    {extra}
    """


FAULTY = REPO / "tests" / "jobs" / "faulty_train.py"


def line_of(text: str) -> int:
    return next(i for i, ln in enumerate(FAULTY.read_text().splitlines(), 1) if text in ln)


def faulty_job(job: str, work: Path, port: int, args: str, extra: str = "") -> str:
    return f"""
    job: {job}
    nodes: [node0, node1]
    workdir: {work}
    master_port: {port}
    env: {{OMP_NUM_THREADS: "1"}}
    command: >-
      exec python3 -m torch.distributed.run --nnodes={{nnodes}} --node_rank={{node_rank}}
      --nproc_per_node={{nproc_per_node}} --master_addr={{master_addr}} --master_port={{master_port}}
      faulty_train.py {args}
    launch: {{ready_timeout: 90}}
    kill: {{grace: 3}}
    {extra}
    """


def on_cluster(extra: str = "") -> str:
    """A job's last YAML lines (a flow-style `watch:` among them, if any, as the tests
    write it) watched by the cluster, its coordinator on a port of its own: for the
    tests of its teardowns, reports and restarts. `where: cluster` said: with a notify
    command `auto` does not watch (until the ports of issue 37 land)."""
    where = f"where: cluster, port: {free_port()}"
    if "watch: {" in extra:
        return extra.replace("watch: {", f"watch: {{{where}, ", 1)
    return f"{extra}\n    watch: {{{where}}}" if extra else f"watch: {{{where}}}"


def step_count(log: str) -> int:
    return sum(1 for line in log.splitlines() if line.startswith("step "))


__all__ = [
    "FAULTY",
    "Cfg",
    "faulty_job",
    "free_port",
    "line_of",
    "listener_job",
    "on_cluster",
    "os",
    "step_count",
    "steps_job",
    "time",
    "torch_job",
]


def tagged_anywhere(job: str) -> list[int]:
    """Live processes of any run of `job`, on any node of any fake cluster."""
    import re as _re

    from fakecluster import alive, pids_with_env

    return alive(pids_with_env(f"MNTUI_RUN={_re.escape(job)}/.*"))


def freeze_a_worker(fake: FakeCluster, job: str, script: str, node: str = "node1") -> int:
    """Once both nodes train, stop one of `node`'s ranks (a worker running `script`, not
    torchrun) with SIGSTOP, as a hung GPU or a stuck collective would; its PID."""
    import signal

    from fakecluster import cmdline, tagged

    wait_for(
        lambda: all(step_count(fake.node(n).log(job)) >= 2 for n in ("node0", "node1")),
        60,
        what="both nodes training",
    )
    worker = next(
        p
        for p in tagged(job, node)
        if script in cmdline(p) and "torch.distributed.run" not in cmdline(p)
    )
    os.kill(worker, signal.SIGSTOP)
    return worker


async def until(pilot: Any, cond: Callable[[], object], timeout: float, what: str) -> None:
    """Pilot's wait: poll `cond` between UI ticks, fail loudly at the deadline."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await pilot.pause(0.1)


def showing(app: Any, kind: type, selector: str) -> bool:
    """Whether the screen on top is a `kind` that has composed `selector`: Textual builds
    a pushed screen's widgets a tick after it is on top, so a loaded machine once read
    none there."""
    return isinstance(app.screen, kind) and bool(app.screen.query(selector))


@contextmanager
def terminal(sock: Path) -> Iterator[libtmux.Server]:
    """A private tmux server standing in for the user's terminal, stopped at the end.

    The server exits by itself once its last pane's command ends (`mntui attach` after a detach),
    so stopping it races that exit: tmux then answers "server exited unexpectedly". Only a
    server still alive after that is an error.
    """
    server = libtmux.Server(socket_path=str(sock))
    try:
        yield server
    finally:
        try:
            server.kill()
        except LibTmuxException:
            wait_for(lambda: not server.is_alive(), 10, what=f"the tmux server on {sock} gone")
