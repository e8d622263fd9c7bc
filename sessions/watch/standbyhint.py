"""`status`'s one line on a run the cluster watches whose main does not answer: whether
this machine stands by to replace it, and what to do when nothing does.

Why apart from fromcluster.py's watch line: the coordinator runs on the main, so a
main that is gone is the one thing the cluster cannot mend; only a process attached
here can (recover/standby.py, started by `mntui watch` or the app's hand-over). The
line says which of three it is: someone stands by, nobody does (the command that
would), or the stand-by found no way on (its note on the record says why).
"""

from __future__ import annotations

from mntui.sessions.runs import RunRecord
from mntui.sessions.termsafe import one_line

LOST_NOTE = "main-lost"  # the stand-by's note when the chain could not go on (mainswap.py)


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
        return "; this machine stands by: if the main is lost, a spare takes its place"
    return (
        "; nothing here stands by: if the main is lost, `mntui watch` restarts the job "
        "on a spare (restart.max, spares), `mntui kill` stops it"
    )
