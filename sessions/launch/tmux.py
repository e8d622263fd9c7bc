"""The only module that builds tmux command lines.

Remote tmux is driven through shell snippets that run on the node (one round trip
carries many of them); the local tiled `attach --all` view uses libtmux. Targets are
always exact (`=name`), because tmux otherwise matches prefixes and `job-g1` would
hit `job-g10`.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

# Session names are one-to-one: two jobs, or two nodes of one job on one host, that
# shared a session would kill each other's. tmux turns '.' and ':' into '_' and reads
# '#' as a format, so the encoding maps (job, node) into [A-Za-z0-9_,+%@-] one-to-one:
#   node session  <job'>-<node'>  job' = job with '-' -> '+', node' = node with '.' -> ','
#                 (a character outside the names' alphabets -> its UTF-8 bytes as %XX)
#   tiled view    mntui@all-<job'>
# job' has no '-', so the first '-' splits a node session; '+', ',' and '%' appear only
# as codes; '@' appears only in mntui's own sessions, which differ in their fixed prefix.
# The common case reads as before: job `qwen`, node `g369` -> `qwen-g369`.
_JOB_KEEP = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_NODE_KEEP = _JOB_KEEP | {"-"}


def _encode(text: str, keep: frozenset[str], codes: dict[str, str]) -> str:
    return "".join(
        c if c in keep else codes.get(c) or "".join(f"%{b:02X}" for b in c.encode()) for c in text
    )


def _job_part(job: str) -> str:
    return _encode(job, _JOB_KEEP, {"-": "+"})


def session_name(job: str, node: str) -> str:
    """The tmux session of `node` in `job`, one-to-one (see the encoding above)."""
    return f"{_job_part(job)}-{_encode(node, _NODE_KEEP, {'.': ','})}"


def tiled_session_name(job: str) -> str:
    """The local `attach --all` view of `job`."""
    return f"mntui@all-{_job_part(job)}"


def exact(session: str) -> str:
    return f"={session}"


def pane(session: str) -> str:
    return f"={session}:"


def new_session(session: str, cwd: str, command: str, width: int = 200, height: int = 50) -> str:
    """Start `command` detached; the pane stays after exit so its last words can be read.

    `remain-on-exit` is set in the same tmux invocation so a command that dies at once
    still leaves its pane behind. `cwd` is a shell expression (it may start with $HOME).
    """
    name, target = shlex.quote(session), shlex.quote(pane(session))
    return (
        f"tmux new-session -d -s {name} -x {width} -y {height} -c {cwd} {shlex.quote(command)}"
        f" \\; set-option -t {target} remain-on-exit on"
    )


SERVER_RACE_TRIES = 5


def retry_server_exit(command: str) -> str:
    """`command` (a tmux call), tried again while tmux says "server exited unexpectedly":
    a session started right after the server's last one was killed can meet the server
    on its way out (1 in 3 relaunches here). Any other error is printed and fails at once."""
    return f"""i=0
until err=$({command} 2>&1); do
  i=$((i + 1))
  case $err in
    *"server exited unexpectedly"*) [ "$i" -lt {SERVER_RACE_TRIES} ] && sleep 0.2 && continue ;;
  esac
  printf '%s\\n' "$err" >&2
  exit 1
done"""


def kill_session(session: str) -> str:
    return f"tmux kill-session -t {shlex.quote(exact(session))} 2>/dev/null"


def has_session(session: str) -> str:
    return f"tmux has-session -t {shlex.quote(exact(session))} 2>/dev/null"


def session_in(session: str, cwd: str) -> str:
    """Succeeds when `session` exists and was started in `cwd` (a shell word, as given to
    `new_session`): the name is the job's on a node, the directory tells whose run it holds."""
    path = f"tmux display-message -p -t {shlex.quote(pane(session))} '#{{session_path}}'"
    return f'[ "$({path} 2>/dev/null)" = {cwd} ]'


@dataclass(frozen=True)
class PaneStatus:
    dead: bool
    pid: int
    dead_status: int | None  # the command's exit status, once the pane is dead


# One field list builds the format tmux prints and the parser that reads it back
# (libtmux's neo.py does the same): (tmux format variable, what its value may be).
PANE_FIELDS = (
    ("pane_dead", "[01]"),
    ("pane_pid", "[0-9]{1,10}"),
    ("pane_dead_status", "-?[0-9]{0,10}"),
)
_PANE_FORMAT = " ".join(f"#{{{name}}}" for name, _ in PANE_FIELDS)
_PANE_RE = re.compile(" ".join(f"({pattern})" for _, pattern in PANE_FIELDS), re.ASCII)


def pane_status(session: str) -> str:
    """Prints the pane's PANE_FIELDS (`parse_pane_status` reads them); see `no_pane`
    for what it prints when there is no such pane."""
    target = shlex.quote(pane(session))
    return f"tmux display-message -p -t {target} {shlex.quote(_PANE_FORMAT)} 2>/dev/null"


def format_pane_status(status: PaneStatus) -> str:
    """What `pane_status` prints for `status`: a poll that knows the pane's process is
    alive says so without asking tmux."""
    code = "" if status.dead_status is None else str(status.dead_status)
    return " ".join((str(int(status.dead)), str(status.pid), code))


def no_pane(text: str) -> bool:
    """What `pane_status` prints when there is no such pane: nothing (no tmux server),
    or the fields all empty (tmux 3.3, a server without that session)."""
    return not text.strip(" ")


def parse_pane_status(text: str) -> PaneStatus | None:
    """None unless `text` is exactly what `pane_status` prints for a pane."""
    m = _PANE_RE.fullmatch(text)
    if m is None:
        return None
    dead, pid, code = m.groups()
    return PaneStatus(dead == "1", int(pid), int(code) if code not in ("", "-") else None)


def attach_argv(session: str, *, inside_tmux: bool) -> list[str]:
    if inside_tmux:
        return ["tmux", "switch-client", "-t", exact(session)]
    return ["tmux", "attach-session", "-t", exact(session)]


def remote_attach_command(session: str) -> str:
    """The command ssh runs on the node; `exec` so detaching ends the ssh session."""
    return f"exec tmux attach-session -t {shlex.quote(exact(session))}"


@dataclass(frozen=True)
class TiledPane:
    title: str
    argv: Sequence[str]


def tiled_session(name: str, panes: Sequence[TiledPane]) -> str:
    """Build (or rebuild) a local session holding one tiled pane per node."""
    import libtmux

    server = libtmux.Server()
    for old in server.sessions.filter(session_name=name):
        old.kill()
    first, *rest = panes
    session = server.new_session(
        session_name=name, window_name=name, attach=False, window_command=shlex.join(first.argv)
    )
    window = session.active_window
    window.set_option("remain-on-exit", "on")
    for p in rest:
        window.split(shell=shlex.join(p.argv))
        window.select_layout("tiled")
    window.set_option("pane-border-status", "top")
    for pane_, tp in zip(window.panes, panes, strict=False):
        pane_.cmd("select-pane", "-T", tp.title)
    window.select_layout("tiled")
    return name


def inside_tmux() -> bool:
    return bool(os.environ.get("TMUX"))
