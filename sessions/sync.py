"""Code sync before a launch: the local tree into every node's workdir (`sync:`).

One rsync per node, all at once, over `ssh -F <the job's ssh_config>` as `mntui attach`
runs it, so it reaches the hosts the job's own connections reach. `.gitignore` files are
honoured and `.git` travels, so every node holds the commit the launch came from:
doctor's commit check agrees by construction. Only what changed travels, compared by
content (--checksum): git's refs are 41 bytes at every commit, and a node's stale ref
written in the same second as the local one passed rsync's size-and-mtime check, which
left that node on the old commit. A local node (`host: localhost`) gets a local rsync.

A login shell that prints on stdout (conda, pyenv) breaks rsync's protocol ("is your
shell clean?"), so the ssh side runs through a relay (sessions/relay.py) that drops what
arrives before a marker the remote command prints. Git mode
(`sync: {git: ...}`, sessions/gitsync.py) shares the ssh command, the relay and the fan-out.

`delete: true` never reaches a home, what holds one, or mntui's own directories: the
config, a local node's real paths and the remote node itself refuse first
(sessions/syncguard.py); inside the workdir, excluded and ignored paths are kept.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import MntuiError, UsageError
from .events import Event, Phase
from .syncguard import FIX, GUARD_SCRIPT, local_refusal, node_refusal, parse_refused

if TYPE_CHECKING:
    from .config import JobConfig
    from .settings import NodeSpec

RSYNC_TIMEOUT = 120  # seconds without I/O before rsync gives a node up
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


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


# ---- the plan: one rsync command line per node (pure) --------------------------------


def remote_dest(workdir: str) -> str:
    """The workdir as rsync's remote path, which is relative to the node's home."""
    if workdir in ("~", "~/"):
        return "."
    return workdir[2:] if workdir.startswith("~/") else workdir


def ssh_argv(cfg: JobConfig) -> list[str]:
    """ssh as the job's connections reach the nodes: its ssh_config, never a prompt."""
    from .settings import HostKeyPolicy
    from .sshresolve import ssh_base_argv

    ssh = [*ssh_base_argv(cfg.ssh.config), "-o", "BatchMode=yes"]
    ssh += ["-o", f"ConnectTimeout={math.ceil(cfg.ssh.connect_timeout)}"]
    if cfg.ssh.host_key is not None:
        strict = "yes" if cfg.ssh.host_key is HostKeyPolicy.STRICT else "accept-new"
        ssh += ["-o", f"StrictHostKeyChecking={strict}"]
    return ssh


def relay_argv(marker: str, ssh: list[str]) -> list[str]:
    return [sys.executable, "-m", "mntui.sessions.relay", marker, *ssh]


def ssh_host(cfg: JobConfig, spec: NodeSpec) -> str:
    """The node's host as rsync and git write it before the `:` of a remote path."""
    if spec.host.startswith("-"):
        raise UsageError(f"{cfg.path}: {spec.name}: host {spec.host!r} starts with '-'")
    return f"[{spec.host}]" if ":" in spec.host else spec.host


def rsync_argv(cfg: JobConfig, spec: NodeSpec, marker: str) -> list[str]:
    policy, workdir = cfg.sync, spec.workdir
    if policy is None or workdir is None:
        raise UsageError(f"{cfg.path}: sync needs a `sync:` section and {spec.name}'s workdir")
    argv = ["rsync", "--archive", "--checksum", "--stats", f"--timeout={RSYNC_TIMEOUT}"]
    argv += ["--delete"] if policy.delete else []
    argv += ["--filter=:- .gitignore"] if policy.gitignore else []
    argv += [f"--exclude={x}" for x in policy.excludes]
    # Excluded paths are never deleted (no --delete-excluded). Deleting after the transfer
    # lets the node side read the .gitignore files just sent: during it, a first sync
    # into a workdir without them deleted the node's ignored checkpoints.
    argv += ["--delete-after"] if policy.delete else []
    source = policy.source.rstrip("/") + "/"
    if spec.is_local:
        return [*argv, source, os.path.expanduser(workdir).rstrip("/") + "/"]
    host = ssh_host(cfg, spec)
    relay = relay_argv(marker, ssh_argv(cfg))
    dest = remote_dest(workdir)
    quoted = shlex.quote(dest)
    # the node's own check, where its home is known (sessions/syncguard.py)
    guard = f"sh -c {shlex.quote(GUARD_SCRIPT)} mntui-guard {quoted} {marker} && "
    # `cd`: to $HOME, where mntui's scripts resolve ~/ too (sshd starts in the passwd home)
    rsync_path = (
        f"cd && mkdir -p -- {quoted} && {guard if policy.delete else ''}"
        f"printf %s {marker} && exec rsync"
    )
    return [*argv, "-e", shlex.join(relay), f"--rsync-path={rsync_path}", source, f"{host}:{dest}/"]


