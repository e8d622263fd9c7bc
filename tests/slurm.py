"""A real one-host Slurm for tests: munged, slurmctld and slurmd on this machine, each
with its own key, socket, ports, state, spool, logs and pid files in a temp dir.

Needs root (slurmd starts each job as its user) and Debian's slurmctld, slurmd,
slurm-client and munge, which `.ci/setup --tests` installs: the fixture installs nothing. Client
tools reach this Slurm through SLURM_CONF (`env`). Everything it started carries
MNTUI_SLURM=<dir> in its environment, and is stopped by PID (daemons) or by that tag
(job steps, which slurmd detaches), never by name.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakecluster import alive, free_port, pids_with_env, stop_process, wait_for

TOOLS = ("munged", "slurmctld", "slurmd", "scontrol", "sbatch", "scancel", "squeue", "sinfo")
PACKAGES = "slurmctld slurmd slurm-client munge"


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]


def _tool(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class OneHostSlurm:
    def __init__(self) -> None:
        # munged refuses a socket below a directory others cannot enter: not pytest's 0700 tmp.
        self.dir = Path(tempfile.mkdtemp(prefix="mntui-slurm-"))
        self.dir.chmod(0o755)
        self.conf = self.dir / "slurm.conf"
        self.socket = self.dir / "munge.sock"
        self.node = ""
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def env(self) -> dict[str, str]:
        """The environment now (a test's own state dir included), pointed at this Slurm and
        outside any allocation."""
        env = {**os.environ, "SLURM_CONF": str(self.conf), "MNTUI_SLURM": str(self.dir)}
        for name in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST"):
            env.pop(name, None)
        return env

    # -- configuration -----------------------------------------------------------------
    def _write_conf(self) -> None:
        for sub in ("state", "spool", "log", "run"):
            (self.dir / sub).mkdir(mode=0o755)
        probe = subprocess.run(
            [_tool("slurmd"), "-C"], capture_output=True, text=True, check=True, env=self.env
        )
        node_line = next(x for x in probe.stdout.splitlines() if x.startswith("NodeName="))
        self.node = node_line.split()[0].removeprefix("NodeName=")
        d = self.dir
        self.conf.write_text(f"""\
ClusterName=mntuitest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.socket}
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
{node_line} State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
""")
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.dir / "log" / f"{name}.out", "ab")  # noqa: SIM115 - the daemon's, for its life
        proc = subprocess.Popen(
            [_tool(name), *args], stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=self.env
        )
        self.procs.append(proc)

    # -- lifecycle ---------------------------------------------------------------------
    def start(self, timeout: float = 60) -> OneHostSlurm:
        self._write_conf()
        d = self.dir
        self._spawn(
            "munged",
            "-F",
            f"--key-file={d / 'munge.key'}",
            f"--socket={self.socket}",
            f"--pid-file={d / 'run' / 'munged.pid'}",
            f"--log-file={d / 'log' / 'munged.log'}",
            f"--seed-file={d / 'munged.seed'}",
        )
        wait_for(self._munge_up, timeout, what="munged")
        self._spawn("slurmctld", "-D", "-f", str(self.conf))
        self._spawn("slurmd", "-D", "-f", str(self.conf))
        wait_for(self._idle, timeout, interval=0.2, what=f"Slurm node {self.node} idle")
        return self

    def _munge_up(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(self.socket))
            return True
        except OSError:
            return False

    def _idle(self) -> bool:
        res = self.run("sinfo", "-h", "-o", "%T")
        return res.returncode == 0 and "idle" in res.stdout

    def run(self, *argv: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", user, "--"] if user else []
        return subprocess.run(
            [*prefix, *argv], capture_output=True, text=True, env=self.env, timeout=60
        )

    def sbatch(self, *args: str, user: str | None = None) -> str:
        """Submit a batch job (as `user`, default: us); its job id."""
        argv = ["sbatch", "--parsable", "-o", "/dev/null", "-D", "/tmp", *args]
        res = self.run(*argv, user=user)
        assert res.returncode == 0, res.stderr
        return res.stdout.strip().split(";")[0]

    def state(self, job_id: str) -> str:
        res = self.run("squeue", "-h", "-j", job_id, "-t", "all", "-o", "%T")
        return res.stdout.strip()

    def wait_state(self, job_id: str, state: str, timeout: float = 30) -> None:
        wait_for(lambda: self.state(job_id) == state, timeout, 0.1, f"job {job_id} {state}")

    def stop(self) -> None:
        jobs = self.run("squeue", "-h", "-t", "all", "-o", "%i").stdout.split()
        if jobs:
            self.run("scancel", *jobs)
            try:
                wait_for(lambda: not self._active(), 20, 0.2, what="jobs cancelled")
            except TimeoutError:
                pass
        for proc in reversed(self.procs):  # slurmd, slurmctld, munged
            stop_process(proc, 10)
        for pid in alive(pids_with_env(f"MNTUI_SLURM={self.dir}")):  # detached job steps
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def _active(self) -> bool:
        out = self.run("squeue", "-h", "-o", "%T").stdout.split()
        return any(s in ("RUNNING", "PENDING", "COMPLETING", "CONFIGURING") for s in out)


@pytest.fixture(scope="session")
def slurm() -> Iterator[OneHostSlurm]:
    """The one-host Slurm; skipped (failed under CI) where its packages or root are missing."""
    missing = missing_tools()
    why = (
        f"needs {', '.join(missing)} (apt-get install {PACKAGES}; .ci/setup --tests does)"
        if missing
        else ("needs root: slurmd starts jobs as their users" if os.geteuid() != 0 else "")
    )
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"one-host Slurm: {why}")
        pytest.skip(f"one-host Slurm: {why}")
    cluster = OneHostSlurm().start()
    try:
        yield cluster
    finally:
        cluster.stop()
