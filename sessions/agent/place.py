"""Where a run's agent listens, and who may talk to it: both ends' checks.

The socket is a filesystem socket in a directory of ours alone (0700, owned by us,
checked on both sides), named by a short hash of (state dir, job): a test's state dir
can be longer than the 108 bytes a socket path may have. The run's state dir records
the path (`agent.json`), since the watchdog, started in tmux, may not share our
$XDG_RUNTIME_DIR. Both ends check the peer's uid (SO_PEERCRED): a directory or a socket
someone else controls would let them stand in for the agent, or command it.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import struct
from pathlib import Path

from mntui.sessions.errors import MntuiError, runtime_dir, state_dir

AGENT_FILE = "agent.json"
SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes with its NUL


class AgentUnavailable(MntuiError):
    """No agent can serve this request; the reason is for --verbose."""


def socket_path(job: str) -> Path:
    key = hashlib.sha256(f"{state_dir()}\0{job}".encode()).hexdigest()[:16]
    return runtime_dir() / f"{key}.sock"


def check_private(directory: Path) -> None:
    """The socket's directory must be a real directory of ours that no one else can
    enter: another user's /tmp/mntui-<uid> would let them stand in for the agent."""
    try:
        st = os.lstat(directory)
    except OSError as exc:
        raise AgentUnavailable(f"{directory}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise AgentUnavailable(
            f"{directory} is not a private directory of uid {os.getuid()} "
            f"(owner {st.st_uid}, mode {stat.filemode(st.st_mode)}): not used"
        )


def make_private(directory: Path) -> Path:
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise AgentUnavailable(f"{directory}: {exc.strerror}") from None
    check_private(directory)
    return directory


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (the kernel's word)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def read_agent_file(run_dir: Path) -> tuple[Path, int]:
    """(socket path, agent pid) as the agent recorded them in the run's state dir."""
    try:
        data = json.loads((run_dir / AGENT_FILE).read_text())
        path, pid = data["socket"], data["pid"]
    except FileNotFoundError:
        raise AgentUnavailable("no agent serves this run") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AgentUnavailable(f"unreadable {AGENT_FILE}: {exc}") from None
    if not isinstance(path, str) or not isinstance(pid, int) or len(path) > SUN_PATH_MAX:
        raise AgentUnavailable(f"unreadable {AGENT_FILE}")
    return Path(path), pid