# ---- reading rsync's answers (its stderr carries the node's login-shell noise) -------

_STATS = {
    "files": re.compile(r"Number of regular files transferred: ([0-9,]{1,20})"),
    "sent": re.compile(r"Total bytes sent: ([0-9,]{1,20})"),
}


def parse_stats(stdout: str, seconds: float) -> SyncStats:
    found: dict[str, int] = {}
    for line in stdout.splitlines():
        for key, rx in _STATS.items():
            m = rx.fullmatch(line.strip())
            if m and key not in found:
                found[key] = int(m[1].replace(",", ""))
    return SyncStats(found.get("files"), found.get("sent"), seconds)


def rsync_error(stderr: str, code: int) -> str:
    """One line: the cause rsync or ssh gave, not rsync's closing summary."""
    lines = [_CONTROL.sub("?", x.strip())[:300] for x in stderr.splitlines() if x.strip()]
    generic = ("rsync error:", "rsync: connection unexpectedly closed", "(see the rsync man")
    causes = [x for x in lines if not x.startswith(generic)]
    said = causes[-1] if causes else (lines[-1] if lines else "no message")
    return f"{said} (rsync exit {code})"


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"


# ---- running it ------------------------------------------------------------------


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


def sync_nodes(
    cfg: JobConfig, *, on_event: Callable[[Event], None] = lambda e: None
) -> dict[str, SyncStats]:
    """rsync the source into every node's workdir at once (or, in git mode, check out the
    local HEAD there); raises SyncError naming each node that failed (the others synced)."""
    if cfg.sync is None:
        return {}
    if not Path(cfg.sync.source).is_dir():
        raise UsageError(f"{cfg.path} sync.source: {cfg.sync.source} is not a directory")
    if cfg.sync.git is not None:
        from .gitsync import sync_commit

        return sync_commit(cfg, on_event=on_event)
    marker = f"__MNTUI_SYNC_{secrets.token_hex(8)}__"
    return fan_out(cfg.nodes, lambda spec, runs: _one(cfg, spec, marker, runs, on_event))


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


def _one(
    cfg: JobConfig,
    spec: NodeSpec,
    marker: str,
    runs: Runs,
    on_event: Callable[[Event], None],
) -> SyncStats | str:
    """One node: its stats, or why it failed (said as an event too)."""
    argv = rsync_argv(cfg, spec, marker)
    where = argv[-1] if spec.is_local else f"{spec.host}:{spec.workdir}"
    on_event(SyncEvent(spec.name, spec.rank, Phase.NOTICE, f"sync -> {where}"))
    t0 = time.monotonic()
    proc, why = _start(cfg, spec, argv, runs)
    if proc is not None:
        out, err = proc.communicate()
        if proc.returncode == 0:
            stats = parse_stats(out, time.monotonic() - t0)
            message = f"synced {stats.describe()}"
            on_event(
                SyncEvent(
                    spec.name,
                    spec.rank,
                    Phase.NOTICE,
                    message,
                    files=stats.files,
                    sent=stats.sent,
                    seconds=stats.seconds,
                )
            )
            return stats
        refused = parse_refused(err, marker)
        why = (
            rsync_error(err, proc.returncode)
            if refused is None
            else node_refusal(refused, str(spec.workdir))
        )
    on_event(Event(spec.name, spec.rank, Phase.FAILED, f"sync failed: {why}"))
    return why


def _start(
    cfg: JobConfig, spec: NodeSpec, argv: list[str], runs: Runs
) -> tuple[subprocess.Popen[str] | None, str]:
    """rsync under way, or why not; a local node is checked on its real paths first."""
    if spec.is_local and cfg.sync is not None and cfg.sync.delete:
        why = local_refusal(str(spec.workdir))
        if why is not None:
            return None, f"refused before rsync: workdir {spec.workdir} {why}; {FIX}"
    try:
        if spec.is_local:
            os.makedirs(argv[-1], exist_ok=True)
        return runs.start(argv), "interrupted"
    except OSError as exc:
        return None, f"{exc.strerror or exc}"
