"""A restart's attempt on this node: its start script and its files, from the template
the launch left (`attempts/next.sh` and `attempts/next.json`).

Why a template and not a script per attempt: the coordinator restarts the job while
the manager may be away, as often as `restart.max` allows in a row, and `reset_after`
resets that count, so no number of attempts is known at launch. The launch renders
each node's start once, with tokens where an attempt's own values go (in the places
the launch puts them: the run dir, the tag, launch.sh's header, MNTUI_RESTART_COUNT
and the command's `{restart_count}`; on a spare NODE_RANK and `{node_rank}` too):
`@@MNTUI_RUN_<nonce>@@` the run id, `@@MNTUI_COUNT_<nonce>@@` the restart count,
`@@MNTUI_MASTER_<nonce>@@` the master address (the host of the epoch's coordinator:
a successor that took a lost main's place takes the master with it, epochs.py),
`@@MNTUI_RANK_<nonce>@@` a spare's rank. The coordinator names attempt k's run by the
launch's own rule (runid.new_run_id) and says it with the start; the sentinel puts
the values in, each checked first to be a run id, a count, an address or a rank of
the run, so what a message carries reaches a shell as digits, `-` and hex only, words no
quoting changes (shlex.quote leaves the tokens bare, and the values with them).
"""

from __future__ import annotations

import os

from mntui.sessions.node.files.plainfile import plain
from mntui.sessions.node.rules.runid import RUN_ID
from mntui.sessions.node.wire.epochs import ADDR
from mntui.sessions.node.wire.watchcfg import WatchConfig

MAX_SCRIPT = 4 << 20  # bytes: the launch's script, with the job's own setup lines
TEMPLATE = "next"  # attempts/next.sh, attempts/next.json


def run_token(nonce: str) -> str:
    return f"@@MNTUI_RUN_{nonce}@@"


def count_token(nonce: str) -> str:
    return f"@@MNTUI_COUNT_{nonce}@@"


def master_token(nonce: str) -> str:
    return f"@@MNTUI_MASTER_{nonce}@@"


def render(first_dir: str, k: int, run: object, cfg: WatchConfig, rank: object = None) -> str:
    """Writes attempt `k`'s files (attempts/<k>.json, then <k>.sh) from the template and
    returns the script's path; RuntimeError when `run` or `rank` is not one this node
    may start (a node of the run takes its own rank, given or not), or the template is
    not the launch's."""
    nonce = cfg.attempt_nonce
    if nonce is None:
        raise RuntimeError(f"attempt {k}: the launch rendered no restart for this node")
    if type(k) is not int or k < 1:
        raise RuntimeError(f"attempt {k!r} is no restart")
    if not isinstance(run, str) or not RUN_ID.fullmatch(run) or run == cfg.run:
        raise RuntimeError(f"attempt {k}: {str(run)[:40]!r} is no run id of a restart")
    if not ADDR.match(cfg.coord_host):
        raise RuntimeError(f"attempt {k}: {cfg.coord_host[:40]!r} is no master address")
    values = {run_token(nonce): run, count_token(nonce): str(cfg.restart_base + k),
              master_token(nonce): cfg.coord_host}  # fmt: skip
    if cfg.rank_token is not None:
        low = 0 if cfg.is_main else 1  # rank 0: a spare that succeeded the main
        if type(rank) is not int or not low <= rank < len(cfg.nodes):
            raise RuntimeError(f"attempt {k}: {rank!r} is no rank this spare may take")
        values[cfg.rank_token] = str(rank)
    else:
        own = cfg.nodes.index(cfg.node)
        if rank is not None and rank != own:
            raise RuntimeError(f"attempt {k}: asked for rank {rank!r}, this node runs {own}")
    base = os.path.join(first_dir, "attempts")
    info = _filled(os.path.join(base, f"{TEMPLATE}.json"), values, 1 << 16, run_token(nonce))
    script = _filled(os.path.join(base, f"{TEMPLATE}.sh"), values, MAX_SCRIPT, *values)
    _write(os.path.join(base, f"{k}.json"), info)
    out = os.path.join(base, f"{k}.sh")
    _write(out, script)
    return out


def _filled(path: str, values: dict[str, str], most: int, *needed: str) -> bytes:
    """The template at `path` with every token replaced; each of `needed` must be in it
    (a file without them is no template of this launch, and is never run)."""
    with open(path, "rb", opener=plain) as f:  # a run dir's file: never a FIFO or a link
        data = f.read(most + 1)
    name = f"attempts/{os.path.basename(path)}"
    if len(data) > most:  # cut, it would run without its end: refused, never run
        raise RuntimeError(f"{name} is over {most} bytes: not the launch's")
    text = data.decode("utf-8", "surrogateescape")
    if not all(token in text for token in needed):
        raise RuntimeError(f"{name} lacks a value this attempt needs: not the launch's")
    for token, value in values.items():
        text = text.replace(token, value)
    return text.encode("utf-8", "surrogateescape")


def _write(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = plain(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)  # 0600: the daemon's umask
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
