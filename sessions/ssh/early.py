"""An `ssh` to a node started before the command knows it will need it.

Why: a cold `mntui status` or `mntui kill` of a run the cluster watches is one fresh
`ssh` to the main node (tui/cli/quickstatus.py, launch/coordkill.py), and its handshake
is most of the command's time. The command only knows to make it after loading its
grammar, handlers, config and the run's records (a kill: YAML, the SSH stack, the
launch's modules, ~0.15 s, far more on a loaded machine), yet the host and the ssh
options are known from the start (tui/cli/prestart.py reads the memo and the record):
started then, the handshake runs while the rest loads. Whoever needs the connection
takes it only when it is exactly the one it would have made (same host, same argv);
one nobody took is stopped at exit. Nothing else depends on it: no early connection is
the ordinary path.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Sequence

from .oneshot import OneShotNode

_lock = threading.Lock()
_started: dict[tuple[str, str, tuple[str, ...]], OneShotNode] = {}
SWEEP = "sweep"  # a kill's final sweep (launch/userkill.py): one to each node of the run


def start(name: str, host: str, argv: Sequence[str], purpose: str = "") -> None:
    """Starts `argv ... host sh -s` now, for `take` (OSError: no `ssh`, nothing started).
    `purpose`: one connection per host for each (a kill's request to the main and its
    sweep of the main are two)."""
    key = (purpose, host, tuple(argv))
    with _lock:
        if key in _started:
            return
        if not _started:
            atexit.register(close_all)
        _started[key] = OneShotNode(name, host, argv)


def take(host: str, argv: Sequence[str], purpose: str = "") -> OneShotNode | None:
    """The connection started for exactly this host, argv and purpose, once; None if
    none was."""
    with _lock:
        return _started.pop((purpose, host, tuple(argv)), None)


def close_all() -> None:
    """Stops what nobody took (the kill went another way, or failed before asking)."""
    with _lock:
        left = list(_started.values())
        _started.clear()
    for node in left:
        node.close()
