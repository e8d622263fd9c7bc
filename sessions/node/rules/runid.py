"""A run id: its shape and the one rule that makes one, for the node side (a watch
file, the coordinator naming a restart's attempt) and this machine (the launch names
its run with it; runs.py re-exports the shape: `--run`, the state dir's runs).

Why a module of its own: the rule is a regex, and every reader of a run record checks
it; reading it from the watch file's module loaded the judge's and the restarts'
settings into every `mntui status` too. The maker is here beside it because the
coordinator names each restart's run when it starts it (a launch renders no attempt
ahead), and an id it names must be one this machine would have named.
"""

from __future__ import annotations

import re
import secrets
import time

RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{4}\Z")


def new_run_id(now: float | None = None) -> str:
    """`<local date>-<time>-<4 hex>`: sorts by start, and two runs of one second differ."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now if now is not None else time.time()))
    return f"{stamp}-{secrets.token_hex(2)}"
