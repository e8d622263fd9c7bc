"""`mntui status` of a run the cluster watches, from a cold process: one `ssh` to the
main node, and neither the config's loader nor the SSH library.

Why: a cold status should cost about what a bare `ssh main true` costs (issue 30: at
most 1.5x). Loading the config (YAML, its checks, its node lists) and paramiko took
longer than the connection itself, and the coordinator's board needs neither. What
status takes from the config (the job's name, how `ssh` reaches a node, the restart
limit) is remembered here by every command that loaded it, keyed by the file's identity
(device, inode, size, mtime, ctime: any edit is a miss; prestart.py holds the memo's
rule). The run's record says where the run is (its main node). The board is read by
launch/board.py's read_board, the reader the ordinary path uses, over one `ssh`
(ssh/oneshot.py) that prestart.py started before the CLI loaded (else started as soon
as the record names the host), and shown by clusterstatus.board_status, the one place a
cluster status is made: this module only finds the run and the way to it. Anything it
does not expect (no memo, --run or --watch, a main on this machine, an `ssh` that fails
or would ask someone, a board that is stale or ended) answers None, and the ordinary
path answers instead.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from mntui.sessions.errors import UsageError, state_dir

from .prestart import FORMAT, MEMO, identity, load_memo, memo_entry

if TYPE_CHECKING:
    from mntui.sessions.config import JobConfig
    from mntui.sessions.runs import RunRecord

KEEP = 64  # configs remembered; the least recently written go first
READ_TIMEOUT = 10.0  # seconds for the board's script once connected (read_board's)
NO_ANSWER = -1  # quick_status's None through guarded: the ordinary path answers

Say = Callable[..., None]


@dataclass(frozen=True)
class Memo:
    """What `status` needs from one config file, as it was when last loaded."""

    job: str
    ssh: tuple[str, ...]  # `ssh` and its options, up to the host (openssh.oneshot_argv)
    local: frozenset[str]  # host names that are this machine (no ssh: not ours to do)
    restarts: int
    timeout: float  # seconds for connecting and reading, together


def _entry(cfg: JobConfig, now: list[int]) -> dict[str, Any]:
    from mntui.sessions.config.settings import LOCAL_HOSTS
    from mntui.sessions.ssh.openssh import oneshot_argv

    return {
        "format": FORMAT,
        "identity": now,
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

    now = identity(path)
    if now is None:
        return
    memo, key = load_memo(), os.path.abspath(path)
    entry = _entry(cfg, now)
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
    e = memo_entry(path)
    if e is None:
        return None
    return Memo(
        e["job"], tuple(e["ssh"]), frozenset(e["local"]), e["restarts"], float(e["timeout"])
    )


def _cluster_run(config: str | None) -> tuple[Memo, RunRecord] | None:
    """The memo of the command's config and the job's latest run, when the cluster
    watches that run and its main is reached over `ssh` from here."""
    from mntui.sessions.runs import latest
    from mntui.sessions.watch.reading import by_cluster

    from .configpath import find_config

    try:
        memo = recall(find_config(config))
    except UsageError:  # no config here: the ordinary path says so
        return None
    record = latest(memo.job) if memo is not None else None
    if memo is None or record is None or not by_cluster(record):
        return None
    if record.main.host in memo.local:  # the record, not the config, says where
        return None
    return memo, record


def answer(config: str | None, as_json: bool) -> int | None:
    """The process's own plain `[-c FILE] status [--json]` (prestart.plain_form's), when
    the board answers, before the CLI's grammar is loaded; else None, and the ordinary
    path answers. Why before: argparse and building the CLI's parser are ~20 ms of CPU
    (three times that under a 128-node job's load) taken from the ssh handshake that
    runs meanwhile on the same cores, for a command line already read."""
    from .guard import guarded, restore_signals, unwind_on_signals
    from .output import say

    before = unwind_on_signals()
    code = guarded("status", lambda: _quick_code(config, as_json, say))
    if code == NO_ANSWER:
        restore_signals(before)
        return None
    return leave(code)


def _quick_code(config: str | None, as_json: bool, say: Say) -> int:
    code = quick_status(config, as_json, say)
    return NO_ANSWER if code is None else code


def quick_status(config: str | None, as_json: bool, say: Say) -> int | None:
    """The status of the job's latest run from its coordinator's board, or None: the
    ordinary path then answers (and reads the board again if it must)."""
    from mntui.sessions.ssh import early
    from mntui.sessions.ssh.oneshot import OneShotNode

    found = _cluster_run(config)
    if found is None:
        return None
    memo, record = found
    main = record.main
    try:
        # connecting from here on, or since the process began (prestart.py)
        node = early.take(main.host, memo.ssh) or OneShotNode(main.node, main.host, memo.ssh)
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
    return board_status(record, view, as_json, say, 2, memo.restarts)


def leave(code: int) -> NoReturn:
    """The end of a process whose own command line was a status the board answered
    (entry.main; never a caller's in-process call): its lines are out, so it exits
    without the interpreter's teardown, ~10 ms of CPU (~20 ms of a loaded machine's
    wall time) after the answer, where the yardstick is a bare `ssh main true`. What
    was registered to run at exit still runs."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: output.py already let it go
            pass
    os._exit(code)
