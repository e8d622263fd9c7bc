"""What a run dir says of the run's processes on its node, beside their tags: who the
sentinel saw as members (`members`) and the run's own cgroup (`cgroup`). The rule that
uses them is proctree.py's (Follower); the kill reads them when it runs without the
sentinel (a direct kill from the manager, the coordinator's kill of the main's ranks).

Both files are the job user's to write, like the run dir itself: a member is a pid with
its start time (a pid that a dead member freed and another process took is never it),
and a cgroup is taken only where it is this run's own directory under a cgroup v2
mount, never a path the file names elsewhere.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable

from .proctree import read_bounded

RUNS = ".mntui/runs"  # a node's run dirs, under the node user's $HOME
MEMBERS = "members"  # in the attempt's run dir: "PID START" a line, the sentinel's
CGROUP = "cgroup"  # in the run dir: the run's own cgroup v2 directory, written by launch.sh
MAX_MEMBERS = 4096  # lines of a members file read
_LINE = re.compile(rb"([0-9]{1,10}) ([0-9]{1,20})")


def run_dir(job: str, run: str, node: str) -> str:
    """A run's dir on a node, as a glob under $HOME (killer.Target's `runs`)."""
    return "/".join((RUNS, glob.escape(job), glob.escape(run), glob.escape(node)))


# -- what the sentinel saw -----------------------------------------------------------


def write_members(run_dir: str, members: Iterable[tuple[int, int]]) -> None:
    """The members as (pid, start), atomically: a kill reading it sees a whole list."""
    text = "".join(f"{pid} {start}\n" for pid, start in sorted(members)[:MAX_MEMBERS])
    path = os.path.join(run_dir, MEMBERS)
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_members(run_dir: str) -> list[tuple[int, int]]:
    """(pid, start) of each well-formed line; a line of any other shape is skipped."""
    raw = read_bounded(os.path.join(run_dir, MEMBERS), MAX_MEMBERS * 32)
    out = []
    for line in (raw or b"").split(b"\n")[:MAX_MEMBERS]:
        m = _LINE.fullmatch(line)
        if m is not None:
            out.append((int(m[1]), int(m[2])))
    return out


# -- the run's cgroup ------------------------------------------------------------------


def cgroup_name(tag: str) -> str:
    """The directory launch.sh makes for a run on a node: `mntui-<job>.<run>.<node>`, one
    no other run's can be (a job name and a run id hold no `.`; at most 220 bytes)."""
    return "mntui-" + tag.replace("/", ".", 2)


def cgroup_mounts(proc: str = "/proc") -> list[str]:
    """Where cgroup v2 is mounted (mountinfo's fifth field, after ` - cgroup2 `)."""
    raw = read_bounded(f"{proc}/self/mountinfo", 1 << 20) or b""
    out = []
    for line in raw.decode(errors="replace").split("\n"):
        head, sep, tail = line.partition(" - ")
        fields = head.split(" ")
        if sep and tail.startswith("cgroup2 ") and len(fields) > 4 and fields[3] == "/":
            out.append(fields[4].replace("\\040", " "))
    return out


def run_cgroup(run_dir: str, tag: str, mounts: list[str]) -> str | None:
    """The run's cgroup, as its `cgroup` file names it, if it is one: a directory of
    this run's own name right under a cgroup v2 mount's tree, nothing but a path. The
    file is the job user's to write: a path it names elsewhere is not taken."""
    raw = read_bounded(os.path.join(run_dir, CGROUP), 4096)
    path = (raw or b"").decode(errors="replace").strip()
    if not path.startswith("/") or "\n" in path or path != os.path.normpath(path):
        return None
    if os.path.basename(path) != cgroup_name(tag):
        return None
    if not any(path.startswith(m.rstrip("/") + "/") for m in mounts):
        return None
    return path if os.path.isfile(os.path.join(path, "cgroup.procs")) else None
