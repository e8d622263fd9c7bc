"""The `ssh` a cold `mntui status` or `mntui kill` of a run the cluster watches makes,
started first thing, before the CLI's grammar and handlers load (a kill also starts
one to each node of the run for its final sweep, launch/userkill.py).

Why: both are one connection to the run's main node (quickstatus.py, launch/coordkill.py)
and its handshake is most of their time; yet the process spent ~35 ms (more on a loaded
machine) importing argparse, the handlers, dataclasses and the run records before it
started ssh, as much again as a bare interpreter costs, when a bare `ssh main true` is
the yardstick (issue 30: a status at most 1.5x it). So the command line is read here
first, narrowly: only the plain forms (`[-c FILE] status [--json]`, `[-c FILE] kill
[--grace S] [-v]`); anything else starts nothing. What it reads is the memo of the
config (its rule is here: memo_entry) and the job's latest record, read raw: the host.
It is only a head start: the command takes the connection (ssh/early.py) only when it is
exactly the one it would make itself, after its own checks; one nobody took is stopped
at exit. This module imports neither dataclasses nor the records' module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .configpath import DEFAULT_CONFIG

MEMO = "quickstatus.json"  # in the state dir: configs -> what a quick status needs
FORMAT = 1  # bumped when an entry's fields change: an older entry is a miss
RECORD_MAX = 4 << 20  # bytes of a run record read here (a 1000-node record is ~300 KB)
# the options each verb may have for a head start (any other word: none)
FLAGS = {"status": frozenset({"--json"}), "kill": frozenset({"-v", "--verbose"})}
VALUED = {"status": frozenset(), "kill": frozenset({"--grace"})}


def identity(path: Path) -> list[int] | None:
    """The config file as it is now: any edit is another identity."""
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def state_dir() -> Path:
    from mntui.sessions.errors import state_dir as state

    return state()


def load_memo() -> dict[str, Any]:
    """The memo file, or nothing: it is a cache, and whatever it holds is checked."""
    try:
        data = json.loads((state_dir() / MEMO).read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def memo_entry(path: Path) -> dict[str, Any] | None:
    """The memo of `path` when the file is still the one it was made from, its fields
    checked (quickstatus.recall makes its Memo of this)."""
    e = load_memo().get(os.path.abspath(path))
    if not isinstance(e, dict) or e.get("format") != FORMAT:
        return None
    now = identity(path)
    if now is None or e.get("identity") != now:
        return None
    job, ssh, local = e.get("job"), e.get("ssh"), e.get("local")
    timeout = e.get("timeout")
    ok = (
        isinstance(job, str)  # a name under the state dir, never a path
        and job[:1].isalnum()
        and "/" not in job
        and isinstance(ssh, list)
        and bool(ssh)
        and all(isinstance(w, str) for w in ssh)
        and isinstance(local, list)
        and all(isinstance(h, str) for h in local)
        and type(e.get("restarts")) is int
        and isinstance(timeout, (int, float))
        and 0 < timeout < 3600
    )
    return e if ok else None


def plain_form(argv: Sequence[str]) -> tuple[str, str | None, frozenset[str]] | None:
    """(verb, the -c given or None, the flags given) for the plain forms above, else
    None. What argparse would make of the same words (test_prestart.py checks)."""
    verb: str | None = None
    config: str | None = None
    flags: set[str] = set()
    words = list(argv)
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("-c", "--config") and i + 1 < len(words):
            config, i = words[i + 1], i + 2
            continue
        if w.startswith("--config="):
            config = w.partition("=")[2]
        elif verb is None and w in FLAGS:
            verb = w
        elif verb is not None and w in FLAGS[verb]:
            flags.add(w)
        elif verb is not None and w in VALUED[verb] and i + 1 < len(words):
            i += 1
        else:
            return None  # a node name, --run, --watch, an abbreviation, a typo: no guess
        i += 1
    return (verb, config, frozenset(flags)) if verb is not None else None


def nodes_of(job: str) -> list[tuple[str, str]] | None:
    """(node, host) of each node of the job's latest run when the cluster watches it,
    its main first, from its record read raw (the command reads it again, checked,
    before it takes a connection)."""
    base = state_dir() / job
    try:
        run = (base / "latest").read_text().strip()
        if not run or not all(c.isalnum() or c == "-" for c in run):
            return None
        with open(base / run / "run.json", "rb") as f:
            data = json.loads(f.read(RECORD_MAX))
    except (OSError, ValueError, RecursionError):
        return None
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, list) or not nodes or type(data.get("watch_port")) is not int:
        return None
    # RunRecord.main's rule, on the raw record: the rank-0 node, else the first
    main = next((n for n in nodes if isinstance(n, dict) and n.get("rank") == 0), nodes[0])
    out = [
        (n.get("node"), n.get("host"))
        for n in [main, *(n for n in nodes if n is not main)]
        if isinstance(n, dict)
    ]
    ok = [(n, h) for n, h in out if isinstance(n, str) and isinstance(h, str)]
    return ok if ok and out and ok[0] == out[0] else None


def prestart(argv: Sequence[str]) -> tuple[str, str | None, frozenset[str]] | None:
    """Starts the main's ssh when `argv` is a plain cold status or whole kill of a run the
    cluster watches, reached over ssh from here; returns the plain form (plain_form's),
    whether or not it started one. Never fails the command."""
    try:
        form = plain_form(argv)
        if form is None:
            return None
        path = Path(form[1]) if form[1] else Path(DEFAULT_CONFIG)
        memo = memo_entry(path)
        nodes = nodes_of(memo["job"]) if memo is not None else None
        if memo is None or nodes is None or nodes[0][1] in memo["local"]:
            return form
        from mntui.sessions.ssh import early

        early.start(nodes[0][0], nodes[0][1], memo["ssh"])
        if form[0] == "kill":  # its final sweep, after the coordinator's answer: every node
            for node, host in nodes:
                if host not in memo["local"]:
                    early.start(node, host, memo["ssh"], early.SWEEP)
        return form
    except Exception:  # a head start only: the command finds out its own way
        return None
