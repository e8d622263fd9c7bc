"""What the cluster-watch tests share: the run's watchers, a manager cut off from its
nodes, a rank of a node, a launch confirmed by the cluster, and nothing left after."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fakecluster import (
    FakeCluster,
    alive,
    cmdline,
    environ_of,
    pids_with_env,
    port_listening,
    process_tree,
    tagged,
    wait_for,
)
from helpers import Cfg, step_count, tagged_anywhere

from mntui.sessions.launch.tmux import session_name

NODES = ("node0", "node1")


def watchers(job: str, role: str, node: str = "[^/]+") -> list[int]:
    """The run's sentinels or coordinators (on `node`, default any), by their own tag."""
    return alive(pids_with_env(f"MNTUI_RUN={re.escape(job)}/[^/]+/{node}/{role}"))


@contextmanager
def cut_off(fake: FakeCluster, nodes: tuple[str, ...] = NODES) -> Iterator[None]:
    """This machine loses every node: their sshd trees stopped, SIGCONTed at the end."""
    stopped: list[int] = []
    try:
        for n in nodes:
            proc = fake.node(n).proc
            assert proc is not None
            for pid in process_tree(proc.pid):
                try:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
                except ProcessLookupError:
                    pass
        yield
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def a_rank(job: str, node: str) -> int:
    """A rank of `node`: a worker under torchrun, or the light job's python3."""
    return next(
        p
        for p in tagged(job, node)
        if ("train.py" in cmdline(p) or "itertools" in cmdline(p))
        and "torch.distributed.run" not in cmdline(p)
    )


def judged(fake: FakeCluster, job: str) -> bool:
    """The coordinator's board on the main has a verdict on every node from its output:
    neither none yet nor `starting` (a job of a few steps may be `finished` by then)."""
    try:
        board = json.loads((run_dir(fake, job, "node0") / "coord" / "status.json").read_text())
        states = [board["nodes"][n].get("state") for n in NODES]
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return False
    return all(s not in (None, "starting") for s in states)


def launched(cfg: Cfg, path: Path, job: str, fake: FakeCluster) -> None:
    """Launched, confirmed by every sentinel, both nodes training, and the coordinator
    judging them so (running; a job of a few steps may have finished): its board is
    published once a second from the sentinels' words, so it says `starting` for a while
    after a node's first steps (in the suite on 2 cores it still did when a test's
    `status` read it). A test acts on a job the cluster saw run."""
    res = cfg.mntui(path, "launch", "--no-ui", watch=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "watched by the cluster" in res.stdout, res.stdout
    assert len(watchers(job, "sentinel")) == 2 and len(watchers(job, "coord")) == 1
    wait_for(
        lambda: all(step_count(fake.node(n).log(job)) >= 2 for n in NODES),
        90,
        what="both nodes training",
    )
    wait_for(lambda: judged(fake, job), 30, what="the coordinator's verdict on both nodes")


def nothing_left(fake: FakeCluster, job: str, ports: tuple[int, ...]) -> None:
    """No process, tmux session (by its real name: `cf-x` is `cf+x-node0`) or port."""
    wait_for(lambda: not tagged_anywhere(job), 20, what="every process of the job gone")
    sessions = [s for n in NODES if (s := session_name(job, n)) in fake.node(n).sessions()]
    assert not sessions, f"tmux sessions of the job left on the nodes: {sessions}"
    for p in ports:
        wait_for(lambda p=p: not port_listening(p), 10, what=f"port {p} free")


def run_dir(fake: FakeCluster, job: str, node: str) -> Path:
    """The node's run dir of the job's latest run."""
    return fake.node(node).run_dirs(job)[-1]


# 2 nodes + 1 spare, restarts on the cluster: the light job whose ranks runs_on finds
SPARE_JOB = """
job: {job}
nodes: [node0, node1]
spares: [node2]
master_port: {port}
command: >-
  echo "rank {{node_rank}} NODE_RANK=$NODE_RANK on {{node}}";
  exec python3 -c "import itertools, socket, sys, time; r = int(sys.argv[1]);
  s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);
  r == 0 and (s.bind(('127.0.0.1', {port})), s.listen());
  [(print('step', i, flush=True), time.sleep(0.1)) for i in itertools.count(1)]" {{node_rank}}
launch: {{ready_timeout: 20}}
kill: {{grace: 2}}
watch: {{where: cluster, port: {wport}, unreachable_after: 5, frozen_after: 2}}
restart: {{max: 2, backoff: 1}}
"""


def runs_on(job: str, node: str) -> dict[str, list[int]]:
    """The run id of each attempt with a live rank on `node` (the light job's python3)."""
    out: dict[str, list[int]] = {}
    for pid in alive(pids_with_env(f"MNTUI_RUN={re.escape(job)}/[^/]+/{re.escape(node)}")):
        if "itertools" in cmdline(pid):
            tag = next(e for e in environ_of(pid) if e.startswith(b"MNTUI_RUN=")).decode()
            out.setdefault(tag.split("/")[1], []).append(pid)
    return out
