"""Finding a job's processes by the tag in their environment, and reading what the
node says about them.

torchrun puts every worker in its own session and process group, so tmux
kill-session, `kill -- -PGID` and `fuser -k` all miss workers in some states (orphaned
after torchrun died, node frozen), and killing by name kills other people's jobs. The
environment a process was started with is inherited by everything it starts and is
readable in /proc/PID/environ: that is what we match, exactly, and only for the
user's own processes.

What comes back is data, never protocol: a process picks its own command line, so the
shell library (sh/lib.sh) prints it base64-encoded, and each record is recognised here
only in its exact shape (one regex per record type, ASCII digits of bounded length).
A line of any other shape is skipped and counted by the caller, never raised.
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from .node.proc.members import RUNS
from .termsafe import one_line

TAG_VAR = "MNTUI_RUN"

# Shell functions shared by every script that looks for a job's processes; one file,
# read once, inlined at the top of each script (nodes have nothing of mntui installed).
# Beside this file (the package is a directory): importlib.resources cost every command
# that reads a run, `status` included, 4 ms of imports for one read.
SHELL_LIB = (Path(__file__).parent / "sh" / "lib.sh").read_text()

B64 = r"[A-Za-z0-9+/]*={0,2}"
INT = r"[0-9]{1,20}"  # bounded (2**64 has 20 digits): Python refuses very long digit strings
_PROC = re.compile(rf"PROC ({INT}) ([A-Za-z]) ({B64})", re.ASCII)
_LISTEN = re.compile(
    rf"LISTEN ({INT}) (?:({INT}) ({B64}) ({B64})|- (?:({INT}) ({B64})|- -))", re.ASCII
)


RUNS_DIR = RUNS  # a node's run dirs, relative to the node user's $HOME (node/proc/members.py)


def run_tag(job: str, run_id: str, node: str) -> str:
    return f"{job}/{run_id}/{node}"


def job_node_pattern(job: str, node: str) -> str:
    """Any run of this job on this node: a leftover from last night's run is ours too,
    and so are the run's watchers (`<tag>/sentinel`, `<tag>/coord`, `<tag>/guard`),
    which the poll's exact `run_pattern` never counts as the job's processes."""
    return f"{TAG_VAR}={re.escape(job)}/[^/]+/{re.escape(node)}(/sentinel|/coord|/guard)?"


def kill_tags(job: str, node: str, only: tuple[str, str] | None = None) -> tuple[str, str]:
    """(the tag pattern of the job's processes on `node`, that of its watchers), for the
    kill (launch/kill.py): any run of the job (a leftover from last night's run is ours
    too), or with `only` = (run, the run whose dir its coordinator writes in) one attempt
    and nothing else: its processes (`<job>/<run>/<node>`, exactly) and its watchers
    (`<job>/<watch_run>/<node>/sentinel|coord|guard`). A stop of one attempt takes
    `only`: a node already running a later attempt of the same job keeps it, even if
    the stop was misjudged."""
    j, n = re.escape(job), re.escape(node)
    run, watch = ("[^/]+", "[^/]+") if only is None else (re.escape(only[0]), re.escape(only[1]))
    return f"{TAG_VAR}={j}/{run}/{n}", f"{TAG_VAR}={j}/{watch}/{n}/(sentinel|coord|guard)"


def run_pattern(tag: str) -> str:
    return f"{TAG_VAR}={re.escape(tag)}"


def run_dir_word(run_dir: str) -> str:
    """The shell word for a run directory, which lives under the node user's $HOME."""
    return '"$HOME"/' + shlex.quote(run_dir)


def node_lines(text: str) -> list[str]:
    """A node's answer as records: split at "\\n" only, the one byte our scripts end a
    record with (str.splitlines also splits at \\r, \\x1c, \\u2028 and more)."""
    lines = text.split("\n")
    if lines and not lines[-1]:
        lines.pop()
    return lines


def ints(words: str) -> tuple[int, ...]:
    """Space-separated numbers that a record's regex has already checked."""
    return tuple(int(w) for w in words.split())


def b64_bytes(field: str) -> bytes | None:
    """The bytes of a base64 field, or None if it is not base64."""
    if not re.fullmatch(B64, field, re.ASCII):
        return None
    try:
        return base64.b64decode(field, validate=True)
    except (binascii.Error, ValueError):
        return None


def b64_text(field: str) -> str | None:
    """A command line (NUL between its words) or name sent base64-encoded, made safe to
    show on one line by the one rule (termsafe.py): it reaches dialogs, kill reports and
    terminals. None if the field is not base64 (refused: a record is parsed strictly)."""
    raw = b64_bytes(field)
    if raw is None:
        return None
    return one_line(raw.replace(b"\0", b" ").decode(errors="replace")).strip()


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    state: str
    cmdline: str


@dataclass(frozen=True)
class PortHolder:
    """A listener on one of the job's ports. `pid` is None when its process is hidden
    from the node's user (another user's, seen by a non-root login): the socket's owner
    `uid` is still known from the kernel, and `user` is what the node calls that uid."""

    port: int
    pid: int | None
    user: str | None
    cmdline: str
    uid: int | None = None

    def describe(self) -> str:
        if self.pid is not None:
            return f"port {self.port} held by pid {self.pid} ({self.user}): {self.cmdline or '?'}"
        if self.uid is None:
            return f"port {self.port} held by a process of another user"
        name = f" ({self.user})" if self.user else ""
        return f"port {self.port} held by uid {self.uid}{name}, a process hidden from you"


def parse_proc(line: str) -> ProcInfo | None:
    """A `PROC PID STATE CMDLINE64` record (mntui_procinfo), or None."""
    m = _PROC.fullmatch(line)
    cmdline = b64_text(m[3]) if m else None
    if m is None or cmdline is None:
        return None
    return ProcInfo(int(m[1]), m[2], cmdline)


def parse_listener(line: str) -> PortHolder | None:
    """A `LISTEN PORT PID USER64 CMDLINE64`, `LISTEN PORT - UID USER64` or
    `LISTEN PORT - - -` record (mntui_listeners), or None."""
    m = _LISTEN.fullmatch(line)
    if m is None:
        return None
    if m[2] is None:  # its process is hidden from us
        if m[5] is None:
            return PortHolder(int(m[1]), None, None, "")
        name = b64_text(m[6])
        return None if name is None else PortHolder(int(m[1]), None, name or None, "", int(m[5]))
    user, cmdline = b64_text(m[3]), b64_text(m[4])
    if user is None or cmdline is None:
        return None
    return PortHolder(int(m[1]), int(m[2]), user or None, cmdline)


def parse_procs(lines: list[str]) -> tuple[ProcInfo, ...]:
    return tuple(p for p in map(parse_proc, lines) if p is not None)


def unique_holders(holders: list[PortHolder]) -> tuple[PortHolder, ...]:
    """One process listening on v4 and v6 shows twice (a hidden one: its uid twice)."""
    seen: dict[tuple[int, int | None, int | None], PortHolder] = {}
    for h in holders:
        seen.setdefault((h.port, h.pid, h.uid), h)
    return tuple(seen.values())


def parse_listeners(lines: list[str]) -> tuple[PortHolder, ...]:
    return unique_holders([h for h in map(parse_listener, lines) if h is not None])
