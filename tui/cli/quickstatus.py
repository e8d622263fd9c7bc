"""`mntui status` of a run the cluster watches, from a cold process: one `ssh` to the
main node, and neither the config's loader nor the SSH library.

Why: a cold status should cost about what a bare `ssh main true` costs (issue 30: at
most 1.5x). Loading the config (YAML, its checks, its node lists) and paramiko took
longer than the connection itself, and the coordinator's board needs neither. What
status takes from the config (the job's name, how `ssh` reaches a node, the restart
limit) is remembered here by every command that loaded it, keyed by the file's identity
(device, inode, size, mtime, ctime: any edit is a miss). The run's record says where
the run is (its main node). The board is read by launch/board.py's read_board, the
reader the ordinary path uses, over one `ssh` (ssh/oneshot.py) started as soon as the
record names the host, and shown by clusterstatus.board_status, the one place a
cluster status is made: this module only finds the run and the way to it. Anything it
does not expect (no memo, --run or --watch, a main on this machine, an `ssh` that fails
or would ask someone, a board that is stale or ended) answers None, and the ordinary
path answers instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mntui.sessions.errors import UsageError, state_dir

if TYPE_CHECKING:
    import argparse

    from mntui.sessions.config import JobConfig

MEMO = "quickstatus.json"  # in the state dir: configs -> what a quick status needs
FORMAT = 1  # bumped when an entry's fields change: an older entry is a miss
KEEP = 64  # configs remembered; the least recently written go first
READ_TIMEOUT = 10.0  # seconds for the board's script once connected (read_board's)

Say = Callable[..., None]


@dataclass(frozen=True)
class Memo:
    """What `status` needs from one config file, as it was when last loaded."""

    job: str
    ssh: tuple[str, ...]  # `ssh` and its options, up to the host (openssh.oneshot_argv)
    local: frozenset[str]  # host names that are this machine (no ssh: not ours to do)
    restarts: int
    timeout: float  # seconds for connecting and reading, together


def _identity(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _key(path: Path) -> str:
    return os.path.abspath(path)


def _load() -> dict[str, Any]:
    """The memo file, or nothing: it is a cache, and whatever it holds is checked."""
    try:
        data = json.loads((state_dir() / MEMO).read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _entry(cfg: JobConfig, identity: list[int]) -> dict[str, Any]:
    from mntui.sessions.config.settings import LOCAL_HOSTS
    from mntui.sessions.ssh.openssh import oneshot_argv

    return {
        "format": FORMAT,
        "identity": identity,
        "job": cfg.job,
        # a password is asked by the ordinary path's transport, once: no quick status then
        "ssh": oneshot_argv(cfg.ssh) if cfg.ssh.password is None else [],
        "local": sorted(LOCAL_HOSTS),
        "restarts": cfg.restart.max,
        "timeout": cfg.ssh.connect_timeout + READ_TIMEOUT,
    }


def remember(path: Path, cfg: JobConfig) -> None:
    """After a command loaded `path`: what a later quick status needs from it, written
    only when it changed. Never fails the command that calls it."""
    from mntui.sessions.runs import write_atomic

    identity = _identity(path)
    if identity is None:
        return
    memo, key = _load(), _key(path)
    entry = _entry(cfg, identity)
    if memo.get(key) == entry:
        return
    memo.pop(key, None)  # another process writing at once may win: a miss, no more
    memo[key] = entry  # last written last: the oldest are dropped first
    kept = dict(list(memo.items())[-KEEP:])
    try:
        write_atomic(state_dir() / MEMO, json.dumps(kept))
    except OSError:
        pass


def recall(path: Path) -> Memo | None:
    """The memo of `path` when the file is still the one it was made from."""
    e = _load().get(_key(path))
    if not isinstance(e, dict) or e.get("format") != FORMAT:
        return None
    identity = _identity(path)
    if identity is None or e.get("identity") != identity:
        return None
    job, ssh, local = e.get("job"), e.get("ssh"), e.get("local")
    restarts, timeout = e.get("restarts"), e.get("timeout")
    if not (
        isinstance(job, str)  # a name under the state dir, never a path
        and job[:1].isalnum()
        and "/" not in job
        and isinstance(ssh, list)
        and ssh
        and all(isinstance(w, str) for w in ssh)
        and isinstance(local, list)
        and all(isinstance(h, str) for h in local)
        and type(restarts) is int
        and isinstance(timeout, (int, float))
        and 0 < timeout < 3600
    ):
        return None
    return Memo(job, tuple(ssh), frozenset(local), restarts, float(timeout))


def quick_status(args: argparse.Namespace, say: Say) -> int | None:
    """The status of the job's latest run from its coordinator's board, or None: the
    ordinary path then answers (and reads the board again if it must)."""
    from mntui.sessions.runs import latest
    from mntui.sessions.ssh.oneshot import OneShotNode

    from .args import find_config

    if args.cmd != "status" or args.run is not None or args.watch:
        return None
    try:
        memo = recall(find_config(args.config))
    except UsageError:  # no config here: the ordinary path says so
        return None
    record = latest(memo.job) if memo is not None else None
    if memo is None or record is None or record.watch_port is None or not record.nodes:
        return None
    main = record.nodes[0]  # the record, not the config, says where the run is
    if main.host in memo.local:
        return None
    try:
        node = OneShotNode(main.node, main.host, memo.ssh)  # connecting from here on
    except OSError:  # no `ssh` on this machine
        return None
    try:  # what reads and shows the board loads while ssh connects
        from mntui.sessions.launch.board import board_dir, read_board
        from mntui.sessions.results import NodeError

        from .clusterstatus import board_status

        try:
            view = read_board(node, board_dir(record), timeout=memo.timeout, gpus=True)
        except NodeError:  # unreachable, or it would ask someone: the ordinary path's
            return None
    finally:
        node.close()
    return board_status(record, view, args.json, say, 2, memo.restarts)
