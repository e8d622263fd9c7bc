"""What the benchmarks share: the fake cluster's idle job, pdsh (the baseline of every
fan-out row), a source tree of random files, a campaign's own state and tmux server,
and a deadline. Its own module, so bench.py, hangs_run.py, chaos_job.py and syncbench.py
import it and not each other.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

from fakecluster import FakeCluster, free_port


def job_config(fc: FakeCluster, n: int, job: str) -> str:
    nodes = ", ".join(f"node{i}" for i in range(n))
    port = free_port()
    return f"""
job: {job}
nodes: [{nodes}]
master_port: {port}
command: >-
  exec python3 -c "import socket, sys, time; s = socket.socket();
  s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);
  int(sys.argv[1]) == 0 and (s.bind(('127.0.0.1', {port})), s.listen());
  print('up', flush=True); time.sleep(3600)" {{node_rank}}
launch: {{ready_timeout: 60}}
kill: {{grace: 2}}
watch: {{where: here}}  # no watch at all: what is measured is the poll's own cost
ssh: {{config: {fc.ssh_config}, connect_timeout: 10}}
"""


def pdsh(fc: FakeCluster, n: int, command: str) -> None:
    env = {**os.environ, "PDSH_SSH_ARGS_APPEND": f"-F {fc.ssh_config}"}
    hosts = ",".join(f"node{i}" for i in range(n))
    subprocess.run(
        ["pdsh", "-R", "ssh", "-f", "128", "-w", hosts, command],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )


def make_tree(root: Path, mb: int, file_kb: int = 50) -> list[Path]:
    """`mb` MB of random bytes in files of `file_kb` kB, 50 to a directory."""
    files = []
    for i in range(mb * 1000 // file_kb):
        path = root / f"d{i // 50:03d}" / f"f{i:05d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(file_kb * 1000))
        files.append(path)
    return files


def isolate(root: Path) -> None:
    """Run records and the local tmux server of a bench are its own. A bench
    started with SIGINT ignored (`nohup ... &`) would pass that on to the `mntui` it
    starts (chaos's Ctrl+C faults) and could not be stopped itself: handle it."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ["XDG_STATE_HOME"] = str(root / "state")
    (root / "tmux").mkdir(mode=0o700, exist_ok=True)
    os.environ["TMUX_TMPDIR"] = str(root / "tmux")
    os.environ.pop("TMUX", None)
    os.environ.pop("TMUX_PANE", None)


class Deadline:
    """One fault's or hang's own time limit, across every wait it makes."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def in_rounds(rng: random.Random, kinds: list[str], n: int) -> list[str]:
    """`n` kinds drawn in shuffled rounds: each kind as often as the others, give or
    take the last round's cut (a campaign's kinds, seeded)."""
    order: list[str] = []
    while len(order) < n:
        batch = list(kinds)
        rng.shuffle(batch)
        order += batch
    return order[:n]


def torchrun_job(job: str, nodes: list[str], work: Path, script: str) -> list[str]:
    """A campaign's job config, up to its watch settings: one rank a node under real
    torchrun, `script` (with its arguments) run from `work`."""
    return [
        f"job: {job}",
        f"nodes: [{', '.join(nodes)}]",
        f"workdir: {work}",
        f"master_port: {free_port()}",
        'env: {OMP_NUM_THREADS: "1"}',
        "command: >-",
        "  exec python3 -m torch.distributed.run --nnodes={nnodes} --node_rank={node_rank}",
        "  --nproc_per_node=1 --master_addr={master_addr} --master_port={master_port}",
        f"  {script}",
        "launch: {ready_timeout: 90}",
        "kill: {grace: 2}",
    ]
