"""Code sync by commit (`sync: {git: {checkout: same-commit}}`): every node's clone is
checked out, detached, at the local HEAD, so doctor's commit check agrees by construction.

The commit travels by `git push` over the job's own ssh (the ssh_config, the relay for a
noisy login shell: fanout.py's), into a private ref (refs/mntui/incoming) of the repository
that holds each node's workdir. So an unpushed commit runs as it is, a node needs no
access to any shared remote, no branch of the user's moves, and refs/mntui/sync, moved
once the checkout is done, keeps the commit from git's gc. The same connection then
checks it out, detached, and says where HEAD ended (sessions/sync/gitnode.py): one ssh per
node, as in rsync mode.

A node's work is never destroyed: uncommitted changes to tracked files, or a detached
HEAD that no ref keeps (commits made on a node), refuse the node before anything is
sent, and git's checkout itself refuses to overwrite an untracked file. Nodes sharing
one clone (a shared home) take turns through a lock in its git dir.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mntui.sessions.errors import MntuiError, UsageError
from mntui.sessions.events import Event, Phase
from mntui.sessions.termsafe import one_line

from .fanout import Runs, SyncEvent, SyncStats, fan_out, relay_argv, remote_dest, ssh_argv, ssh_host
from .gitnode import (
    INCOMING_REF,
    SYNC_SCRIPT,
    Answer,
    git_error,
    parse_answer,
    refusal,
)

if TYPE_CHECKING:
    from mntui.sessions.config import GitSync, JobConfig, NodeSpec

PUBLISH_TIMEOUT = 300  # seconds for `sync.git.push` to the user's remote
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# Variables that would point our git commands at another repository than the source's,
# another ref namespace, or settings of their own (`git rev-parse --local-env-vars`).
_REPO_VARS = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_NAMESPACE",
        "GIT_PREFIX",
        "GIT_CEILING_DIRECTORIES",
        "GIT_CONFIG",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_GRAFT_FILE",
        "GIT_IMPLICIT_WORK_TREE",
        "GIT_NO_REPLACE_OBJECTS",
        "GIT_REPLACE_REF_BASE",
        "GIT_SHALLOW_FILE",
    }
)

# ---- the local repository ---------------------------------------------------------


@dataclass(frozen=True)
class LocalHead:
    repo: str  # the top of the work tree holding `source`
    sha: str
    changed: tuple[str, ...]  # tracked paths with uncommitted changes
    untracked: int


def parse_status(z: str) -> tuple[tuple[str, ...], int]:
    """`git status --porcelain=v1 -z`: the changed tracked paths, and how many untracked."""
    changed: list[str] = []
    untracked, entries = 0, iter(z.split("\0"))
    for entry in entries:
        if len(entry) < 4:
            continue
        if entry[:2] == "??":
            untracked += 1
            continue
        changed.append(entry[3:])
        if entry[0] in "RC":  # a rename's or copy's source path follows
            next(entries, None)
    return tuple(changed), untracked


def read_head(source: str, config: str = "") -> LocalHead:
    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-C", source, *args], capture_output=True, text=True, env=git_env(None)
        )

    top = git("rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise UsageError(
            f"{config} sync.source: {source} is in no git repository (sync.git syncs the "
            "HEAD of one): set sync.source to a directory of it, or drop sync.git to rsync"
        )
    repo = top.stdout.strip()
    sha = git("rev-parse", "-q", "--verify", "HEAD^{commit}").stdout.strip()
    if not _SHA.fullmatch(sha):
        raise MntuiError(f"{repo} has no commit yet: commit, then launch")
    status = git("status", "--porcelain=v1", "-z", "--untracked-files=normal")
    if status.returncode != 0:
        raise MntuiError(f"{repo}: git status failed: {git_error(status.stderr, '')}")
    changed, untracked = parse_status(status.stdout)
    return LocalHead(repo, sha, changed, untracked)


def local_notices(head: LocalHead, git: GitSync) -> list[str]:
    """What stays behind, said before anything is sent; raises when that is refused."""
    said: list[str] = []
    if head.changed:
        shown = ", ".join(one_line(p) for p in head.changed[:3])
        more = f" and {len(head.changed) - 3} more" if len(head.changed) > 3 else ""
        what = f"{len(head.changed)} uncommitted change(s) ({shown}{more})"
        if not git.allow_dirty:
            raise MntuiError(
                f"{head.repo} has {what}, and sync.git sends commits: commit them, or set "
                f"sync.git.allow_dirty: true to sync HEAD {head.sha[:12]} without them"
            )
        said.append(f"syncing HEAD {head.sha[:12]}; {what} stay local (allow_dirty)")
    if head.untracked:
        said.append(f"{head.untracked} untracked path(s) stay local: git add them to sync them")
    return said


def publish(head: LocalHead, remote: str) -> str:
    """`git push <remote> HEAD` (sync.git.push): the run's commit published as well."""
    shown = re.sub(r"//[^/@]*@", "//***@", remote)  # a token in a URL stays out of lines
    try:
        res = subprocess.run(
            ["git", "-C", head.repo, "push", "--quiet", "--", remote, "HEAD"],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=PUBLISH_TIMEOUT,
            env=git_env(None),
        )
    except subprocess.TimeoutExpired:
        raise MntuiError(
            f"sync.git.push: git push {shown} HEAD took over {PUBLISH_TIMEOUT}s"
        ) from None
    if res.returncode != 0:
        why = git_error(res.stderr.replace(remote, shown), "")
        raise MntuiError(f"sync.git.push: git push {shown} HEAD failed: {why}")
    return f"pushed HEAD {head.sha[:12]} to {shown}"


