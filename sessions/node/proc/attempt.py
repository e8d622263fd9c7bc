"""One attempt of the run on this node, as its sentinel follows it: its processes (by
the attempt's own tag), its log and exit code, its tmux pane; and the start of a
restart's attempt from the template the launch left for it.

Why a chain-long sentinel follows attempts: a restart on the cluster is started by
the coordinator while the manager may be away, so the node's start was rendered at
launch as a template (attemptscript.py: attempt k's run id, tag and count put in when
the coordinator asks for it) and the sentinel, which outlives one attempt, runs it and
follows the new tag.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

from mntui.sessions.node.files.plainfile import plain
from mntui.sessions.node.rules.runid import RUN_ID
from mntui.sessions.node.wire.facts import Facts, ProcFact
from mntui.sessions.node.wire.watchcfg import WatchConfig

from . import attemptscript, daemon, members, proctree
from .logtail import LogTail

START_TIMEOUT = 60.0  # seconds for an attempt's start script (tmux, retried)
_REL = re.compile(r"[A-Za-z0-9._/-]{1,512}")


def tmux_pane(session: str) -> tuple[bool, bool, int | None]:
    """(the session exists, its pane is dead, the pane's pid) from the node's tmux."""
    try:
        out = subprocess.run(
            ["tmux", "list-panes", "-t", f"={session}:", "-F", "#{pane_dead} #{pane_pid}"],
            capture_output=True,
            text=True,
            timeout=5,
            env=daemon.clean_env(os.environ),
        )
    except (OSError, subprocess.SubprocessError):
        return False, False, None
    if out.returncode != 0:
        return False, False, None
    words = out.stdout.split("\n", 1)[0].split()
    pid = int(words[1]) if len(words) == 2 and words[1].isdigit() else None
    return True, bool(words) and words[0] == "1", pid


def read_exit_code(run_dir: str) -> int | None:
    try:
        with open(os.path.join(run_dir, "exit_code"), encoding="ascii", opener=plain) as f:
            text = f.read(32).strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if re.fullmatch(r"-?[0-9]{1,9}", text) else None


class Attempt:
    def __init__(self, number: int, run: str, tag: str, run_dir: str, node: str,
                 pattern: str | None) -> None:  # fmt: skip
        self.number, self.run, self.dir, self.tag = number, run, run_dir, tag
        self.entry = f"MNTUI_RUN={tag}"
        self.follower = proctree.Follower(self.entry, exclude=(os.getpid(),))
        self.log = LogTail(os.path.join(run_dir, "output.log"), node, pattern)
        self.pane_pid: int | None = None
        self.mounts: list[str] | None = None  # cgroup v2's, read once the run has a cgroup
        self.cgroup: str | None = None
        self.written: tuple[tuple[int, int], ...] | None = None  # the members file's

    def sample(self, session: str) -> Facts:
        self._find_cgroup()
        procs = self.follower.sample()
        if self.pane_pid is None:
            _, dead, self.pane_pid = tmux_pane(session)
            if self.pane_pid is not None and not dead:
                self.follower.root(self.pane_pid)  # the job's, whatever its environment
        pane = self.pane_pid
        if (
            pane is not None
            and all(p.pid != pane for p in procs)
            and os.path.exists(f"/proc/{pane}")
        ):
            # not seen yet: followed now, for without it its children would look
            # orphaned, a decision taken at once
            self.follower.add(pane)
            procs = self.follower.sample()
        self._remember()
        session_up, dead = True, False
        if not procs:  # only then does the pane's fate matter (and cost a tmux call)
            session_up, dead, _ = tmux_pane(session)
        self.log.read()
        try:
            st = os.stat(self.log.path)
            size, age = st.st_size, max(0.0, time.time() - st.st_mtime)
        except OSError:
            size, age = None, None
        return Facts(
            reachable=True,
            error=None,
            live_procs=tuple(ProcFact(p.pid, p.ppid, p.state) for p in procs),
            pane_pid=self.pane_pid,
            exit_code=read_exit_code(self.dir),
            session=session_up,
            pane_dead=dead,
            log_size=size or None,
            output_age=age if size else None,
        )

    def _find_cgroup(self) -> None:
        """The run's cgroup, once launch.sh has named it (checked each sample until then:
        one open that fails)."""
        if self.cgroup is not None or not os.path.exists(os.path.join(self.dir, members.CGROUP)):
            return
        if self.mounts is None:
            self.mounts = members.cgroup_mounts()
        self.cgroup = members.run_cgroup(self.dir, self.tag, self.mounts)
        if self.cgroup is not None:
            self.follower.cgroup(self.cgroup)

    def _remember(self) -> None:
        """What this sentinel saw, for a kill that runs without it: written when it
        changed, never a reason to stop sampling."""
        seen = tuple(sorted(self.follower.identities))
        if seen == self.written:
            return
        try:
            members.write_members(self.dir, seen)
        except OSError:
            return
        self.written = seen


def start(first_dir: str, k: int, run: object, cfg: WatchConfig, rank: object = None) -> Attempt:
    """Runs attempt `k` (run id `run`, the coordinator's) from the template the launch
    wrote beside the first attempt's run dir, and returns the attempt to follow;
    RuntimeError with the script's last words when it did not start."""
    script = attemptscript.render(first_dir, k, run, cfg, rank)  # a spare's: with its rank
    later = follow(first_dir, k, cfg)  # checked before anything runs
    env = {n: v for n, v in os.environ.items() if n not in ("MNTUI_RUN", "TMUX", "TMUX_PANE")}
    proc = subprocess.run(
        ["sh", script],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=START_TIMEOUT,
        env=env,  # the node's login environment, less our own tag: never on a tmux server
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0 or "STARTED" not in proc.stdout:
        raise RuntimeError(f"attempt {k} did not start: {(proc.stderr or proc.stdout)[-300:]}")
    return later


def follow(first_dir: str, k: int, cfg: WatchConfig) -> Attempt:
    """Attempt `k` as it was started here, to follow without starting it (a sentinel
    started again mid-chain follows the attempt its predecessor started); RuntimeError
    when its file is not one of ours."""
    run, tag, run_dir = placed(first_dir, k, cfg)
    return Attempt(k, run, tag, run_dir, cfg.node, cfg.progress_pattern)


def placed(first_dir: str, k: int, cfg: WatchConfig) -> tuple[str, str, str]:
    """Attempt `k`'s run id, tag and run dir on this node (attempts/<k>.json, written at
    its start: attemptscript.py); RuntimeError when the file is not one of ours."""
    path = os.path.join(first_dir, "attempts", f"{k}.json")
    with open(path, encoding="utf-8", opener=plain) as f:
        info = json.loads(f.read(4096))
    if not isinstance(info, dict):
        raise RuntimeError(f"attempts/{k}.json is not one of ours")
    run, tag, rel = info.get("run"), info.get("tag"), info.get("run_dir")
    ok = isinstance(run, str) and RUN_ID.fullmatch(run) and tag == f"{cfg.job}/{run}/{cfg.node}"
    if not ok or not isinstance(rel, str) or not _REL.fullmatch(rel) or ".." in rel:
        raise RuntimeError(f"attempts/{k}.json is not one of ours")
    assert isinstance(run, str) and isinstance(tag, str)
    return run, tag, os.path.join(os.path.expanduser("~"), rel)
