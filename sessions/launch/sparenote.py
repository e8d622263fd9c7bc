"""The spares a launch noted in a chain's first record: where each is, so the nodes of a
run the cluster restarts onto a spare, and its idle spares, are known from the record.

Why a module of its own, in the launch wing: the launch writes the note (plan.py), and
two readers above it need it without its weight (the cold `status` loads no launch
plan): the records of the cluster's attempts (watch/sparesync.py), and the user's kill,
whose direct path must reach an idle spare's sentinel when no coordinator is there to
stop it (userkill.py).
"""

from __future__ import annotations

from mntui.sessions.jsonshape import count, text
from mntui.sessions.procs import RUNS_DIR, run_tag
from mntui.sessions.runs import SPARES_NOTE, NodeRecord, RunRecord


def spares_of(first: RunRecord) -> dict[str, NodeRecord]:
    """The spares the launch noted, as nodes of the first attempt (its run id in their
    tag and run dir, as the caller moves them to the attempt's own)."""
    note = next((h for h in first.history if h.get("what") == SPARES_NOTE), None)
    out: dict[str, NodeRecord] = {}
    for s in note.get("nodes") or [] if note is not None else []:
        name = text(s.get("node")) if isinstance(s, dict) else None
        host, session = (text(s.get(k)) for k in ("host", "session")) if name else (None, None)
        if name is None or host is None or session is None:
            continue
        run_dir = f"{RUNS_DIR}/{first.job}/{first.run_id}/{name}"
        tag = run_tag(first.job, first.run_id, name)
        out[name] = NodeRecord(name, host, -1, session, tag, run_dir, nproc=count(s.get("nproc")))
    return out