def git_env(ssh_command: str | None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _REPO_VARS and not k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))
    }
    env["GIT_TERMINAL_PROMPT"] = "0"  # a credential prompt fails instead of waiting
    if ssh_command is not None:
        # "simple": git passes the host and the command only, as our relay expects
        env.update(GIT_SSH_COMMAND=ssh_command, GIT_SSH_VARIANT="simple")
    return env


# ---- the plan: one command line per node (pure) -----------------------------------


def sync_argv(cfg: JobConfig, spec: NodeSpec, head: LocalHead, marker: str) -> list[str]:
    """git push of the commit into the clone holding the workdir, behind SYNC_SCRIPT, which
    checks the node first and checks the commit out after."""
    workdir = remote_dest(spec.workdir or "~")
    preamble = "''" if spec.is_local else marker
    script = f"exec sh -c {shlex.quote(SYNC_SCRIPT)} mntui-sync {shlex.quote(workdir)}"
    receive_pack = f"{script} {marker} {preamble} {head.sha}"
    # locally, a path git only passes on to the script, which ignores it
    url = os.path.expanduser("~") if spec.is_local else f"{ssh_host(cfg, spec)}:."
    options = ["--quiet", "--no-verify", "--recurse-submodules=no", "--signed=no"]
    return [
        *("git", "-C", head.repo, "push", *options, f"--receive-pack={receive_pack}"),
        *("--", url, f"+{head.sha}:{INCOMING_REF}"),
    ]


# ---- running it ------------------------------------------------------------------


def sync_commit(
    cfg: JobConfig, *, on_event: Callable[[Event], None] = lambda e: None
) -> dict[str, SyncStats]:
    """Every node's clone detached at the local HEAD, all at once; raises SyncError naming
    each node that failed (the others are synced), MntuiError before any node is touched."""
    assert cfg.sync is not None and cfg.sync.git is not None
    head = read_head(cfg.sync.source, cfg.path)
    for line in local_notices(head, cfg.sync.git):
        on_event(Event(None, None, Phase.NOTICE, line))
    if cfg.sync.git.push is not None:
        on_event(Event(None, None, Phase.NOTICE, publish(head, cfg.sync.git.push)))
    marker = f"__MNTUI_SYNC_{secrets.token_hex(8)}__"
    return fan_out(cfg.nodes, lambda spec, runs: _one(cfg, spec, head, marker, runs, on_event))


def _one(
    cfg: JobConfig,
    spec: NodeSpec,
    head: LocalHead,
    marker: str,
    runs: Runs,
    on_event: Callable[[Event], None],
) -> SyncStats | str:
    """One node: its stats, or why it failed (said as an event too)."""
    workdir = spec.workdir or "~"
    where = workdir if spec.is_local else f"{spec.host}:{workdir}"
    on_event(SyncEvent(spec.name, spec.rank, Phase.NOTICE, f"sync -> {where} (git)"))
    t0 = time.monotonic()
    ssh = None if spec.is_local else shlex.join(relay_argv(marker, ssh_argv(cfg)))
    answer = _run(runs, sync_argv(cfg, spec, head, marker), git_env(ssh), marker, workdir)
    if isinstance(answer, tuple) and answer[0] != head.sha:
        answer = f"ended at {answer[0][:12]}, not {head.sha[:12]}"
    if isinstance(answer, str):
        on_event(Event(spec.name, spec.rank, Phase.FAILED, f"sync failed: {answer}"))
        return answer
    stats = SyncStats(None, None, time.monotonic() - t0, commit=head.sha)
    was = {head.sha: "already there", "-": "was no commit"}.get(answer[1], f"was {answer[1][:12]}")
    message = f"synced: at {head.sha[:12]} ({was}) in {stats.seconds:.1f}s"
    on_event(
        SyncEvent(
            spec.name, spec.rank, Phase.NOTICE, message, seconds=stats.seconds, commit=head.sha
        )
    )
    return stats


def _run(
    runs: Runs, argv: list[str], env: dict[str, str], marker: str, workdir: str
) -> str | tuple[str, str]:
    """(commit, was): where the node's HEAD is now, and was; else why it failed."""
    try:
        proc = runs.start(argv, env)
    except OSError as exc:
        return f"{exc.strerror or exc}"
    if proc is None:
        return "interrupted"
    out, err = proc.communicate()
    answer = parse_answer(out + "\n" + err, marker)
    if answer is not None and answer[0] is not Answer.AT:
        return refusal(answer[0], answer[1], workdir, git_error(err, marker))
    if answer is not None and proc.returncode == 0 and len(answer[1]) == 2:
        return answer[1][0], answer[1][1]
    return f"{git_error(err, marker)} (exit {proc.returncode})"
