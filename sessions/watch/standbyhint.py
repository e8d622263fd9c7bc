"""`status`'s one line on a run the cluster watches whose main does not answer: whether
this machine stands by to replace it, and what to do when nothing does.

Why apart from fromcluster.py's watch line: the coordinator runs on the main, so a
main that is gone is the one thing the cluster cannot mend; only a process attached
here can (recover/standby.py, started by `mntui watch` or the app's hand-over). The
line says which of three it is: someone stands by, nobody does (the command that
would), or the stand-by found no way on (its note on the record says why). A stand-by
that sees the main silent and does not act yet says why in `standby.json` beside the
chain's lock (which workers it waits for, or why it will not act): its own log is not
where a user looks, and a wait that never ends must be seen where the run is.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from mntui.sessions.runs import RunRecord, write_atomic
from mntui.sessions.termsafe import one_line

LOST_NOTE = "main-lost"  # the stand-by's note when the chain could not go on (mainswap.py)
WORD = "standby.json"  # the stand-by's reason for not acting on a silent main, while it has one
WORD_MAX = 4096  # bytes of it read: a few hundred are written


def standby_hint(record: RunRecord) -> str:
    """The tail of the watch line, `; ...`, when the main did not answer."""
    note = next((h for h in reversed(record.history) if h.get("what") == LOST_NOTE), None)
    if note is not None:
        why = one_line(str(note.get("why") or "?"))[:300]
        return (f"; this machine could not replace it: {why}; `mntui kill` stops what is "
                "left, `mntui launch --restart` starts the job again")  # fmt: skip
    if not record.status.is_live:
        return ""
    from mntui.sessions.launch.chains import chain_of, guarded  # only for a silent main

    view = chain_of(record.job, record)
    if view is not None and guarded(view):
        waits = waiting_why(record)
        if waits is not None:
            return f"; this machine stands by and does not act yet: {waits}"
        return "; this machine stands by: if the main is lost, a spare takes its place"
    return (
        "; nothing here stands by: if the main is lost, `mntui watch` restarts the job "
        "on a spare (restart.max, spares), `mntui kill` stops it"
    )


def _word(record: RunRecord) -> Path:
    """Beside the chain's lock (chains.guard_chain): one stand-by a chain, whichever of its
    records `status` shows."""
    return record.dir.parent / (record.chain or record.run_id) / WORD


def say_waiting(record: RunRecord, why: str | None) -> None:
    """The stand-by's reason (None: it has none now, the main answers), written when it
    changes; a write that fails costs only the line in `status`."""
    path = _word(record)
    try:
        if why is None:
            path.unlink(missing_ok=True)
        else:
            write_atomic(path, json.dumps({"at": time.time(), "why": why[:1000]}))
    except OSError:
        pass


def waiting_why(record: RunRecord) -> str | None:
    """The reason, with the time it was given, or None (none, or not in shape: the file
    is this machine's own, but read as data all the same)."""
    try:
        with open(_word(record), "rb") as fh:
            data = json.loads(fh.read(WORD_MAX))
    except (OSError, ValueError, RecursionError):
        return None
    why = data.get("why") if isinstance(data, dict) else None
    at = data.get("at") if isinstance(data, dict) else None
    if not isinstance(why, str) or not why:
        return None
    since = ""
    if isinstance(at, (int, float)) and not isinstance(at, bool):
        since = f" (since {time.strftime('%H:%M:%S', time.localtime(at))})"
    return one_line(why)[:300] + since
