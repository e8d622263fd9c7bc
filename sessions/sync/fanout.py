"""What both code-sync modes share (`sync:`, rsync or git): the ssh command line as the
job's own connections reach the nodes, through the relay for a noisy login shell
(sessions/sync/relay.py), and the fan-out that runs one process per node, all at once, and
stops them all on an interrupt.

Its own module, below sync.py (rsync mode, and the facade choosing the mode) and
gitsync.py (git mode), so the two import it and not each other.
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mntui.sessions.errors import MntuiError, UsageError
from mntui.sessions.events import Event

if TYPE_CHECKING:
    from mntui.sessions.config import JobConfig, NodeSpec


@dataclass(frozen=True)
class SyncEvent(Event):
    """A node's sync: the numbers for the app, a line for the CLI."""

    files: int | None = None  # regular files sent
    sent: int | None = None  # bytes on the wire
    seconds: float | None = None
    commit: str | None = None  # git mode: the commit the node is now at


@dataclass(frozen=True)
class SyncStats:
    files: int | None
    sent: int | None
    seconds: float
    commit: str | None = None  # git mode

    def describe(self) -> str:
        files = "? files" if self.files is None else f"{self.files} file(s)"
        sent = "" if self.sent is None else f", {_size(self.sent)} sent"
        return f"{files}{sent} in {self.seconds:.1f}s"


class SyncError(MntuiError):
    def __init__(self, failures: Mapping[str, str]) -> None:
        self.failures = dict(failures)
        self.details = "\n".join(f"  {n}: {why}" for n, why in failures.items())
        super().__init__(f"code sync failed on {len(failures)} node(s)\n{self.details}")


# ---- the ssh command line, as the job's connections reach the nodes (pure) ------


def remote_dest(workdir: str) -> str:
    """The workdir as rsync's remote path, which is relative to the node's home; `-x` as
    `./-x`, which rsync on the node would read as an option, and `cd -- -` as $OLDPWD."""
    if workdir in ("~", "~/"):
        return "."
    dest = workdir[2:] if workdir.startswith("~/") else workdir
    return f"./{dest}" if dest.startswith("-") else dest


def ssh_argv(cfg: JobConfig) -> list[str]:
    """ssh as the job's connections reach the nodes: its ssh_config, never a prompt."""
    from mntui.sessions.config import HostKeyPolicy
    from mntui.sessions.ssh import ssh_base_argv

    ssh = [*ssh_base_argv(cfg.ssh.config), "-o", "BatchMode=yes"]
    ssh += ["-o", f"ConnectTimeout={math.ceil(cfg.ssh.connect_timeout)}"]
    if cfg.ssh.host_key is not None:
        strict = "yes" if cfg.ssh.host_key is HostKeyPolicy.STRICT else "accept-new"
        ssh += ["-o", f"StrictHostKeyChecking={strict}"]
    return ssh


def relay_argv(marker: str, ssh: list[str]) -> list[str]:
    return [sys.executable, "-m", "mntui.sessions.sync.relay", marker, *ssh]


def ssh_host(cfg: JobConfig, spec: NodeSpec) -> str:
    """The node's host as rsync and git write it before the `:` of a remote path."""
    if spec.host.startswith("-"):
        raise UsageError(f"{cfg.path}: {spec.name}: host {spec.host!r} starts with '-'")
    return f"[{spec.host}]" if ":" in spec.host else spec.host


# ---- running it on every node at once ---------------------------------------------


class Runs:
    """The sync processes under way, so an interrupt stops them all."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: list[subprocess.Popen[str]] = []
        self.stopped = False

    def start(
        self, argv: list[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[str] | None:
        with self.lock:
            if self.stopped:
                return None
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
                env=env,
            )
            self.procs.append(proc)
            return proc

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            for proc in self.procs:
                if proc.poll() is None:
                    proc.terminate()


def fan_out(
    nodes: tuple[NodeSpec, ...], one: Callable[[NodeSpec, Runs], SyncStats | str]
) -> dict[str, SyncStats]:
    """`one` on every node at once: its stats, or why it failed (SyncError names them all)."""
    runs = Runs()
    pool = ThreadPoolExecutor(max_workers=min(32, len(nodes)), thread_name_prefix="sync")
    try:
        futures = {n.name: pool.submit(one, n, runs) for n in nodes}
        results = {name: f.result() for name, f in futures.items()}
    except BaseException:
        runs.stop()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    failed = {n: r for n, r in results.items() if isinstance(r, str)}
    if failed:
        raise SyncError(failed)
    return {n: r for n, r in results.items() if isinstance(r, SyncStats)}


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"
