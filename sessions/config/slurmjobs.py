"""Asking Slurm: a job's state, owner and nodes, and its node-list syntax.

Slurm is the authority on its own answers: `scontrol` expands node lists (ClusterShell
only where scontrol refuses one) and says whose job is running where. Everything it
prints is data, parsed strictly: a job name may hold `Key=Value` words, and a list
scontrol cannot read comes back as `x]` with exit 0. Every failure is a ValueError that
says why, for the config error that names the job.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from ClusterShell.NodeSet import NodeSet, NodeSetException

from .checks import CONTROL_RE
from .nodenames import MAX_NODES, NODE_RE, nodeset_bound

SLURM_TIMEOUT = 20.0  # scontrol retries an unreachable slurmctld for MessageTimeout (10 s)


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    state: str
    user: str
    uid: int
    nodelist: str
    reason: str | None


_JOB_FIELDS = ("JobId", "JobState", "UserId", "NodeList")


def parse_job(text: str) -> SlurmJob:
    """`scontrol -o show job ID`: one line of Key=Value words. A value may hold spaces
    (JobName, Comment) and so look like another key: a key we read that appears twice
    is refused, never guessed. Raises ValueError saying why."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        raise ValueError(f"{len(lines)} records: an array or heterogeneous job; give one id")
    found: dict[str, list[str]] = {}
    for word in lines[0].split():
        key, eq, value = word.partition("=")
        if eq:
            found.setdefault(key, []).append(value)
    for key in _JOB_FIELDS:
        if key not in found:
            raise ValueError(f"no {key}= in scontrol's answer")
        if len(found[key]) > 1:
            raise ValueError(f"{key}= more than once in scontrol's answer (in a job name?)")
    user = re.fullmatch(r"([^()]*)\(([0-9]{1,10})\)", found["UserId"][0])
    if user is None:
        raise ValueError(f"unreadable UserId={found['UserId'][0]!r}")
    reasons = found.get("Reason", [])
    return SlurmJob(
        found["JobId"][0],
        found["JobState"][0],
        user[1],
        int(user[2]),
        found["NodeList"][0],
        reasons[0] if len(reasons) == 1 and reasons[0] != "None" else None,
    )


def job_problem(job: SlurmJob, uid: int) -> str | None:
    """Why the job's nodes are not ours to launch on, or None."""
    name = f"Slurm job {job.job_id}"
    if job.state != "RUNNING":
        because = f" ({job.reason})" if job.reason else ""
        if job.state in ("PENDING", "CONFIGURING"):
            return f"{name} is {job.state}{because}, not running yet: wait until it starts"
        return (
            f"{name} is {job.state}{because}, not running: its nodes are given back "
            "(start an allocation and give its id, or `slurm: auto` inside it)"
        )
    if job.uid != uid:
        return (
            f"{name} belongs to {job.user} (uid {job.uid}), not to you (uid {uid}): "
            "mntui launches only on your own allocation"
        )
    return None


def show_job(job_id: str) -> SlurmJob:
    name = f"Slurm job {job_id}"
    try:
        res = scontrol("-o", "show", "job", job_id)
    except FileNotFoundError:
        raise ValueError(
            f"{name}: scontrol not found (install slurm-client, or list the nodes)"
        ) from None
    if res.returncode != 0:
        said = first_line(res.stderr or res.stdout)
        if "Invalid job id" in said:
            raise ValueError(f"no {name}: it never existed or ended long ago (Slurm forgets it)")
        raise ValueError(f"{name}: scontrol failed: {said or f'exit {res.returncode}'}")
    try:
        return parse_job(res.stdout)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def scontrol(*args: str) -> subprocess.CompletedProcess[str]:
    """Raises FileNotFoundError without scontrol, and ValueError when it hangs."""
    exe = shutil.which("scontrol")
    if exe is None:
        raise FileNotFoundError("scontrol")
    try:
        return subprocess.run(
            [exe, *args],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=SLURM_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise ValueError(
            f"scontrol gave no answer in {SLURM_TIMEOUT:g}s (is slurmctld up?)"
        ) from None


def first_line(text: str) -> str:
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    return CONTROL_RE.sub("?", line)[:200]


def expand_nodelist(text: str) -> tuple[str, ...]:
    """Slurm's own expansion (`scontrol show hostnames`), in its order; ClusterShell's
    where scontrol refuses the list, as 22.05 does `gpu-[01-03]-ib`. Raises ValueError."""
    if not text or text == "(null)":
        raise ValueError("the job holds no nodes")
    if nodeset_bound(text) > MAX_NODES:
        raise ValueError(f"node list {text[:80]!r}: more than {MAX_NODES} nodes")
    names = scontrol_hostnames(text)
    if names is None:
        try:
            names = tuple(NodeSet(text))
        except NodeSetException as exc:
            raise ValueError(f"bad node list {text[:80]!r}: {exc}") from None
    bad = [n for n in names if not NODE_RE.match(n)]
    if bad or not names:
        raise ValueError(f"node list {text[:80]!r} gives bad node names: {bad[:3]}")
    if len(set(names)) != len(names):
        raise ValueError(f"node list {text[:80]!r} names a node twice")
    return names


def scontrol_hostnames(text: str) -> tuple[str, ...] | None:
    """scontrol's answer, or None where it gives none that is clean: it exits 0 after
    `Invalid hostlist`, and prints `x]` for `x[1-3`."""
    try:
        res = scontrol("show", "hostnames", text)
    except (FileNotFoundError, ValueError):
        return None
    names = tuple(res.stdout.split())
    clean = res.returncode == 0 and not res.stderr.strip() and names
    return names if clean and all(NODE_RE.match(n) for n in names) else None
