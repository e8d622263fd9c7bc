"""Code sync before a launch: the local tree into every node's workdir (`sync:`).

One rsync per node, all at once, over `ssh -F <the job's ssh_config>` as `mntui attach`
runs it, so it reaches the hosts the job's own connections reach. `.gitignore` files are
honoured and `.git` travels, so every node holds the commit the launch came from:
doctor's commit check agrees by construction. Only what changed travels, compared by
content (--checksum): git's refs are 41 bytes at every commit, and a node's stale ref
written in the same second as the local one passed rsync's size-and-mtime check, which
left that node on the old commit. A local node (`host: localhost`) gets a local rsync.

A login shell that prints on stdout (conda, pyenv) breaks rsync's protocol ("is your
shell clean?"), so the ssh side runs through a relay (sessions/sync/relay.py) that drops what
arrives before a marker the remote command prints. Git mode
(`sync: {git: ...}`, sessions/sync/gitsync.py) shares the ssh command, the relay and the fan-out
(sessions/sync/fanout.py).

`delete: true` never reaches a home, what holds one, or mntui's own directories: the
config, a local node's real paths and the remote node itself refuse first
(sessions/config/syncguard.py); inside the workdir, excluded and ignored paths are kept.
Those checks read the workdir as written, and so must rsync on the node: it gets the
path through the protocol (--protect-args), never through the node's shell, which an
rsync before 3.2.4 (or RSYNC_OLD_ARGS=1) handed it to, and which made `$HOME` the home.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mntui.sessions.config import (
    FIX,
    GUARD_SCRIPT,
    literal_refusal,
    local_refusal,
    node_refusal,
    parse_refused,
)
from mntui.sessions.errors import UsageError
from mntui.sessions.events import Event, Phase
from mntui.sessions.termsafe import one_line

from .fanout import Runs, SyncEvent, SyncStats, fan_out, relay_argv, remote_dest, ssh_argv, ssh_host

if TYPE_CHECKING:
    from mntui.sessions.config import JobConfig, NodeSpec

RSYNC_TIMEOUT = 120  # seconds without I/O before rsync gives a node up


# ---- the plan: one rsync command line per node (pure) --------------------------------


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
        return [*argv, source, _local_dest(workdir)]
    host = ssh_host(cfg, spec)
    relay = relay_argv(marker, ssh_argv(cfg))
    dest = remote_dest(workdir)
    quoted = shlex.quote(dest)
    # the node's own check, where its home is known (sessions/config/syncguard.py)
    guard = f"sh -c {shlex.quote(GUARD_SCRIPT)} mntui-guard {quoted} {marker} && "
    # `cd`: to $HOME, where mntui's scripts resolve ~/ too (sshd starts in the passwd home)
    rsync_path = (
        f"cd && mkdir -p -- {quoted} && {guard if policy.delete else ''}"
        f"printf %s {marker} && exec rsync"
    )
    # -s (--protect-args; --secluded-args since 3.2.6, the old name kept): the paths go
    # through the protocol, not the node's shell; it also overrides RSYNC_OLD_ARGS=1
    argv += ["-s", "-e", shlex.join(relay), f"--rsync-path={rsync_path}"]
    return [*argv, source, f"{host}:{dest}/"]


def _local_dest(workdir: str) -> str:
    """A relative path as `./x`: rsync reads `-x` as an option and `a:b` as a host."""
    path = os.path.expanduser(workdir)
    return (path if path.startswith("/") else os.path.join(".", path)).rstrip("/") + "/"


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
    lines = [s for x in stderr.splitlines() if (s := one_line(x, 300).strip())]
    generic = ("rsync error:", "rsync: connection unexpectedly closed", "(see the rsync man")
    causes = [x for x in lines if not x.startswith(generic)]
    said = causes[-1] if causes else (lines[-1] if lines else "no message")
    return f"{said} (rsync exit {code})"


# ---- running it ------------------------------------------------------------------


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
    """rsync under way, or why not: the workdir is checked as written (the config's
    check, again for a JobConfig built otherwise), a local delete's on its real paths too."""
    workdir = str(spec.workdir)
    why = literal_refusal(workdir)  # rsync expands a glob there, delete or not
    if why is None and cfg.sync is not None and cfg.sync.delete and spec.is_local:
        why = local_refusal(workdir)
    if why is not None:
        fix = FIX if cfg.sync is not None and cfg.sync.delete else "sync writes into it"
        return None, f"refused before rsync: workdir {workdir} {why}; {fix}"
    try:
        if spec.is_local:
            os.makedirs(argv[-1], exist_ok=True)
        return runs.start(argv), "interrupted"
    except OSError as exc:
        return None, f"{exc.strerror or exc}"
